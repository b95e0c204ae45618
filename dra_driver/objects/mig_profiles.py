"""NVIDIA's MIG GPU-instance profiles for the cards this driver partitions.

Pure data, shared by node discovery (the mock backend models cards from it) and,
later, by the allocators that pick a profile and a placement. It lives in
`dra_driver.objects` because the controller may not import `kubeletplugin`.

Sources (facts only):
- Profile names, compute and memory fractions, instance counts:
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html
- Possible placements (`nvidia-smi mig -lgipp`, identical on A100 and H100) and the
  profile ids (`nvidia-smi mig -lgip`, column ID: 19, 20, 15, 14, 9, 5, 0):
  https://docs.nvidia.com/datacenter/tesla/mig-user-guide/getting-started-with-mig.html
- The NVML enum a profile is asked for by (`NVML_GPU_INSTANCE_PROFILE_1_SLICE` = 0, ...
  `_1_SLICE_REV2` = 9) and the placement semantics (start and size count memory slices):
  nvml.h, https://docs.nvidia.com/deploy/nvml-api/group__nvmlMultiInstanceGPU.html

Memory and SM counts are what `nvidia-smi mig -lgip` prints (GiB with two decimals,
times 1024 here). They move by a few hundred MiB between driver branches (an A100
40GB 1g.5gb reads 4.75 GiB on every driver seen, its 3g.20gb 19.50 or 19.62), so
discovery on a real card always takes NVML's own number; these values serve the
mock backend and the tests. H200 141GB: no NVML output was found, so its memory is
the profile name's GB in MiB (`MigCard.memory_from_nvml` is False) and its SM counts
and placements are the H100's (same GH100 die, same 7 compute / 8 memory slices).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MIB = 1 << 20

NVML_PROFILE_1_SLICE = 0
NVML_PROFILE_2_SLICE = 1
NVML_PROFILE_3_SLICE = 2
NVML_PROFILE_4_SLICE = 3
NVML_PROFILE_7_SLICE = 4
NVML_PROFILE_1_SLICE_REV1 = 7
"""The 1g profile with media extensions (`+me`): one per card."""
NVML_PROFILE_1_SLICE_REV2 = 9
"""The 1g profile with two memory slices (A100 40GB `1g.10gb`, H100 `1g.20gb`)."""


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """Where a GPU instance sits: its first memory slice and how many it spans."""

    start: int
    size: int

    @property
    def end(self) -> int:
        return self.start + self.size

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.start}:{self.size}"


@dataclass(frozen=True, slots=True)
class MigProfile:
    """One GPU-instance profile of one card."""

    name: str
    """As nvidia-smi and HAMi name it, without the `MIG ` prefix: `1g.5gb`, `1g.5gb+me`."""
    nvml_profile: int
    """The `NVML_GPU_INSTANCE_PROFILE_*` value passed to `nvmlDeviceGetGpuInstanceProfileInfo`."""
    profile_id: int
    """`nvmlGpuInstanceProfileInfo_t.id` (nvidia-smi's ID): what placements, creation and
    instance listing take."""
    compute_slices: int
    memory_slices: int
    memory_mib: int
    multiprocessors: int
    max_instances: int
    placements: tuple[Placement, ...]

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MIB

    @property
    def media_extensions(self) -> bool:
        return self.name.endswith("+me")


@dataclass(frozen=True, slots=True)
class MigCard:
    """A card model's MIG geometry."""

    model: str
    compute_slices: int
    memory_slices: int
    memory_from_nvml: bool
    """False: `memory_mib` of its profiles is the name's GB, not a value NVML printed."""
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.profile_id == profile_id), None)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.profiles)


def _starts(starts: tuple[int, ...], size: int) -> tuple[Placement, ...]:
    return tuple(Placement(start, size) for start in starts)


_ONE_SLICE = _starts((0, 1, 2, 3, 4, 5, 6), 1)
_TWO_SLICE = _starts((0, 2, 4), 2)
_ONE_SLICE_TWO_MEMORY = _starts((0, 2, 4, 6), 2)
_THREE_SLICE = _starts((0, 4), 4)
_FOUR_SLICE = _starts((0,), 4)
_SEVEN_SLICE = _starts((0,), 8)


