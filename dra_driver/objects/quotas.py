"""Namespace ResourceQuotas read as HAMi reads them: per vendor, by its resource names.

HAMi's QuotaManager keys a namespace's quota by resource name: `limits.<memory
name>` and `limits.<cores name>` of every vendor (`spec.hard`, not the quota's
status, which counts only what kube-apiserver sees in pod specs). The memory
limit is multiplied by the vendor's memory factor when that is above 1 (one
Cambricon vmemory unit is 256 MiB), so that it compares with the MiB the
vendor's devices record; a vendor without a memory (or cores) resource name
has no such limit, and a value that is not a whole number is skipped, as
HAMi's `AsInt64` skips it. With several quotas in a namespace the smallest
limit wins. What a namespace already holds is charged by the caller, to the
vendor whose devices hold it (`QuotaLedger.charge`): the legacy scheduler from
its pods' grants, the DRA controller from its claims' devices, each from the
other's too in a mixed cluster. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.vendors import VendorAdapter


def limit_key(resource: str) -> str:
    return f"limits.{resource}"


def quota_limits(
    quotas: Iterable[Mapping[str, Any]], vendors: Iterable[VendorAdapter]
) -> QuotaLedger:
    """Per (namespace, vendor): the memory (MiB) and core limits, nothing used yet."""
    ledger = QuotaLedger()
    vendors = tuple(vendors)
    for quota in quotas:
        namespace = (quota.get("metadata") or {}).get("namespace") or ""
        hard = (quota.get("spec") or {}).get("hard") or {}
        for vendor in vendors:
            memory = _whole(hard, vendor.resources.memory)
            cores = _whole(hard, vendor.resources.cores)
            if memory is None and cores is None:
                continue
            if memory is not None:
                memory *= max(vendor.memory_factor, 1)
            entry = ledger.quotas.setdefault((namespace, vendor.name), NamespaceQuota())
            entry.memory_limit_mib = _smaller(entry.memory_limit_mib, memory)
            entry.cores_limit = _smaller(entry.cores_limit, cores)
    return ledger


def _whole(hard: Mapping[str, Any], resource: str) -> int | None:
    """The quota's whole-number limit on `resource`; None when it sets none (or the
    vendor leaves the resource unnamed)."""
    raw = hard.get(limit_key(resource)) if resource else None
    if raw is None:
        return None
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return None
    return int(value) if value == value.to_integral_value() else None


def _smaller(current: int | None, new: int | None) -> int | None:
    if new is None:
        return current
    return new if current is None else min(current, new)
