"""HAMi's MIG mode in the standard Fit: which profile and placement a slice gets.

A GPU registered with `mode: mig` lists the MIG profiles it may host, each
with the placements NVML reports (start and size in memory slices). A
container's request of such a GPU is served by one MIG slice: the smallest
profile (by memory, then slice count) whose memory covers the request and
that still has a placement overlapping no slice in use, 1g and 3g profiles
taking the highest free start and the others the lowest. One GPU may give
several slices to one container. A GPU where no profile has room refuses with
`CardMigTopologyInfeasible`. The slice's memory and cores become the
profile's (HAMi's AddResourceUsage).

The slices in use travel as device usage tags (`Grant.tag`,
`DeviceUsage.tags`): one tag per share, listing the placements that share
holds. A MIG GPU with a share whose slice is unknown, or a GPU not in MIG mode
that holds a slice, is treated as unhealthy (HAMi fails closed). Pure.
Reference: HAMi `pkg/device/nvidia/device.go` (CustomFilterRule,
selectMigCandidate, AddResourceUsage), `mig_topology.go`,
`pkg/scheduler/score.go` (isMIGRequest), `scheduler.go` (getNodesUsage).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from api.hami_annotations import MigPlacement, MigProfile
from dra_driver.engine.grants import Grant, Slot
from dra_driver.engine.model import Device
from dra_driver.engine.requests import DeviceRequest

MIG_MODE = "mig"
NVIDIA_REQUEST_TYPE = "NVIDIA"
CARD_MIG_TOPOLOGY_INFEASIBLE = "CardMigTopologyInfeasible"
MIG_CHARGE_FAILED = "MIG profile and placement allocation failed"
"""HAMi's AddResourceUsage error once Fit's picks leave no placement for a slice."""

_TAG_PREFIX = "mig:"
_ENTRY_SEPARATOR = ";"
_FIELD_SEPARATOR = ":"


@dataclass(frozen=True, slots=True)
class MigSlice:
    """A profile at a placement: what one share holds of a MIG GPU."""

    profile: str
    start: int
    size: int


def slice_tag(slices: Iterable[MigSlice]) -> str:
    """The usage tag of one share holding `slices` (`mig:<start>:<size>:<profile>;...`);
    profile names carry no `:` or `;` (NVIDIA writes them as `1g.10gb+me`)."""
    parts = [f"{s.start}{_FIELD_SEPARATOR}{s.size}{_FIELD_SEPARATOR}{s.profile}" for s in slices]
    return _TAG_PREFIX + _ENTRY_SEPARATOR.join(parts)


def tag_slices(tag: str) -> list[MigSlice]:
    """The slices a usage tag lists; none for a tag that is not a MIG tag."""
    if not tag.startswith(_TAG_PREFIX):
        return []
    result = []
    for part in tag[len(_TAG_PREFIX) :].split(_ENTRY_SEPARATOR):
        start, size, profile = part.split(_FIELD_SEPARATOR, 2)
        result.append(MigSlice(profile, int(start), int(size)))
    return result


def is_mig_tag(tag: str) -> bool:
    return tag.startswith(_TAG_PREFIX)


def occupied_placements(tags: Iterable[str]) -> list[MigPlacement]:
    """The placements the shares with these tags hold (HAMi's MigAllocationsInUse)."""
    return [MigPlacement(s.start, s.size) for tag in tags for s in tag_slices(tag)]


def usage_sound(device: Device, slot: Slot) -> bool:
    """False where HAMi's getNodesUsage marks the GPU unhealthy: a MIG GPU with a share
    that holds no slice, or a GPU in another mode holding a slice."""
    slices = sum(1 for tag in slot.tags if is_mig_tag(tag))
    if device.mode == MIG_MODE:
        return slot.used <= slices
    return slices == 0


def placements_overlap(a: MigPlacement, b: MigPlacement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def ordered_placements(profile: str, placements: Iterable[MigPlacement]) -> list[MigPlacement]:
    """The order HAMi tries a profile's placements: 1g and 3g from the highest start,
    the others from the lowest (ties keep NVML's order)."""
    high_first = profile.startswith(("1g.", "3g."))
    return sorted(placements, key=lambda p: -p.start if high_first else p.start)


def select_placement(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], name: str
) -> MigPlacement | None:
    """The first placement of profile `name` that overlaps nothing occupied (HAMi's
    selectMigPlacement); None for an unknown profile or when all overlap. A placement
    of size 0 (a malformed register) is never chosen: it overlaps nothing, so under
    the topology-aware policy HAMi's Fit would take it forever."""
    profile = next((p for p in profiles if p.name == name), None)
    if profile is None:
        return None
    for candidate in ordered_placements(name, profile.placements):
        if candidate.size and not any(placements_overlap(candidate, used) for used in occupied):
            return candidate
    return None


def select_candidate(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], memory_mib: int
) -> tuple[MigProfile, MigPlacement] | None:
    """HAMi's selectMigCandidate: the smallest profile (memory, then slice count) of
    at least `memory_mib` that has a free placement, with that placement."""
    for profile in sorted(profiles, key=lambda p: (p.memory_mb, p.slice_count)):
        if profile.memory_mb < memory_mib:
            continue
        placement = select_placement(profiles, occupied, profile.name)
        if placement is not None:
            return profile, placement
    return None


