"""What each namespace holds against its ResourceQuotas in legacy mode, per vendor.

Pure. HAMi charges a placed pod's devices to the quota names of the vendor
that holds them (`countPodDevices`: every container device's memory to that
vendor's `limits.<memory name>`, its cores to `limits.<cores name>`), so an
MLU pod's share never counts against the namespace's NVIDIA quota. The limits
are read per vendor by `dra_driver.objects.quotas`; a pod's usage is its
grants with init containers at their peak, as the engine charges it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controller.legacy.pod_usage import PodAllocation
from dra_driver.engine.engine import vendor_totals
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.vendors import VendorAdapter
from dra_driver.objects.quotas import quota_limits


def quota_ledger(
    quotas: Iterable[Mapping[str, Any]],
    allocations: Iterable[PodAllocation],
    vendors: Iterable[VendorAdapter],
) -> QuotaLedger:
    """Every vendor's limits per namespace, with what the namespace's placed pods hold."""
    ledger = quota_limits(quotas, vendors)
    limited = {namespace for namespace, _ in ledger.quotas}
    for allocation in allocations:
        if allocation.namespace not in limited:
            continue  # charging a namespace without a quota changes nothing
        for vendor, (memory, cores) in vendor_totals(
            allocation.usage, allocation.placement
        ).items():
            ledger.charge(allocation.namespace, vendor, memory, cores)
    return ledger
