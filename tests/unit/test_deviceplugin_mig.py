"""The legacy device plugin's MIG side on a mock H100 in MIG mode: the register entry
in HAMi's shape (`getAPIDevices`/`discoverMigProfiles` in HAMi's
pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go), HAMi's
`migProfileAllowlist` and its validation (`ValidateMigProfileAllowlist`), and the
instances Allocate creates for `hami.io/vgpu-mig-allocations` entries. Profile
memory, slices and placements are NVIDIA's H100 80GB table (MIG user guide,
"Supported MIG Profiles"), as the mock backend serves it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from api.hami_annotations import (
    ContainerDevice,
    MigAllocation,
    decode_mig_allocations,
    decode_node_devices,
)
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.mig_allowlist import (
    AllowedMigProfiles,
    load_mig_allowlist,
    parse_mig_allowlist,
)
from kubeletplugin.deviceplugin.allocation import AllocateError, ContainerGrant, PodRef
from kubeletplugin.deviceplugin.devices import register_annotation
from kubeletplugin.deviceplugin.mig_allocate import MigAllocator
from kubeletplugin.gpus import MockBackend
from kubeletplugin.slices import SliceSettings

H100 = "GPU-00000000-0000-0000-0000-0000000000h1"
T4 = "GPU-00000000-0000-0000-0000-0000000000t4"
CARDS = f"""
gpus:
  - {{uuid: {H100}, index: 0, memory: 80Gi, productName: NVIDIA H100 80GB HBM3,
     mig: {{instances: [{{profile: 3g.40gb, start: 4}}]}}}}
  - {{uuid: {T4}, index: 1, memory: 15Gi, productName: Tesla T4}}
