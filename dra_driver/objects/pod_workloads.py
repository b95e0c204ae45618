"""A Pod manifest (plain dict) using HAMi's resource names and annotations,
turned into the engine's PodRequest the way HAMi's scheduler reads it.

Reference: hami-protocol.md §1 (GenerateResourceRequests, webhook defaults)
and §2/§3 (annotations). No Kubernetes imports: the dict is what the API
returns, so the extender, the webhook and `explain` share this code.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import annotation_is_true
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.fit import FULL_CARD_CORES
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
    A request HAMi's scheduler ignores (see `container_request`) is left out
    and its reason kept in `PodRequest.dropped`. A malformed
    `hami.io/device-scoring-weights` fails the whole pod with HAMi's message.
    """
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    weights = parse_scoring_weights(annotations.get(keys.DEVICE_SCORING_WEIGHTS))
    dropped: list[str] = []

    def containers(key: str) -> tuple[ContainerRequest, ...]:
        result = []
        for position, container in enumerate(spec.get(key) or []):
            where = f"spec.{key}[{position}]"
            result.append(
                container_request(
                    container, annotations, vendors, where, admission_defaults, dropped=dropped
                )
            )
        return tuple(result)

    init_containers = containers("initContainers")
    return PodRequest(
        namespace=metadata.get("namespace") or "default",
        name=metadata.get("name") or metadata.get("generateName") or "",
        containers=containers("containers"),
        init_containers=init_containers,
        gpu_policy=annotations.get(keys.GPU_SCHEDULER_POLICY),
        node_policy=annotations.get(keys.NODE_SCHEDULER_POLICY),
        weights=weights,
        dropped=tuple(dropped),
    )


def container_request(
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    vendors: VendorRegistry,
    where: str,
    admission_defaults: bool,
    *,
    dropped: list[str] | None = None,
) -> ContainerRequest:
    """One container's requests, one per vendor that it asks for.

    A vendor with its own `read_request` reads the container itself (its
    webhook's changes, if any, are its backend's); the others are read as
    NVIDIA's GenerateResourceRequests reads them, after NVIDIA's webhook
    defaults when `admission_defaults` is set.
    A vendor request HAMi's GenerateResourceRequests drops (a memory amount
    that is not a whole number of MiB within int32 after `memoryFactor`)
    yields nothing for that vendor; when `dropped` is given, the reason,
    prefixed with the field path, is appended to it.
    """
    resources = container.get("resources") or {}
    limits = dict(resources.get("limits") or {})
    requests = dict(resources.get("requests") or {})
    result = []
    for vendor in vendors:
        if vendor.read_request is not None:
            request = vendor.read_request(container, annotations, where, dropped)
        else:
            if admission_defaults:
                limits.update(admission_limits(vendor, limits, requests, where))
            request = _vendor_request(vendor, limits, requests, annotations, where, dropped)
        if request is not None:
            result.append(request)
    return tuple(result)


def admission_limits(
    vendor: VendorAdapter,
    limits: Mapping[str, Any],
    requests: Mapping[str, Any],
    where: str = "container",
) -> dict[str, str]:
    """The limits HAMi's webhook adds to one container for this vendor.

    mutateContainerResource: a memory, percentage or core limit without a
    count limit gets `defaultGPUNum` devices. defaultExclusiveCoreIfNeeded:
    when the count is present (limits or requests) and no core amount is,
    100 cores are added if the percentage is exactly 100, or if no percentage
    is given and either no memory is asked for or no memory resource name is
    configured. So `gpu: 1, gpumem-percentage: 50` stays shareable.
    """
    names = vendor.resources
    added: dict[str, str] = {}
    if (
        names.count
        and names.count not in limits
        and vendor.default_count > 0
        and any(
            name and name in limits for name in (names.cores, names.memory, names.memory_percentage)
        )
    ):
        added[names.count] = str(vendor.default_count)
    merged = {**limits, **added}
    if not names.count or not names.cores:
        return added
    if (
        _raw(merged, requests, names.count) is None
        or _raw(merged, requests, names.cores) is not None
    ):
        return added
    percent = _raw(merged, requests, names.memory_percentage) if names.memory_percentage else None
    if percent is not None:
        field = f"{where}.resources.{names.memory_percentage}"
        exclusive = _quantity(percent, field).to_integral_value(ROUND_CEILING) == 100
    else:
        exclusive = not names.memory or _raw(merged, requests, names.memory) is None
    if exclusive:
        added[names.cores] = str(FULL_CARD_CORES)
    return added


