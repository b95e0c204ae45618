"""The copy of the controller's view that /metrics shows: device usage, shares, quotas.

Scrapes run in their own thread, so they never walk the live view; the
controller's loop builds this copy (about once a second) and hands it over
whole. At 10,000 claims, building every share record afresh took hundreds of
milliseconds of each second, so a `SnapshotBuilder` kept across builds reuses a
claim's records while the informer still holds the same claim object, the
inventory is the same and the claim names its pod itself (reserved); everything
else is built again. Reads the view, writes nothing; calls the quota ledger
builder.
"""

from __future__ import annotations

from typing import Any

from api.quantity import QuantityError, parse_quantity
from controller.cluster_view import ClusterView
from controller.inventory import Inventory, quota_ledger
from controller.metrics import QuotaRecord, ShareRecord, ViewSnapshot
from controller.mixed_usage import charge_holds
from controller.object_state import allocation_of, reservations_of
from dra_driver.engine.model import DeviceUsage
from dra_driver.kube.informer import object_key


class SnapshotBuilder:
    """Builds snapshots, remembering each reserved claim's share records until the
    claim object or the inventory changes (records of claims gone are dropped)."""

    def __init__(self) -> None:
        self._records: dict[str, tuple[dict[str, Any], Inventory, tuple[ShareRecord, ...]]] = {}

    def build(self, view: ClusterView) -> ViewSnapshot:
        """Each used device's usage from the engine (idle ones are left out: rebuilt each
        second, 8,000 idle records at 1,000 x 8 were also what a burst's end left
        scattered in memory); each share and quota from the claims that hold capacity,
        a share named by the pod that reserved (or waits for) its claim."""
        usage: dict[str, dict[str, DeviceUsage]] = {}
        for name in view.inventory.nodes:
            try:
                state = view.engine.node_state(name)
            except KeyError:
                continue
            held = {
                s.device.id: DeviceUsage(s.used, s.memory, s.cores)
                for s in state.slots
                if not s.holds_nothing
            }
            if held:
                usage[name] = held
        claims = view.effective_claims()
        shares: list[ShareRecord] = []
        remembered = {}
        for claim in claims:
            key = object_key(claim)
            cached = self._records.get(key)
            if cached is not None and cached[0] is claim and cached[1] is view.inventory:
                records = cached[2]
            else:
                records = _share_records(view, claim)
            if reservations_of(claim):
                remembered[key] = (claim, view.inventory, records)
            shares.extend(records)
        self._records = remembered
        return ViewSnapshot(view.inventory, usage, tuple(shares), _quota_records(view, claims))


def build_view_snapshot(view: ClusterView) -> ViewSnapshot:
    """One snapshot with nothing remembered (a caller building them over and over keeps
    a SnapshotBuilder)."""
    return SnapshotBuilder().build(view)


def _share_records(view: ClusterView, claim: dict[str, Any]) -> tuple[ShareRecord, ...]:
    reserved = reservations_of(claim)
    if reserved:
        pod = reserved[0].get("name", "")
    else:
        waiting = sorted(view.pods_referring(object_key(claim)))
        pod = waiting[0].split("/", 1)[1] if waiting else claim["metadata"].get("name", "")
    records = []
    for index, result in enumerate(
        ((allocation_of(claim) or {}).get("devices") or {}).get("results") or []
    ):
        device = view.inventory.by_key.get(
            (result.get("driver"), result.get("pool"), result.get("device"))
        )
        if device is None:
            continue
        consumed = result.get("consumedCapacity") or {}
        records.append(
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
    return tuple(records)


def _quota_records(view: ClusterView, claims: list[dict[str, Any]]) -> tuple[QuotaRecord, ...]:
    ledger = quota_ledger(view.quotas.store.values(), claims, view.inventory, view.vendors)
    charge_holds(ledger, view.legacy_holds.values())
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
        return int(parse_quantity(str(amount))) if amount is not None else 0
    except QuantityError:
        return 0