def _card(
    model: str,
    names: tuple[str, str, str, str, str, str, str],
    memory_mib: tuple[int, int, int, int],
    multiprocessors: tuple[int, int, int, int, int, int],
    *,
    memory_from_nvml: bool = True,
) -> MigCard:
    """A card from its seven profile names (1g, 1g+me, 1g with two memory slices, 2g,
    3g, 4g, 7g), the memory of each memory-slice count (1, 2, 4 and 8 slices: the
    1g+me matches the 1g; profiles of equal slices report equal memory) and the SMs
    of 1g, 1g-two-memory, 2g, 3g, 4g and 7g."""
    one, one_me, one_wide, two, three, four, seven = names
    mem_1, mem_2, mem_4, mem_8 = memory_mib
    sm_1, sm_1w, sm_2, sm_3, sm_4, sm_7 = multiprocessors
    return MigCard(
        model=model,
        compute_slices=7,
        memory_slices=8,
        memory_from_nvml=memory_from_nvml,
        profiles=(
            MigProfile(one, NVML_PROFILE_1_SLICE, 19, 1, 1, mem_1, sm_1, 7, _ONE_SLICE),
            MigProfile(one_me, NVML_PROFILE_1_SLICE_REV1, 20, 1, 1, mem_1, sm_1, 1, _ONE_SLICE),
            MigProfile(
                one_wide,
                NVML_PROFILE_1_SLICE_REV2,
                15,
                1,
                2,
                mem_2,
                sm_1w,
                4,
                _ONE_SLICE_TWO_MEMORY,
            ),
            MigProfile(two, NVML_PROFILE_2_SLICE, 14, 2, 2, mem_2, sm_2, 3, _TWO_SLICE),
            MigProfile(three, NVML_PROFILE_3_SLICE, 9, 3, 4, mem_4, sm_3, 2, _THREE_SLICE),
            MigProfile(four, NVML_PROFILE_4_SLICE, 5, 4, 4, mem_4, sm_4, 1, _FOUR_SLICE),
            MigProfile(seven, NVML_PROFILE_7_SLICE, 0, 7, 8, mem_8, sm_7, 1, _SEVEN_SLICE),
        ),
    )


A100_40GB = _card(
    "A100-40GB",
    ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb"),
    (4864, 9856, 19968, 40192),
    (14, 14, 28, 42, 56, 98),
)
"""A100-SXM4-40GB and A100-PCIE-40GB: the MIG user guide's `-lgip` (4.75, 9.62, 19.50,
39.25 GiB; 14, 28, 42, 56, 98 SMs)."""

A100_80GB = _card(
    "A100-80GB",
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    (9728, 19968, 40192, 80896),
    (14, 14, 28, 42, 56, 98),
)
"""A100-SXM4-80GB and A100 80GB PCIe: `-lgip` on an A100-SXM4-80GB (9.50, 19.50, 39.25,
79.00 GiB), SMs as the 40GB card."""

H100_80GB = _card(
    "H100-80GB",
    ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"),
    (9984, 20096, 40448, 81152),
    (16, 26, 32, 60, 64, 132),
)
"""H100 SXM5 and PCIe 80GB: `-lgip` on a driver 560 H100 80GB HBM3 (9.75, 19.62, 39.50,
79.25 GiB; 16, 26, 32, 60, 64, 132 SMs)."""

H200_141GB = _card(
    "H200-141GB",
    ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"),
    (18 * 1024, 35 * 1024, 71 * 1024, 141 * 1024),
    (16, 26, 32, 60, 64, 132),
    memory_from_nvml=False,
)
"""H200 SXM5 and NVL 141GB: names and instance counts from the MIG user guide; memory
from the names (see the module docstring)."""

CARDS: tuple[MigCard, ...] = (A100_40GB, A100_80GB, H100_80GB, H200_141GB)


def mig_card(product_name: str, memory_bytes: int) -> MigCard | None:
    """The table for a card as NVML names it and sizes it, or None (not a card modelled
    here: A30, H100 94/96GB and Blackwell have other geometries)."""
    name = product_name.upper()
    gib = memory_bytes / GIB
    if "A100" in name:
        return A100_80GB if gib > 60 else A100_40GB
    if "H100" in name:
        return H100_80GB if 60 < gib <= 85 else None
    if "H200" in name:
        return H200_141GB
    return None
