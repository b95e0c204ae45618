"""MIG partitions as the controller sees them: partition devices, their cards' counter
sets, and how much of each counter the allocated partitions hold. Pure.

A card in MIG mode is published as a partitionable device
(`dra_driver.objects.mig_devices`): one counter set per card in a counters-only
slice of the node's pool, and one device per profile placement that consumes from
it. Such a device is never a HAMi-core share: the inventory keeps it out of the
engine and indexes it here. Two partitions whose consumption together exceeds a
counter set overlap (or over-commit the card's compute slices), so the counters
alone decide what is free, as they do for kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from api.quantity import QuantityError, parse_quantity, to_mib_ceil
from dra_driver.objects.mig_devices import PARTITION_KIND

CounterSetKey = tuple[str, str]
"""(pool, counter set name): one card's counters."""

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class PartitionDevice:
    """One profile placement of one card, with what it consumes of which counter set."""

    key: tuple[str, str, str]
    """(driver, pool, device name), as allocation results name it."""
    node: str
    profile: str
    start: int
    size: int
    card_index: int
    card_uuid: str
    consumes: Mapping[CounterSetKey, Mapping[str, int]]
    healthy: bool
    memory_mib: int = 0
    """The instance's memory (the device's `memory` capacity), what a quota is charged."""

    @property
    def name(self) -> str:
        return self.key[2]

    @property
    def card(self) -> CounterSetKey:
        """The counter set of its card (the first it consumes from)."""
        return next(iter(self.consumes))

    @property
    def size_key(self) -> tuple[int, int, int]:
        """What taking it uses up of its card: memory slices, compute slices, media
        extensions; smaller leaves more of the card usable."""
        counters = self.consumes[self.card]
        memory = sum(v for k, v in counters.items() if k.startswith("memory-slice-"))
        return memory, counters.get("compute-slices", 0), counters.get("media-extensions", 0)


def _attribute(spec: Mapping[str, Any], driver: str, name: str) -> Any:
    attributes = spec.get("attributes") or {}
    entry = attributes.get(name) or attributes.get(f"{driver}/{name}")
    return next(iter(entry.values())) if entry else None


def _amounts(counters: Mapping[str, Any]) -> dict[str, int]:
    return {name: int(parse_quantity(str(entry["value"]))) for name, entry in counters.items()}


def is_partition(spec: Mapping[str, Any], driver: str) -> bool:
    """A device that consumes counters or says it is a MIG partition: never a share."""
    return bool(spec.get("consumesCounters")) or _attribute(spec, driver, "kind") == PARTITION_KIND


def partition_device(
    driver: str, pool: str, node: str, spec: Mapping[str, Any], ignored_taints: frozenset[str]
) -> PartitionDevice | None:
    """The partition a published device is; None when it is unreadable (no counters,
    a bad quantity), so it is never allocated."""
    try:
        consumes = {
            (pool, str(entry["counterSet"])): _amounts(entry.get("counters") or {})
            for entry in spec.get("consumesCounters") or []
        }
        memory = ((spec.get("capacity") or {}).get("memory") or {}).get("value")
        memory_mib = to_mib_ceil(str(memory)) if memory is not None else 0
    except (QuantityError, KeyError, ValueError):
        return None
    start = _attribute(spec, driver, "placementStart")
    size = _attribute(spec, driver, "placementSize")
    index = _attribute(spec, driver, "parentIndex")
    if not consumes or not isinstance(start, int) or not isinstance(size, int):
        return None
    tainted = any(
        taint.get("effect") in SCHEDULING_EFFECTS and taint.get("key") not in ignored_taints
        for taint in spec.get("taints") or []
    )
    return PartitionDevice(
        key=(driver, pool, str(spec["name"])),
        node=node,
        profile=str(_attribute(spec, driver, "profile") or ""),
        start=start,
        size=size,
        card_index=index if isinstance(index, int) else 0,
        card_uuid=str(_attribute(spec, driver, "parentUUID") or ""),
        consumes=consumes,
        healthy=not tainted,
        memory_mib=memory_mib,
    )


def counter_sets(pool: str, slice_spec: Mapping[str, Any]) -> dict[CounterSetKey, dict[str, int]]:
    """The counter sets a slice publishes (unreadable ones left out: nothing fits them)."""
    found = {}
    for entry in slice_spec.get("sharedCounters") or []:
        try:
            found[(pool, str(entry["name"]))] = _amounts(entry.get("counters") or {})
        except (QuantityError, KeyError, ValueError):
            continue
    return found


@dataclass(slots=True)
class CounterUsage:
    """What the allocated partitions consume, per counter set; charged as decisions are
    made, rebuilt from the claims whenever the engine is."""

    used: dict[CounterSetKey, dict[str, int]] = field(default_factory=dict)

    def copy(self) -> CounterUsage:
        return CounterUsage({key: dict(counters) for key, counters in self.used.items()})

    def charge(self, device: PartitionDevice, sign: int = 1) -> None:
        for key, counters in device.consumes.items():
            held = self.used.setdefault(key, {})
            for name, amount in counters.items():
                held[name] = held.get(name, 0) + sign * amount

    def fits(
        self, device: PartitionDevice, sets: Mapping[CounterSetKey, Mapping[str, int]]
    ) -> bool:
        """Whether the counter sets still hold what the device consumes."""
        for key, counters in device.consumes.items():
            limits = sets.get(key)
            if limits is None:
                return False
            held = self.used.get(key, {})
            for name, amount in counters.items():
                if held.get(name, 0) + amount > limits.get(name, 0):
                    return False
        return True

    def card_load(
        self, key: CounterSetKey, sets: Mapping[CounterSetKey, Mapping[str, int]]
    ) -> float:
        """How full a card is, 0..1: the mean of its counters' used fractions."""
        limits = sets.get(key) or {}
        held = self.used.get(key, {})
        fractions = [held.get(name, 0) / total for name, total in limits.items() if total > 0]
        return sum(fractions) / len(fractions) if fractions else 0.0


def claim_partitions(
    claim: Mapping[str, Any], partitions: Mapping[tuple[str, str, str], PartitionDevice]
) -> list[PartitionDevice]:
    """The partition devices the claim's allocation results name."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        device = partitions.get((result.get("driver"), result.get("pool"), result.get("device")))
        if device is not None:
            found.append(device)
    return found


def partition_usage(
    claims: Iterable[Mapping[str, Any]],
    partitions: Mapping[tuple[str, str, str], PartitionDevice],
) -> CounterUsage:
    """What the allocation results that name a partition device consume."""
    usage = CounterUsage()
    if not partitions:
        return usage
    for claim in claims:
        for device in claim_partitions(claim, partitions):
            usage.charge(device)
    return usage