def can_place_profiles(
    profiles: Sequence[MigProfile], occupied: Sequence[MigPlacement], requested: Sequence[str]
) -> bool:
    """HAMi's canPlaceMigProfiles: can every requested profile get a placement that
    overlaps neither what is occupied nor another requested one? Profiles with the
    fewest placements (then the largest) are placed first, backtracking on conflict."""
    placements = {profile.name: profile.placements for profile in profiles}

    def order(name: str) -> tuple[int, int]:
        own = placements.get(name, ())
        return len(own), -own[0].size if own else 0

    ordered = sorted(requested, key=order)
    used = list(occupied)

    def place(position: int) -> bool:
        if position == len(ordered):
            return True
        name = ordered[position]
        for candidate in ordered_placements(name, placements.get(name, ())):
            if any(placements_overlap(candidate, existing) for existing in used):
                continue
            used.append(candidate)
            if place(position + 1):
                return True
            used.pop()
        return False

    return place(0)


def custom_filter(device: Device, slot: Slot, picks: Sequence[Grant], memory_mib: int) -> bool:
    """HAMi's CustomFilterRule for a MIG GPU: with the slices this request already
    took here (each the candidate for its memory), does one more of `memory_mib`
    find a profile with a free placement?"""
    occupied = occupied_placements(slot.tags)
    for grant in picks:
        if grant.uuid != device.id:
            continue
        chosen = select_candidate(device.mig_profiles, occupied, grant.memory_mib)
        if chosen is None:
            return False
        occupied.append(chosen[1])
    return select_candidate(device.mig_profiles, occupied, memory_mib) is not None


def is_mig_request(request: DeviceRequest, devices: Iterable[Device]) -> bool:
    """HAMi's isMIGRequest: an NVIDIA request, not held to another mode by the pod's
    `nvidia.com/vgpu-mode`, on a node with a MIG GPU; such a request may ask for
    more GPUs than the node has, slices sharing a GPU."""
    if request.vendor != NVIDIA_REQUEST_TYPE:
        return False
    modes = request.filters.modes
    if modes is not None and MIG_MODE not in modes:
        return False
    return any(device.mode == MIG_MODE for device in devices)


def charge_slice(slot: Slot, grant: Grant) -> Grant | None:
    """HAMi's AddResourceUsage on a MIG GPU: the grant becomes the chosen profile's
    memory and cores and is tagged with its slice, and the slot holds that slice
    from now on; None when no profile has room (`MIG_CHARGE_FAILED`)."""
    device = slot.device
    chosen = select_candidate(device.mig_profiles, occupied_placements(slot.tags), grant.memory_mib)
    if chosen is None:
        return None
    profile, placement = chosen
    tag = slice_tag([MigSlice(profile.name, placement.start, placement.size)])
    slot.tags = (*slot.tags, tag)
    return replace(grant, memory_mib=profile.memory_mb, cores=profile.core, tag=tag)
