"""The copy of the controller's view that /metrics shows: device usage, shares, quotas.

Scrapes run in their own thread, so they never walk the live view; the
controller's loop builds this copy (about once a second) and hands it over
whole. Reads the view, writes nothing; calls the quota ledger builder.
"""

from __future__ import annotations

from typing import Any

from api.quantity import QuantityError
from controller.cluster_view import ClusterView
from controller.inventory import quantity, quota_ledger
from controller.metrics import QuotaRecord, ShareRecord, ViewSnapshot
from controller.object_state import allocation_of, reservations_of
from dra_driver.engine.model import DeviceUsage
from dra_driver.kube.informer import object_key


def build_view_snapshot(view: ClusterView) -> ViewSnapshot:
    """Each device's usage from the engine; each share and quota from the claims that hold
    capacity, a share named by the pod that reserved (or waits for) its claim."""
    usage: dict[str, dict[str, DeviceUsage]] = {}
    for name in view.inventory.nodes:
        try:
            state = view.engine.node_state(name)
        except KeyError:
            continue
        usage[name] = {s.device.id: DeviceUsage(s.used, s.memory, s.cores) for s in state.slots}
    claims = view.effective_claims()
    shares = []
    for claim in claims:
        reserved = reservations_of(claim)
        waiting = sorted(view.pods_referring(object_key(claim)))
        pod = (
            reserved[0].get("name", "")
            if reserved
            else waiting[0].split("/", 1)[1]
            if waiting
            else claim["metadata"].get("name", "")
        )
        for index, result in enumerate(
            ((allocation_of(claim) or {}).get("devices") or {}).get("results") or []
        ):
            device = view.inventory.by_key.get(
                (result.get("driver"), result.get("pool"), result.get("device"))
            )
            if device is None:
                continue
            consumed = result.get("consumedCapacity") or {}
            shares.append(
                ShareRecord(
                    namespace=claim["metadata"].get("namespace", ""),
                    node=device.node,
                    pod=pod,
                    container_index=index,
                    device_uuid=device.uuid,
                    memory_bytes=_whole(consumed.get("memory")),
                    cores=_whole(consumed.get("cores")),
                )
            )
    return ViewSnapshot(view.inventory, usage, tuple(shares), _quota_records(view, claims))


def _quota_records(view: ClusterView, claims: list[dict[str, Any]]) -> tuple[QuotaRecord, ...]:
    ledger = quota_ledger(view.quotas.store.values(), claims, view.inventory, view.vendors)
    records = []
    for (namespace, vendor_name), quota in sorted(ledger.quotas.items()):
        resources = view.vendors.get(vendor_name).resources
        if quota.memory_limit_mib is not None:
            records.append(
                QuotaRecord(
                    namespace, resources.memory, quota.memory_limit_mib, quota.memory_used_mib
                )
            )
        if quota.cores_limit is not None:
            records.append(
                QuotaRecord(namespace, resources.cores, quota.cores_limit, quota.cores_used)
            )
    return tuple(records)


def _whole(amount: Any) -> int:
    """A consumed capacity as a whole number (bytes, cores); 0 when absent or unreadable."""
    try:
        return int(quantity(str(amount))) if amount is not None else 0
    except QuantityError:
        return 0
