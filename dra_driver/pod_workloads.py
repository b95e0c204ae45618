"""A Pod manifest (plain dict) using HAMi's resource names and annotations,
turned into the engine's PodRequest the way HAMi's scheduler reads it.

Reference: hami-protocol.md §1 (GenerateResourceRequests, webhook defaults)
and §2/§3 (annotations). No Kubernetes imports: the dict is what the API
returns, so the extender, the webhook and `explain` share this code.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import annotation_is_true
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    ContainerRequest,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
    parse_scoring_weights,
)
from dra_driver.engine.vendors import VendorAdapter, VendorRegistry
from dra_driver.errors import InvalidParameterError

INT32_MAX = (1 << 31) - 1


def pod_request(
    pod: Mapping[str, Any], vendors: VendorRegistry, *, admission_defaults: bool = True
) -> PodRequest:
    """Build the engine request for a pod.

    With `admission_defaults`, the HAMi webhook's mutations are applied first
    (count added when only memory/cores are given; an exclusive 100 cores when
    a whole card is asked for), as they are for every pod in a HAMi cluster.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    weights = parse_scoring_weights(annotations.get(keys.DEVICE_SCORING_WEIGHTS))

    def containers(key: str) -> tuple[ContainerRequest, ...]:
        result = []
        for position, container in enumerate(spec.get(key) or []):
            where = f"spec.{key}[{position}]"
            result.append(
                container_request(container, annotations, vendors, where, admission_defaults)
            )
        return tuple(result)

    return PodRequest(
        namespace=metadata.get("namespace") or "default",
        name=metadata.get("name") or metadata.get("generateName") or "",
        containers=containers("containers"),
        init_containers=containers("initContainers"),
        gpu_policy=annotations.get(keys.GPU_SCHEDULER_POLICY),
        node_policy=annotations.get(keys.NODE_SCHEDULER_POLICY),
        weights=weights,
    )


def container_request(
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    vendors: VendorRegistry,
    where: str,
    admission_defaults: bool,
) -> ContainerRequest:
    """One container's requests, one per vendor that it asks for."""
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    result = []
    for vendor in vendors:
        if admission_defaults:
            _apply_admission_defaults(vendor, limits)
        request = _vendor_request(vendor, limits, requests, annotations, where)
        if request is not None:
            result.append(request)
    return tuple(result)


def _apply_admission_defaults(vendor: VendorAdapter, limits: dict[str, Any]) -> None:
    names = vendor.resources
    if (
        names.count not in limits
        and any(name in limits for name in (names.memory, names.cores, names.memory_percentage))
        and vendor.default_count > 0
    ):
        limits[names.count] = str(vendor.default_count)
    if names.count in limits and names.cores not in limits:
        whole_card = str(limits.get(names.memory_percentage, "")) == "100"
        if whole_card or names.memory not in limits:
            limits[names.cores] = "100"


def _vendor_request(
    vendor: VendorAdapter,
    limits: Mapping[str, Any],
    requests: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
) -> DeviceRequest | None:
    """HAMi's GenerateResourceRequests: limits first, then requests."""
    names = vendor.resources
    count = _int_resource(limits, requests, names.count, where)
    if count is None or count <= 0:
        return None
    memory = _int_resource(limits, requests, names.memory, where) or 0
    if memory:
        memory *= max(vendor.memory_factor, 1)
        if memory > INT32_MAX:
            raise InvalidParameterError(
                f"{where}.resources.{names.memory}", "exceeds the int32 range HAMi accepts"
            )
    percent = _int_resource(limits, requests, names.memory_percentage, where)
    if percent is None:
        percent = MEMORY_PERCENT_UNSET
    elif not 0 <= percent <= 100:
        raise InvalidParameterError(
            f"{where}.resources.{names.memory_percentage}", "must be between 0 and 100"
        )
    if percent == MEMORY_PERCENT_UNSET and memory == 0:
        if vendor.default_memory_mib:
            memory = vendor.default_memory_mib
        else:
            percent = 100
    cores = _int_resource(limits, requests, names.cores, where)
    return DeviceRequest(
        vendor=vendor.name,
        count=count,
        memory_mib=memory,
        memory_percent=percent,
        cores=vendor.default_cores if cores is None else cores,
        filters=vendor_filters(vendor, annotations),
    )


def vendor_filters(vendor: VendorAdapter, annotations: Mapping[str, str]) -> DeviceFilters:
    """The vendor's device filters from pod annotations (comma lists)."""
    names = vendor.annotations

    def listed(key: str) -> tuple[str, ...]:
        return tuple(item for item in annotations.get(key, "").split(",") if item.strip())

    return DeviceFilters(
        use_types=listed(names.use_types),
        no_use_types=listed(names.no_use_types),
        use_uuids=tuple(item.strip() for item in listed(names.use_uuids)),
        no_use_uuids=tuple(item.strip() for item in listed(names.no_use_uuids)),
        numa_bind=bool(names.numa_bind)
        and annotation_is_true(annotations.get(names.numa_bind or "")),
        modes=annotations.get(names.mode) if names.mode else None,
    )


def _int_resource(
    limits: Mapping[str, Any], requests: Mapping[str, Any], name: str, where: str
) -> int | None:
    """An integer resource value (quantity's AsInt64), limits before requests."""
    raw = limits.get(name, requests.get(name))
    if raw is None:
        return None
    field = f"{where}.resources.{name}"
    try:
        value: Decimal = parse_quantity(str(raw))
    except QuantityError as error:
        raise InvalidParameterError(field, error.reason) from None
    if value != value.to_integral_value():
        raise InvalidParameterError(field, f"{raw!r} is not a whole number")
    return int(value)
