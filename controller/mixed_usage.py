"""One accounting of a GPU for both modes (mixed clusters): what the other allocator holds.

A node may serve the same GPUs to legacy pods (device plugin, HAMi annotations)
and DRA claims (kubelet plugin, ResourceSlices) at once. Both allocators know a
GPU by (node, uuid): the slice device's `uuid` attribute and the device id in
the register annotation are the same string. So the DRA controller charges a
legacy pod's `hami.io/vgpu-devices-allocated` (any vendor's key) to the slice
device with that uuid on the pod's `hami.io/vgpu-node`, and the extender
charges a claim's allocation results to the registered device with the uuid of
the slice device each result names; neither hands out what the other holds.

Pure: pods, claims and slices are the dicts the API returns, and the results
are the engine's units (MiB, percent of cores, slots). `over_commits` is the
check both sides run again under the node lock, on what they re-read there.

A refusal for room on a node where the other allocator holds GPUs names those
holders (`holders_text`, `with_holders`): each side's message says who else
is on the card, in the same form.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.hami_annotations import AnnotationDecodeError
from controller.inventory import Inventory, usage_by_node
from controller.legacy.pod_usage import read_pod_allocation
from dra_driver.engine.engine import vendor_totals
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.reasons import (
    ALLOCATED_CARDS_INSUFFICIENT_REQUEST,
    CARD_COMPUTE_UNITS_EXHAUSTED,
    CARD_INSUFFICIENT_CORE,
    CARD_INSUFFICIENT_MEMORY,
    CARD_TIME_SLICING_EXHAUSTED,
    EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
    NODE_INSUFFICIENT_DEVICE,
    parse_reason,
)
from dra_driver.engine.vendor_backends.base import VendorBackend
from dra_driver.engine.vendor_backends.registry import BackendRegistry, build_backends

NodeUsage = dict[str, dict[str, DeviceUsage]]
"""node -> device uuid -> what is held there."""

Holders = Mapping[str, Mapping[str, Mapping[str, DeviceUsage]]]
"""node -> device uuid -> holder (`ns/name`) -> what it holds there."""

SHORT_OF_ROOM = frozenset(
    {
        CARD_INSUFFICIENT_MEMORY,
        CARD_INSUFFICIENT_CORE,
        CARD_TIME_SLICING_EXHAUSTED,
        CARD_COMPUTE_UNITS_EXHAUSTED,
        EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT,
        NODE_INSUFFICIENT_DEVICE,
        ALLOCATED_CARDS_INSUFFICIENT_REQUEST,
    }
)
"""Reasons that say a node's GPUs are taken (not of the wrong kind): what others hold
there is worth naming."""


@dataclass(frozen=True, slots=True)
class LegacyHold:
    """What one legacy pod holds: its node and, per device uuid, its usage; and what its
    namespace's quota of each vendor is charged, as (vendor, memory MiB, cores)."""

    node: str
    usage: tuple[tuple[str, DeviceUsage], ...]
    namespace: str = ""
    quota_use: tuple[tuple[str, int, int], ...] = ()


def legacy_backends() -> BackendRegistry:
    """Every vendor whose allocated key HAMi's default config reads (NVIDIA, Hygon, ...):
    a pod of any of them holds its cards whichever allocator reads it."""
    return build_backends(None)


def legacy_hold(pod: Mapping[str, Any], backends: Iterable[VendorBackend]) -> LegacyHold | None:
    """What the pod holds through HAMi's annotations, or None (none, terminated, unreadable).

    An unreadable device list counts nothing, as HAMi's pod cache does; the
    extender that wrote it logs that case."""
    try:
        allocation = read_pod_allocation(pod, backends, lambda _: {})
    except AnnotationDecodeError:
        return None
    if allocation is None:
        return None
    quota_use = vendor_totals(allocation.usage, allocation.placement)
    return LegacyHold(
        allocation.placement.node,
        tuple(sorted(allocation.usage.items())),
        allocation.namespace,
        tuple(sorted((vendor, memory, cores) for vendor, (memory, cores) in quota_use.items())),
    )


