"""Namespace ResourceQuota limits on GPU memory and cores, read as HAMi reads them.

Pure. HAMi enforces `limits.<gpumem>` and `limits.<gpucores>` of a
ResourceQuota's `spec.hard` against what the namespace's pods already hold
(its own count, not the quota's status). A quota without one of those keys
does not limit it; with several quotas in a namespace the smallest limit wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.quota import NamespaceQuota
from dra_driver.engine.vendors import VendorAdapter


def limit_key(resource: str) -> str:
    return f"limits.{resource}"


def _smaller(current: int | None, new: int | None) -> int | None:
    if new is None:
        return current
    return new if current is None else min(current, new)


def quota_limits(
    quotas: Iterable[Mapping[str, Any]], vendor: VendorAdapter
) -> dict[str, NamespaceQuota]:
    """Per namespace, the memory (MiB, times memoryFactor) and core limits; used left at 0.

    An unreadable quantity is skipped: the API server validates quotas, so
    this only guards against a value this side cannot represent.
    """
    result: dict[str, NamespaceQuota] = {}
    names = vendor.resources
    for quota in quotas:
        namespace = (quota.get("metadata") or {}).get("namespace") or ""
        hard = (quota.get("spec") or {}).get("hard") or {}
        memory = _amount(hard.get(limit_key(names.memory)))
        cores = _amount(hard.get(limit_key(names.cores)))
        if memory is None and cores is None:
            continue
        if memory is not None:
            memory *= max(vendor.memory_factor, 1)
        entry = result.setdefault(namespace, NamespaceQuota())
        entry.memory_limit_mib = _smaller(entry.memory_limit_mib, memory)
        entry.cores_limit = _smaller(entry.cores_limit, cores)
    return result


def _amount(raw: object) -> int | None:
    if raw is None:
        return None
    try:
        return int(parse_quantity(str(raw)))
    except QuantityError:
        return None


def namespace_usage(
    allocations: Iterable[tuple[str, Mapping[str, Any]]],
) -> dict[str, tuple[int, int]]:
    """Sum (memory MiB, cores) per namespace from (namespace, per-device usage) pairs."""
    totals: dict[str, tuple[int, int]] = {}
    for namespace, usage in allocations:
        memory, cores = totals.get(namespace, (0, 0))
        for device in usage.values():
            memory += device.memory_mib
            cores += device.cores
        totals[namespace] = (memory, cores)
    return totals
