"""Which MIG partition a claim request gets, by HAMi's policies, or why none. Pure.

A request of a partition DeviceClass (`dra_driver.objects.mig_devices`) is
served by whole partition devices, never by the engine: the devices its class
and request selectors accept (`PartitionRequest.allowed`, evaluated by
controller/requests.py) whose counters are still free (`CounterUsage`). The
choice follows HAMi's: nodes in node-policy order (binpack: fullest first;
spread: emptiest), on a node its cards in GPU-policy order (the same), and on a
card the partition leaving the most of it usable (fewest memory slices, then
compute slices, then no media extension), at the placement HAMi's dynamic MIG
prefers (`dra_driver.engine.mig_fit.ordered_placements`: 1g and 3g from the
highest start). Several partitions for one pod are taken one after another on
one node, each charged before the next is chosen. A node where one cannot be
placed refuses with HAMi's `CardMigTopologyInfeasible` (`NodeHasNoDevices` when
it has no card in MIG mode), and a note naming each card, what was asked and
which placements are free; one where a placement is free but the namespace's
quota cannot hold it (`controller.partition_quota`) with `ResourceQuotaNotFit`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from api.hami_annotations import MigPlacement
from controller.inventory import DeviceKey, Inventory
from controller.partition_inventory import CounterSetKey, CounterUsage, PartitionDevice
from controller.partition_quota import PartitionQuota
from dra_driver.engine.mig_fit import CARD_MIG_TOPOLOGY_INFEASIBLE, ordered_placements
from dra_driver.engine.policy import BINPACK
from dra_driver.engine.reasons import NODE_HAS_NO_DEVICES, RESOURCE_QUOTA_NOT_FIT


@dataclass(frozen=True, slots=True)
class PartitionRequest:
    """One claim request (or firstAvailable subrequest) of a partition class."""

    claim: str
    """The claim as messages name it."""
    name: str
    """The result name (`<request>` or `<request>/<subrequest>`)."""
    class_name: str
    count: int
    allowed: frozenset[DeviceKey]
    """The partition devices its class and request selectors (and capacity) accept."""
    asked: str
    """What it asks, as the user wrote it (selectors, capacity), for messages."""


@dataclass(frozen=True, slots=True)
class PartitionFit:
    """The node and, in request order, each partition taken there."""

    node: str
    picks: tuple[tuple[PartitionRequest, PartitionDevice], ...]


@dataclass(frozen=True, slots=True)
class PartitionRefusal:
    """A node's HAMi reason and what it stands for."""

    reason: str
    note: str


def node_order(
    nodes: Collection[str], inventory: Inventory, usage: CounterUsage, node_policy: str
) -> list[str]:
    """`nodes` in node-policy order by how full their MIG cards are (name breaks ties)."""

    def load(node: str) -> float:
        cards = inventory.partition_cards.get(node) or {}
        loads = [usage.card_load(card, inventory.counter_sets) for card in cards]
        return sum(loads) / len(loads) if loads else 0.0

    sign = -1.0 if node_policy == BINPACK else 1.0
    return sorted(nodes, key=lambda node: (sign * load(node), node))


def fit_on_node(
    requests: Sequence[PartitionRequest],
    inventory: Inventory,
    usage: CounterUsage,
    node: str,
    binpack_cards: bool,
    quota: PartitionQuota | None = None,
) -> PartitionFit | PartitionRefusal:
    """Every request's partitions on `node`, or why one cannot be placed."""
    cards = inventory.partition_cards.get(node) or {}
    if not cards:
        return PartitionRefusal(NODE_HAS_NO_DEVICES, f"{node} has no card in MIG mode")
    scratch = usage.copy()
    left = quota.scratch() if quota is not None else None
    picks: list[tuple[PartitionRequest, PartitionDevice]] = []
    for request in requests:
        for _ in range(request.count):
            device = _pick(request, cards, scratch, inventory, binpack_cards, left)
            if device is None:
                free = _pick(request, cards, scratch, inventory, binpack_cards) if left else None
                if left is not None and free is not None:
                    return _quota_refusal(request, node, len(cards), left, free)
                return _refusal(request, node, cards, scratch, inventory)
            scratch.charge(device)
            if left is not None:
                left.charge(device)
            picks.append((request, device))
    return PartitionFit(node, tuple(picks))


def _pick(
    request: PartitionRequest,
    cards: Mapping[CounterSetKey, Sequence[PartitionDevice]],
    usage: CounterUsage,
    inventory: Inventory,
    binpack: bool,
    quota: PartitionQuota | None = None,
) -> PartitionDevice | None:
    sign = -1.0 if binpack else 1.0
    ordered = sorted(
        cards.items(),
        key=lambda item: (
            sign * usage.card_load(item[0], inventory.counter_sets),
            item[1][0].card_index,
        ),
    )
    for _, devices in ordered:
        fitting = [
            d
            for d in devices
            if d.key in request.allowed
            and d.healthy
            and usage.fits(d, inventory.counter_sets)
            and (quota is None or quota.fits(d))
        ]
        if fitting:
            return smallest_preferred(fitting)
    return None


def smallest_preferred(fitting: Sequence[PartitionDevice]) -> PartitionDevice:
    """The partition leaving the most of its card usable, at HAMi's preferred placement."""
    smallest = min(d.size_key for d in fitting)
    profile = min(d.profile for d in fitting if d.size_key == smallest)
    same = [d for d in fitting if d.size_key == smallest and d.profile == profile]
    first = ordered_placements(profile, [MigPlacement(d.start, d.size) for d in same])[0]
    return next(d for d in same if d.start == first.start)


def _free(devices: Sequence[PartitionDevice], usage: CounterUsage, inventory: Inventory) -> str:
    """`<profile> at <start>,...` for every profile with a free placement."""
    starts: dict[str, list[int]] = {}
    for device in devices:
        if device.healthy and usage.fits(device, inventory.counter_sets):
            starts.setdefault(device.profile, []).append(device.start)
    if not starts:
        return "nothing"
    return "; ".join(
        f"{profile} at {','.join(map(str, sorted(found)))}" for profile, found in starts.items()
    )


def _refusal(
    request: PartitionRequest,
    node: str,
    cards: Mapping[CounterSetKey, Sequence[PartitionDevice]],
    usage: CounterUsage,
    inventory: Inventory,
) -> PartitionRefusal:
    parts = []
    for devices in sorted(cards.values(), key=lambda found: found[0].card_index):
        card = devices[0]
        wanted = sorted({d.profile for d in devices if d.key in request.allowed})
        if wanted:
            asked = f"no free placement of {', '.join(wanted)}"
        else:
            offered = ", ".join(dict.fromkeys(d.profile for d in devices))
            asked = f"no profile matches (it has {offered})"
        parts.append(
            f"card gpu-{card.card_index} ({card.card_uuid}): {asked}; "
            f"free: {_free(devices, usage, inventory)}"
        )
    note = f"{request.claim} request {request.name} ({request.asked}) on {node}: " + " | ".join(
        parts
    )
    return PartitionRefusal(f"{len(cards)}/{len(cards)} {CARD_MIG_TOPOLOGY_INFEASIBLE}", note)


def _quota_refusal(
    request: PartitionRequest, node: str, cards: int, quota: PartitionQuota, free: PartitionDevice
) -> PartitionRefusal:
    """A placement is free, but the namespace's quota cannot hold even the smallest one."""
    note = (
        f"{request.claim} request {request.name} ({request.asked}) on {node}: "
        f"{quota.describe(free)}"
    )
    return PartitionRefusal(f"{cards}/{cards} {RESOURCE_QUOTA_NOT_FIT}", note)
