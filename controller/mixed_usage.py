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
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.hami_annotations import AnnotationDecodeError
from controller.inventory import Inventory, usage_by_node
from controller.legacy.pod_usage import read_pod_allocation
from dra_driver.engine.engine import vendor_totals
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.vendor_backends.base import VendorBackend
from dra_driver.engine.vendor_backends.registry import BackendRegistry, build_backends

NodeUsage = dict[str, dict[str, DeviceUsage]]
"""node -> device uuid -> what is held there."""


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
