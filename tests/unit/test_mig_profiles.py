"""NVIDIA's MIG profile tables against NVIDIA's published values.

Sources: the MIG user guide's "Supported MIG Profiles" tables (names, instance
counts, compute and memory fractions) and its "Getting Started" `nvidia-smi mig
-lgip` / `-lgipp` listings (profile ids 19, 20, 15, 14, 9, 5, 0; placements
{0..6}:1, {0..6}:1, {0,2,4,6}:2, {0,2,4}:2, {0,4}:4, {0}:4, {0}:8), and nvml.h
through the installed nvidia-ml-py for the `NVML_GPU_INSTANCE_PROFILE_*` values:
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html
"""

from __future__ import annotations

import itertools
import warnings

import pytest

from dra_driver.objects.mig_profiles import (
    A100_40GB,
    A100_80GB,
    CARDS,
    GIB,
    H100_80GB,
    H200_141GB,
    MigCard,
    Placement,
    mig_card,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import pynvml

# name -> (compute slices, memory slices, max instances), per the user guide's tables
PUBLISHED = {
    A100_40GB: {
        "1g.5gb": (1, 1, 7),
        "1g.5gb+me": (1, 1, 1),
        "1g.10gb": (1, 2, 4),
        "2g.10gb": (2, 2, 3),
        "3g.20gb": (3, 4, 2),
        "4g.20gb": (4, 4, 1),
        "7g.40gb": (7, 8, 1),
    },
    A100_80GB: {
        "1g.10gb": (1, 1, 7),
        "1g.10gb+me": (1, 1, 1),
        "1g.20gb": (1, 2, 4),
        "2g.20gb": (2, 2, 3),
        "3g.40gb": (3, 4, 2),
        "4g.40gb": (4, 4, 1),
        "7g.80gb": (7, 8, 1),
    },
    H100_80GB: {
        "1g.10gb": (1, 1, 7),
        "1g.10gb+me": (1, 1, 1),
        "1g.20gb": (1, 2, 4),
        "2g.20gb": (2, 2, 3),
        "3g.40gb": (3, 4, 2),
        "4g.40gb": (4, 4, 1),
        "7g.80gb": (7, 8, 1),
    },
    H200_141GB: {
        "1g.18gb": (1, 1, 7),
        "1g.18gb+me": (1, 1, 1),
        "1g.35gb": (1, 2, 4),
        "2g.35gb": (2, 2, 3),
        "3g.71gb": (3, 4, 2),
        "4g.71gb": (4, 4, 1),
        "7g.141gb": (7, 8, 1),
    },
}

LGIPP = {
    19: ((0, 1, 2, 3, 4, 5, 6), 1),
    20: ((0, 1, 2, 3, 4, 5, 6), 1),
    15: ((0, 2, 4, 6), 2),
    14: ((0, 2, 4), 2),
    9: ((0, 4), 4),
    5: ((0,), 4),
    0: ((0,), 8),
}

NVML_ENUM = {
    19: pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE,
    20: pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
    15: pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
    14: pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE,
    9: pynvml.NVML_GPU_INSTANCE_PROFILE_3_SLICE,
    5: pynvml.NVML_GPU_INSTANCE_PROFILE_4_SLICE,
    0: pynvml.NVML_GPU_INSTANCE_PROFILE_7_SLICE,
}

# -lgip memory (GiB as printed) and SMs for 1g, 1g with two memory slices, 2g, 3g, 4g, 7g
LGIP = {
    A100_40GB: ((4.75, 9.62, 9.62, 19.50, 19.50, 39.25), (14, 14, 28, 42, 56, 98)),
    A100_80GB: ((9.50, 19.50, 19.50, 39.25, 39.25, 79.00), (14, 14, 28, 42, 56, 98)),
    H100_80GB: ((9.75, 19.62, 19.62, 39.50, 39.50, 79.25), (16, 26, 32, 60, 64, 132)),
}


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.model)
def test_names_slices_and_counts_match_the_user_guide(card: MigCard):
    assert {
        p.name: (p.compute_slices, p.memory_slices, p.max_instances) for p in card.profiles
    } == PUBLISHED[card]
    assert (card.compute_slices, card.memory_slices) == (7, 8)


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.model)
def test_profile_ids_enums_and_placements_match_nvidia_smi_and_nvml(card: MigCard):
    for profile in card.profiles:
        starts, size = LGIPP[profile.profile_id]
        assert profile.placements == tuple(Placement(s, size) for s in starts), profile.name
        assert profile.nvml_profile == NVML_ENUM[profile.profile_id], profile.name
        assert profile.memory_slices == size


@pytest.mark.parametrize("card", [A100_40GB, A100_80GB, H100_80GB], ids=lambda c: c.model)
def test_memory_and_sms_match_nvidia_smi_lgip(card: MigCard):
    memory, sms = LGIP[card]
    ordered = [card.profiles[i] for i in (0, 2, 3, 4, 5, 6)]
    assert [int(p.memory_mib / 1024 * 100) / 100 for p in ordered] == list(memory)
    assert [p.multiprocessors for p in ordered] == list(sms)
    assert card.profiles[1].memory_mib == card.profiles[0].memory_mib
    assert card.memory_from_nvml


def test_h200_memory_is_flagged_as_taken_from_the_names():
    assert not H200_141GB.memory_from_nvml
    assert [p.memory_bytes // GIB for p in H200_141GB.profiles] == [18, 18, 35, 35, 71, 71, 141]


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.model)
def test_placements_stay_on_the_card_and_never_overlap_within_a_profile(card: MigCard):
    for profile in card.profiles:
        for placement in profile.placements:
            assert placement.start >= 0 and placement.end <= card.memory_slices
            assert placement.start % placement.size == 0 or placement.size == 1
        if len(profile.placements) == profile.max_instances:
            for a, b in itertools.combinations(profile.placements, 2):
                assert not a.overlaps(b), (profile.name, a, b)


def test_placement_overlap_is_by_memory_slices():
    assert Placement(0, 4).overlaps(Placement(3, 1))
    assert not Placement(0, 4).overlaps(Placement(4, 4))
    assert Placement(6, 2).overlaps(Placement(6, 1))
    assert str(Placement(4, 4)) == "4:4"


@pytest.mark.parametrize(
    ("name", "memory", "model"),
    [
        ("NVIDIA A100-SXM4-40GB", 40 * GIB, "A100-40GB"),
        ("NVIDIA A100-PCIE-40GB", 40 * GIB, "A100-40GB"),
        ("NVIDIA A100-SXM4-80GB", 80 * GIB, "A100-80GB"),
        ("NVIDIA A100 80GB PCIe", 80 * GIB, "A100-80GB"),
        ("NVIDIA H100 80GB HBM3", 80 * GIB, "H100-80GB"),
        ("NVIDIA H100 PCIe", 80 * GIB, "H100-80GB"),
        ("NVIDIA H200", 141 * GIB, "H200-141GB"),
        ("NVIDIA H100 NVL", 94 * GIB, None),
        ("NVIDIA A30", 24 * GIB, None),
        ("NVIDIA L4", 24 * GIB, None),
    ],
)
def test_cards_are_told_apart_by_name_and_memory(name: str, memory: int, model: str | None):
    card = mig_card(name, memory)
    assert (card.model if card else None) == model
