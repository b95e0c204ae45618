"""How a MIG partition is named and counted in DRA: the contract between the slices
the kubelet plugin publishes, the controller that allocates them and the prepare
that creates the instance. Pure.

A card in MIG mode is published as a partitionable device (KEP-4815): one
counter set per card, in a slice of its own, and one device per profile
placement that consumes from it. The counters are the card's memory slices, one
counter each (a placement consumes the slices it spans, so two placements that
overlap can never both be allocated, by any allocator), its compute slices, and
its one media-extension unit (the `+me` profiles). A device's name says which
card, profile and placement it is, so prepare needs nothing but the allocated
device name to know what to create.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dra_driver.objects.mig_profiles import MigCard, MigProfile, Placement

PARTITION_CLASS = "mig.nvidia.vgpu.hami.io"
"""The DeviceClass that serves MIG partitions; `nvidia.vgpu.hami.io` keeps serving
HAMi-core shares of whole cards."""
PARTITION_KIND = "mig"
"""The `kind` attribute of a partition device (a shared card's devices say `share`)."""
COMPUTE_SLICES = "compute-slices"
MEDIA_EXTENSIONS = "media-extensions"
_MEMORY_SLICE = "memory-slice-"
_NAME = re.compile(r"^gpu-(?P<index>\d+)-mig-(?P<profile>[0-9a-z-]+)-at-(?P<start>\d+)$")


@dataclass(frozen=True, slots=True)
class PartitionName:
    """What a partition device's name says: the card's index, the profile, the start."""

    gpu_index: int
    profile_slug: str
    start: int


def profile_slug(profile: str) -> str:
    """A profile name as a DNS label fragment: `1g.10gb+me` -> `1g-10gb-me`."""
    return profile.replace(".", "-").replace("+", "-")


def partition_device_name(gpu_index: int, profile: str, start: int) -> str:
    """`gpu-<index>-mig-<profile>-at-<start>`, e.g. `gpu-0-mig-3g-40gb-at-4`."""
    return f"gpu-{gpu_index}-mig-{profile_slug(profile)}-at-{start}"


def parse_partition_device_name(name: str) -> PartitionName | None:
    """The parts of a partition device's name, or None for any other device name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return PartitionName(int(match["index"]), match["profile"], int(match["start"]))


def profile_for_slug(card: MigCard, slug: str) -> MigProfile | None:
    """The card's profile whose name has this slug."""
    return next((p for p in card.profiles if profile_slug(p.name) == slug), None)


def counter_set_name(gpu_index: int) -> str:
    """The counter set of one card: `gpu-<index>-mig-counters`."""
    return f"gpu-{gpu_index}-mig-counters"


def card_counters(card: MigCard) -> dict[str, int]:
    """What one card's counter set holds: one per memory slice, its compute slices, and
    one media-extension unit."""
    counters = {f"{_MEMORY_SLICE}{i}": 1 for i in range(card.memory_slices)}
    counters[COMPUTE_SLICES] = card.compute_slices
    counters[MEDIA_EXTENSIONS] = 1
    return counters


def partition_consumption(profile: MigProfile, placement: Placement) -> dict[str, int]:
    """What a partition at `placement` consumes of its card's counters."""
    consumed = {f"{_MEMORY_SLICE}{i}": 1 for i in range(placement.start, placement.end)}
    consumed[COMPUTE_SLICES] = profile.compute_slices
    if profile.media_extensions:
        consumed[MEDIA_EXTENSIONS] = 1
    return consumed
