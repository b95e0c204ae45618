"""The engine's view of a cluster: nodes, their devices, and what is in use.

Units follow HAMi: memory in MiB, cores in percent of one card (100 per
card, times the core scaling), count = concurrent slots (the split count).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from api.hami_annotations import MigProfile

DEFAULT_SPLIT_COUNT = 10
HAMI_CORE_MODE = "hami-core"


@dataclass(frozen=True, slots=True)
class Device:
    """One physical device as registered: HAMi's DeviceInfo after node overrides."""

    id: str
    index: int
    type: str
    count: int
    memory_mib: int
    cores: int
    numa: int = 0
    healthy: bool = True
    mode: str = HAMI_CORE_MODE
    custom_info: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Vendor facts a vendor's own Fit or score reads (HAMi's DeviceInfo.CustomInfo,
    e.g. Ascend's NetworkID); the standard Fit ignores it."""
    mig_profiles: tuple[MigProfile, ...] = ()
    """The MIG profiles and placements a GPU in `mig` mode may host (its register
    entry's `migProfiles`); read by the standard Fit's MIG rule (`mig_fit`)."""


@dataclass(frozen=True, slots=True)
class DeviceUsage:
    """What the shares already granted on one device consume."""

    used: int = 0
    memory_mib: int = 0
    cores: int = 0
    tags: tuple[str, ...] = ()
    """One entry per share whose grant carries a tag (`Grant.tag`): what a vendor's
    own Fit or score must know of the pods already on the device (HAMi's
    DeviceUsage.PodInfos; Metax sGPU reads their app class and qos policy)."""

    def plus(self, other: DeviceUsage) -> DeviceUsage:
        return DeviceUsage(
            self.used + other.used,
            self.memory_mib + other.memory_mib,
            self.cores + other.cores,
            self.tags + other.tags,
        )


@dataclass(frozen=True, slots=True)
class NodeConfig:
    """Per-node overrides (HAMi's device-plugin `nodeconfig` entry); None = keep."""

    split_count: int | None = None
    memory_scaling: float | None = None
    core_scaling: float | None = None
    filtered_uuids: frozenset[str] = frozenset()
    filtered_indices: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Node:
    """A node with its registered devices and the annotations the engine reads."""

    name: str
    devices: tuple[Device, ...]
    cordoned: frozenset[str] = frozenset()
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)


def apply_node_config(devices: tuple[Device, ...], config: NodeConfig) -> tuple[Device, ...]:
    """Devices as the device plugin would register them under `config`.

    Scaling multiplies the physical memory (oversubscription when > 1) and sets
    the core total to 100 x scaling, as HAMi's plugin does when it registers.
    """
    result = []
    for device in devices:
        if device.id in config.filtered_uuids or device.index in config.filtered_indices:
            continue
        changes: dict[str, int] = {}
        if config.split_count is not None:
            changes["count"] = config.split_count
        if config.memory_scaling is not None:
            changes["memory_mib"] = int(device.memory_mib * config.memory_scaling)
        if config.core_scaling is not None:
            changes["cores"] = int(100 * config.core_scaling)
        result.append(replace(device, **changes) if changes else device)
    return tuple(result)


def first_of_each_id(devices: Iterable[Device]) -> tuple[Device, ...]:
    """The devices without a later one that repeats an earlier one's id.

    The engine charges usage to a device by its id, so two devices with one id
    on a node would let one card's usage hide the other's capacity. HAMi's
    device plugin finds a GPU by its uuid, so one id on a node is one card:
    it counts once, and every share naming that id is charged to it.
    """
    seen: dict[str, Device] = {}
    for device in devices:
        seen.setdefault(device.id, device)
    return tuple(seen.values())


def repeated_ids(sightings: Iterable[tuple[str, str]]) -> dict[str, tuple[str, ...]]:
    """Each device id seen more than once in (id, where) pairs, with where it was seen
    (sorted; a place twice when it has the id twice): ids are meant to be unique, and
    a repeat (cloned mock files or VMs, a bad NVML answer) must be reported."""
    places: dict[str, list[str]] = {}
    for device_id, where in sightings:
        places.setdefault(device_id, []).append(where)
    return {
        device_id: tuple(sorted(found))
        for device_id, found in sorted(places.items())
        if len(found) > 1
    }