def add_holds(usage: NodeUsage, holds: Iterable[LegacyHold]) -> NodeUsage:
    """`usage` with every hold added (a new mapping; `usage` is left as it was)."""
    merged = {node: dict(devices) for node, devices in usage.items()}
    for hold in holds:
        on_node = merged.setdefault(hold.node, {})
        for uuid, amount in hold.usage:
            on_node[uuid] = on_node.get(uuid, DeviceUsage()).plus(amount)
    return merged


def charge_holds(ledger: QuotaLedger, holds: Iterable[LegacyHold]) -> None:
    """Charge each legacy pod to its namespace's quota of every vendor it holds: the DRA
    controller's ledger counts them as HAMi's scheduler does (by the default device
    config's vendor names, which are the DRA families' request types)."""
    for hold in holds:
        for vendor, memory, cores in hold.quota_use:
            ledger.charge(hold.namespace, vendor, memory, cores)


def add_usage(first: NodeUsage, second: Mapping[str, Mapping[str, DeviceUsage]]) -> NodeUsage:
    """The per-node, per-device sum of both."""
    merged = {node: dict(devices) for node, devices in first.items()}
    for node, devices in second.items():
        on_node = merged.setdefault(node, {})
        for uuid, amount in devices.items():
            on_node[uuid] = on_node.get(uuid, DeviceUsage()).plus(amount)
    return merged


def claims_usage(claims: Iterable[Mapping[str, Any]], inventory: Inventory) -> NodeUsage:
    """What allocated claims hold, per node and device uuid (results naming a device the
    slices no longer publish are left out: no uuid to charge)."""
    allocated = [c for c in claims if (c.get("status") or {}).get("allocation")]
    return usage_by_node(allocated, inventory)


def over_commits(node: Node, usage: Mapping[str, DeviceUsage]) -> list[str]:
    """Why the node's devices cannot carry `usage`: one line per device and dimension
    (slots, memory, cores) over what the device has; empty when everything fits."""
    problems = []
    for device in node.devices:
        held = usage.get(device.id)
        if held is None:
            continue
        for what, amount, limit, unit in (
            ("slots", held.used, device.count, ""),
            ("memory", held.memory_mib, device.memory_mib, " MiB"),
            ("cores", held.cores, device.cores, "%"),
        ):
            if amount > limit:
                problems.append(
                    f"GPU {device.id} on node {node.name}: {what} {amount}{unit} > {limit}{unit}"
                )
    return problems


def short_of_room(failures: Mapping[str, str]) -> list[str]:
    """The nodes whose `k/N Reason` says their GPUs had no room."""
    return [node for node, reason in failures.items() if SHORT_OF_ROOM & {*parse_reason(reason)}]


def holders_text(kind: str, held: Holders) -> dict[str, str]:
    """Per node, what a refusal says of the other allocator's holders there:
    `<kind> on GPU-a: ns/x (12288 MiB, 30 cores), ns/y (...); on GPU-b: ...`."""
    return {
        node: f"{kind} "
        + "; ".join(
            f"on {uuid}: "
            + ", ".join(
                f"{name} ({amount.memory_mib} MiB, {amount.cores} cores)"
                for name, amount in sorted(by_holder.items())
            )
            for uuid, by_holder in sorted(gpus.items())
        )
        for node, gpus in held.items()
    }


def legacy_holders(holds: Mapping[str, LegacyHold], nodes: Collection[str]) -> dict[str, str]:
    """Per node of `nodes` where legacy pods (keyed `ns/name`) hold GPUs, what a
    refusal says of them."""
    held: dict[str, dict[str, dict[str, DeviceUsage]]] = {}
    for key, hold in holds.items():
        if hold.node not in nodes:
            continue
        for uuid, amount in hold.usage:
            on_gpu = held.setdefault(hold.node, {}).setdefault(uuid, {})
            on_gpu[key] = on_gpu.get(key, DeviceUsage()).plus(amount)
    return holders_text("legacy pods", held)


def with_holders(message: str, holders: Mapping[str, str]) -> str:
    """A FilteringFailed message followed by each node's holders."""
    return message + "".join(f". {node}: {note}" for node, note in sorted(holders.items()))