"""


@pytest.fixture
def backend(tmp_path: Path) -> MockBackend:
    path = tmp_path / "gpus.yaml"
    path.write_text(CARDS)
    return MockBackend(path)


def test_mig_card_registers_in_hamis_shape(backend: MockBackend) -> None:
    allowlist = (AllowedMigProfiles(("H100",), ("3g.40gb", "1g.10gb", "5g.60gb")),)
    value = register_annotation(backend.discover(), SliceSettings(), allowlist)
    # HAMi: mode mig, memory unscaled, cores 100, count the largest instance count, the
    # allowlist's profiles in its order (one the card lacks left out), core = SMs of the
    # profile as a share of the full card's 132, rounded up (16 -> 13, 60 -> 46).
    mig_entry = (
        f'{{"id":"{H100}","count":7,"devmem":81920,"devcore":100,'
        '"type":"NVIDIA H100 80GB HBM3","mode":"mig","migProfiles":['
        '{"name":"3g.40gb","memoryMB":40448,"core":46,"sliceCount":4,'
        '"placements":[{"start":0,"size":4},{"start":4,"size":4}]},'
        '{"name":"1g.10gb","memoryMB":9984,"core":13,"sliceCount":1,"placements":['
        + ",".join(f'{{"start":{i},"size":1}}' for i in range(7))
        + "]}],"
        '"health":true}'
    )
    shared_entry = (
        f'{{"id":"{T4}","index":1,"count":10,"devmem":15360,"devcore":100,'
        '"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true}'
    )
    assert value == f"[{mig_entry},{shared_entry}]"
    decoded = decode_node_devices(value)
    assert [p.name for p in decoded[0].mig_profiles] == ["3g.40gb", "1g.10gb"]
    assert decoded[1].mig_profiles == ()


def test_without_allowlist_every_profile_is_registered(backend: MockBackend) -> None:
    decoded = decode_node_devices(register_annotation(backend.discover(), SliceSettings()))
    names = [p.name for p in decoded[0].mig_profiles]
    assert names == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]


def test_mig_card_no_allowlist_entry_names_is_left_out(backend: MockBackend) -> None:
    allowlist = (AllowedMigProfiles(("A100",), ("1g.5gb",)),)
    decoded = decode_node_devices(
        register_annotation(backend.discover(), SliceSettings(), allowlist)
    )
    assert [d.id for d in decoded] == [T4]


def test_allowlist_read_from_hamis_device_config(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "nvidia": {
                    "deviceSplitCount": 10,
                    "migProfileAllowlist": [
                        {"models": ["A100-SXM4-40GB"], "profiles": ["1g.5gb", "2g.10gb"]},
                        {"models": ["H100"], "profiles": ["1g.10gb"]},
                    ],
                }
            }
        )
    )
    assert load_mig_allowlist(path) == (
        AllowedMigProfiles(("A100-SXM4-40GB",), ("1g.5gb", "2g.10gb")),
        AllowedMigProfiles(("H100",), ("1g.10gb",)),
    )
    assert parse_mig_allowlist({"nvidia": {"deviceSplitCount": 3}}) is None


@pytest.mark.parametrize(
    ("allowlist", "field"),
    [
        ([{"models": [], "profiles": ["1g.5gb"]}], r"migProfileAllowlist\[0\]\.models"),
        ([{"models": ["A100"]}], r"migProfileAllowlist\[0\]\.profiles"),
        (
            [
                {"models": ["A100"], "profiles": ["1g.5gb"]},
                {"models": ["H100"], "profiles": ["x.10gb"]},
            ],
            r"migProfileAllowlist\[1\]\.profiles\[0\]: invalid MIG profile 'x.10gb'",
        ),
        ([{"models": ["H100"], "profiles": ["3g"]}], r"profiles\[0\]: invalid MIG profile '3g'"),
        ({"models": ["H100"]}, r"nvidia\.migProfileAllowlist: must be a list"),
    ],
)
def test_bad_allowlist_is_refused_naming_the_field(
    tmp_path: Path, allowlist: object, field: str
) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(yaml.safe_dump({"nvidia": {"migProfileAllowlist": allowlist}}))
    with pytest.raises(InvalidParameterError, match=field):
        load_mig_allowlist(path)


def _grant(position: int = 0, cards: tuple[str, ...] = (H100,)) -> ContainerGrant:
    return ContainerGrant(
        pod=PodRef("default", "mig-pod"),
        pod_uid="uid-1",
        container="main",
        position=position,
        devices=tuple(ContainerDevice(uuid, "NVIDIA", 9984, 0) for uuid in cards),
        env={},
        remaining="",
        finished=True,
    )


def _instances(backend: MockBackend) -> list[tuple[str, int, int]]:
    mig = next(g for g in backend.discover() if g.uuid == H100).mig
    return sorted((i.profile, i.placement.start, i.placement.size) for i in mig.instances)


def test_allocate_creates_the_instance_at_the_annotated_placement(backend: MockBackend) -> None:
    entry = MigAllocation(0, 0, H100, "1g.10gb", 2, 1)
    answer = MigAllocator(backend).answer(_grant(), [entry])
    assert answer is not None
    assert _instances(backend) == [("1g.10gb", 2, 1), ("3g.40gb", 4, 4)]
    mig = next(g for g in backend.discover() if g.uuid == H100).mig
    made = next(i for i in mig.instances if i.profile == "1g.10gb")
    assert dict((e.name, e.value) for e in answer.env) == {"NVIDIA_VISIBLE_DEVICES": made.uuid}
    assert answer.devices == ()
    (recorded,) = decode_mig_allocations(answer.annotation)
    assert (recorded.mig_uuid, recorded.gpu_instance_id, recorded.compute_instance_id) == (
        made.uuid,
        made.gpu_instance_id,
        made.compute_instance_id,
    )
    assert answer.created == ((H100, made),)


def test_second_allocate_reuses_the_recorded_instance(backend: MockBackend) -> None:
    allocator = MigAllocator(backend)
    first = allocator.answer(_grant(), [MigAllocation(0, 0, H100, "1g.10gb", 2, 1)])
    assert first is not None
    again = allocator.answer(_grant(), decode_mig_allocations(first.annotation))
    assert again is not None
    assert again.created == ()
    assert again.env == first.env and again.annotation == first.annotation
    assert _instances(backend) == [("1g.10gb", 2, 1), ("3g.40gb", 4, 4)]


def test_unrecorded_instance_at_the_placement_is_adopted(backend: MockBackend) -> None:
    """An Allocate that created the instance and stopped before recording it."""
    allocator = MigAllocator(backend)
    entry = MigAllocation(0, 0, H100, "1g.10gb", 2, 1)
    first = allocator.answer(_grant(), [entry])
    again = allocator.answer(_grant(), [entry])
    assert first is not None and again is not None
    assert again.created == () and again.annotation == first.annotation


def test_taken_placement_is_refused_with_nothing_created(backend: MockBackend) -> None:
    entries = [
        MigAllocation(0, 0, H100, "1g.10gb", 0, 1),
        MigAllocation(0, 1, H100, "1g.10gb", 5, 1),
    ]
    with pytest.raises(AllocateError) as refusal:
        MigAllocator(backend).answer(_grant(cards=(H100, H100)), entries)
    message = str(refusal.value)
    for part in (H100, "1g.10gb", "placement 5:1", "free 1g.10gb placements: 0:1 1:1 2:1 3:1"):
        assert part in message, message
    assert _instances(backend) == [("3g.40gb", 4, 4)]


def test_profile_the_card_lacks_and_card_not_in_mig_mode_are_refused(
    backend: MockBackend,
) -> None:
    allocator = MigAllocator(backend)
    with pytest.raises(AllocateError, match=r"has no MIG profile 1g\.5gb"):
        allocator.answer(_grant(), [MigAllocation(0, 0, H100, "1g.5gb", 0, 1)])
    with pytest.raises(AllocateError, match=f"GPU {T4} is not MIG"):
        allocator.answer(_grant(cards=(T4,)), [MigAllocation(0, 0, T4, "1g.10gb", 0, 1)])
    assert _instances(backend) == [("3g.40gb", 4, 4)]


def test_container_without_slices_gets_no_mig_answer(backend: MockBackend) -> None:
    entry = MigAllocation(1, 0, H100, "1g.10gb", 0, 1)
    assert MigAllocator(backend).answer(_grant(position=0), [entry]) is None
    assert _instances(backend) == [("3g.40gb", 4, 4)]
