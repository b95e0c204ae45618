"""Namespace quota for MIG partitions. Pure.

A partition holds hardware as a HAMi-core share does: its profile's memory and
its share of the card's compute slices (rounded up, as the device plugin rounds
a profile's `core` for HAMi). Both are charged to the namespace's quota of the
card's vendor (`limits.nvidia.com/gpumem`, `limits.nvidia.com/gpucores`), so a
namespace limited to a share cannot take a whole card by asking for a partition
instead; a partition that would exceed the quota is refused with HAMi's
`ResourceQuotaNotFit`, like a share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from controller.partition_inventory import CounterSetKey, PartitionDevice
from dra_driver.engine.quota import QuotaLedger
from dra_driver.objects.mig_devices import COMPUTE_SLICES

DeviceKey = tuple[str, str, str]


def partition_amount(
    device: PartitionDevice, sets: Mapping[CounterSetKey, Mapping[str, int]]
) -> tuple[int, int]:
    """What a partition is charged: its memory in MiB and its cores in percent of the card
    (a card whose compute slices are unknown counts as whole)."""
    total = (sets.get(device.card) or {}).get(COMPUTE_SLICES, 0)
    used = device.consumes[device.card].get(COMPUTE_SLICES, 0)
    cores = -(-used * 100 // total) if total > 0 else 100
    return device.memory_mib, cores


@dataclass(slots=True)
class PartitionQuota:
    """One namespace's quota while a pod's partitions are chosen on one node."""

    ledger: QuotaLedger
    namespace: str
    vendor_of: Callable[[DeviceKey], str | None]
    """The vendor whose quota a partition device is charged to (None: no vendor's)."""
    sets: Mapping[CounterSetKey, Mapping[str, int]]

    def scratch(self) -> PartitionQuota:
        """A copy whose charges leave this one as it is (a node that is refused halfway
        charges nothing)."""
        own = {
            key: replace(quota)
            for key, quota in self.ledger.quotas.items()
            if key[0] == self.namespace
        }
        return replace(self, ledger=QuotaLedger(own))

    def fits(self, device: PartitionDevice) -> bool:
        vendor = self.vendor_of(device.key)
        if vendor is None:
            return True
        memory, cores = partition_amount(device, self.sets)
        return self.ledger.fits(self.namespace, vendor, memory, cores)

    def charge(self, device: PartitionDevice) -> None:
        vendor = self.vendor_of(device.key)
        if vendor is not None:
            memory, cores = partition_amount(device, self.sets)
            self.ledger.charge(self.namespace, vendor, memory, cores)

    def describe(self, device: PartitionDevice) -> str:
        """What the smallest partition asks against what the namespace has left."""
        vendor = self.vendor_of(device.key)
        quota = self.ledger.quotas.get((self.namespace, vendor or ""))
        memory, cores = partition_amount(device, self.sets)
        if quota is None:
            return f"{device.profile} needs {memory} MiB, {cores}% cores"
        left = []
        if quota.memory_limit_mib is not None:
            left.append(f"{quota.memory_limit_mib - quota.memory_used_mib} MiB")
        if quota.cores_limit is not None:
            left.append(f"{quota.cores_limit - quota.cores_used}% cores")
        return (
            f"{device.profile} needs {memory} MiB, {cores}% cores; namespace {self.namespace} "
            f"has {' and '.join(left)} of its {vendor} quota left"
        )