def _vendor_request(
    vendor: VendorAdapter,
    limits: Mapping[str, Any],
    requests: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """HAMi's GenerateResourceRequests: limits first, then requests.

    A percentage of 0 or below counts as unset and one above 100 as 100, as
    HAMi's scheduler reads them (its webhook would refuse both, but it fails
    open, so such pods still reach the scheduler).
    """
    names = vendor.resources
    count = _int_resource(limits, requests, names.count, where)
    if count is None or count <= 0:
        return None
    memory = 0
    raw_memory = _raw(limits, requests, names.memory) if names.memory else None
    if raw_memory is not None:
        field = f"{where}.resources.{names.memory}"
        value = _quantity(raw_memory, field)
        factor = max(vendor.memory_factor, 1)
        if value != value.to_integral_value() or not 0 <= value <= INT32_MAX // factor:
            if dropped is not None:
                dropped.append(
                    f"{field}: {raw_memory!s} is not a whole number of MiB within int32 "
                    f"after memoryFactor {factor}; HAMi ignores this {vendor.name} request, "
                    "so the container gets no device"
                )
            return None
        memory = int(value) * factor
    percent = _int_resource(limits, requests, names.memory_percentage, where)
    percent = MEMORY_PERCENT_UNSET if percent is None or percent <= 0 else min(percent, 100)
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


MATCHES_NOTHING = ","
"""The entry a filter list holds when its annotation has only empty entries (`", "`):
HAMi's CheckType and CheckUUID then match no device (a `use` list refuses every
card, a `no-use` list refuses none), and no type or uuid can contain the comma the
list was split on."""


def vendor_filters(vendor: VendorAdapter, annotations: Mapping[str, str]) -> DeviceFilters:
    """The vendor's device filters from pod annotations (comma lists, entries
    trimmed and empty ones skipped; a blank value constrains nothing, one with
    only empty entries matches no device, as in HAMi)."""
    names = vendor.annotations

    def listed(key: str) -> tuple[str, ...]:
        raw = annotations.get(key, "") if key else ""
        items = tuple(item.strip() for item in raw.split(",") if item.strip())
        return items or ((MATCHES_NOTHING,) if raw.strip() else ())

    return DeviceFilters(
        use_types=listed(names.use_types),
        no_use_types=listed(names.no_use_types),
        use_uuids=listed(names.use_uuids),
        no_use_uuids=listed(names.no_use_uuids),
        numa_bind=bool(names.numa_bind)
        and annotation_is_true(annotations.get(names.numa_bind or "")),
        modes=annotations.get(names.mode) if names.mode else None,
    )


def _raw(limits: Mapping[str, Any], requests: Mapping[str, Any], name: str) -> Any:
    """A resource's raw value, limits before requests (None when in neither)."""
    return limits.get(name, requests.get(name))


def _quantity(raw: Any, field: str) -> Decimal:
    try:
        return parse_quantity(str(raw))
    except QuantityError as error:
        raise InvalidParameterError(field, error.reason) from None


def _int_resource(
    limits: Mapping[str, Any], requests: Mapping[str, Any], name: str, where: str
) -> int | None:
    """An integer resource value (quantity's AsInt64), limits before requests."""
    raw = _raw(limits, requests, name)
    if raw is None:
        return None
    field = f"{where}.resources.{name}"
    value = _quantity(raw, field)
    if value != value.to_integral_value():
        raise InvalidParameterError(field, f"{raw!r} is not a whole number")
    return int(value)
