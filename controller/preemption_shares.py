"""What one share is (a claim's allocation, or a legacy pod's hold, on one node) and
what freeing some gives back: the engine's usage, the MIG partitions' counters and
HAMi's namespace quota. Pure.

Shared by the DRA controller's preemption (preemption.py) and the legacy
extender's preempt verb (legacy/preempt.py): both judge a pod on a node as if
some holders were gone, and a share frees only when every pod holding it is.
A claim's MIG partitions (whole devices outside the engine,
controller/partition_inventory.py) are part of its share on their node: they
free with it, give back the counters they consume, and are charged to the
namespace's quota as `charge_claims` charges them, so freeing them gives that
back too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.inventory import Inventory, claim_usage, device_vendor, partition_charge
from controller.object_state import reservations_of
from controller.partition_inventory import CounterUsage, PartitionDevice, claim_partitions
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.vendors import VendorRegistry


@dataclass(frozen=True, slots=True)
class Share:
    """What one claim's allocation (or one legacy pod's hold) holds on a node."""

    key: str
    node: str
    usage: Mapping[str, DeviceUsage]
    """Per device uuid, in the engine's units."""
    holders: frozenset[str]
    """The uids of the pods reserving it: it frees only when all of them go."""
    quota_use: tuple[tuple[str, str, int, int], ...] = ()
    """(namespace, vendor, MiB, cores) charged to HAMi's namespace quota."""
    partitions: tuple[PartitionDevice, ...] = ()
    """The MIG partitions it holds on the node (none in `usage`: they are no engine device)."""


def usage_without(
    usage: Mapping[str, DeviceUsage], freed: Iterable[Share]
) -> dict[str, DeviceUsage]:
    """A node's per-device usage with the freed shares taken off (one of each of their
    tags removed, as the engine releases a placement)."""
    left: dict[str, tuple[list[int], list[str]]] = {}
    for share in freed:
        for uuid, amount in share.usage.items():
            held = left.get(uuid)
            if held is None:
                was = usage.get(uuid)
                if was is None:
                    continue
                held = left[uuid] = ([was.used, was.memory_mib, was.cores], list(was.tags))
            counts, tags = held
            counts[0] = max(counts[0] - amount.used, 0)
            counts[1] = max(counts[1] - amount.memory_mib, 0)
            counts[2] = max(counts[2] - amount.cores, 0)
            for tag in amount.tags:
                if tag in tags:
                    tags.remove(tag)
    result = dict(usage)
    for uuid, ((used, memory, cores), tags) in left.items():
        result[uuid] = DeviceUsage(used, memory, cores, tuple(tags))
    return result


def quota_without(ledger: QuotaLedger | None, freed: Iterable[Share]) -> QuotaLedger | None:
    """The ledger with the freed shares' charges given back (the same ledger when they
    charged no limited namespace; it is never changed in place)."""
    if ledger is None:
        return None
    returned = [
        use for share in freed for use in share.quota_use if (use[0], use[1]) in ledger.quotas
    ]
    if not returned:
        return ledger
    quotas = dict(ledger.quotas)
    for namespace, vendor, memory_mib, cores in returned:
        quota = quotas[(namespace, vendor)]
        quotas[(namespace, vendor)] = NamespaceQuota(
            quota.memory_limit_mib,
            quota.cores_limit,
            quota.memory_used_mib - memory_mib,
            quota.cores_used - cores,
        )
    return QuotaLedger(quotas)


def counters_without(usage: CounterUsage, freed: Iterable[Share]) -> CounterUsage:
    """The partitions' counter usage with the freed shares' partitions given back (the
    same object when they hold none; it is never changed in place)."""
    given = [device for share in freed for device in share.partitions]
    if not given:
        return usage
    left = usage.copy()
    for device in given:
        left.charge(device, -1)
    return left


def charges_quota(shares: Iterable[Share], ledger: QuotaLedger | None, namespace: str) -> bool:
    """Whether freeing any of `shares` gives back quota `namespace` is held to."""
    if ledger is None:
        return False
    return any(
        ns == namespace and (ns, vendor) in ledger.quotas
        for share in shares
        for ns, vendor, _memory, _cores in share.quota_use
    )


def claim_shares(
    claims: Iterable[Mapping[str, Any]], inventory: Inventory, vendors: VendorRegistry
) -> list[Share]:
    """Each allocated claim's share per node, held by the pods in its reservedFor: the
    engine devices its results consume and the MIG partitions they name."""
    shares: list[Share] = []
    for claim in claims:
        metadata = claim.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        holders = frozenset(
            str(entry.get("uid"))
            for entry in reservations_of(claim)
            if entry.get("resource") == "pods" and entry.get("uid")
        )
        per_node: dict[str, dict[str, DeviceUsage]] = {}
        charges: dict[str, list[tuple[str, str, int, int]]] = {}
        for device, amount in claim_usage(claim, inventory):
            on_node = per_node.setdefault(device.node, {})
            on_node[device.uuid] = on_node.get(device.uuid, DeviceUsage()).plus(amount)
            vendor = device_vendor(device, vendors)
            if vendor is not None:
                charges.setdefault(device.node, []).append(
                    (namespace, vendor, amount.memory_mib, amount.cores)
                )
        partitions: dict[str, list[PartitionDevice]] = {}
        if inventory.partitions:
            for partition in claim_partitions(claim, inventory.partitions):
                per_node.setdefault(partition.node, {})
                partitions.setdefault(partition.node, []).append(partition)
                charge = partition_charge(partition, inventory, vendors)
                if charge is not None:
                    charges.setdefault(partition.node, []).append((namespace, *charge))
        key = f"{namespace}/{metadata.get('name')}"
        for node, usage in per_node.items():
            shares.append(
                Share(
                    key,
                    node,
                    usage,
                    holders,
                    tuple(charges.get(node, ())),
                    tuple(partitions.get(node, ())),
                )
            )
    return shares
