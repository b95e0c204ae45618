"""A ResourceClaim (plain dict, resource.k8s.io/v1) turned into the engine's
request: one "container" per claim request, sized from capacity requests
and/or the opaque `VGPUConfig` parameters addressed to this driver.

Capacity requests win where both are given, because they are what
kube-scheduler would consume in scheduler-allocated mode. With neither,
a request takes the whole card's memory, as a count-only HAMi request does.
Cores are read as kube-scheduler reads a quantity (`Quantity.Value()`): a
fraction rounds up to the next whole core.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from api.quantity import QuantityError, parse_quantity, to_mib_ceil
from api.vgpu_config import VGPUConfig, VGPUConfigError, merge_configs, parse_vgpu_config
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
)
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import whole_value
from dra_driver.objects.dra_vendors import class_vendors

DRIVER_NAME = "vgpu.hami.io"
DEVICE_CLASSES: Mapping[str, str] = {**class_vendors(), "mock.vgpu.hami.io": "MOCK"}
"""DeviceClass name -> vendor: users pick a class per vendor (`dra_driver.objects.dra_vendors`)."""


def claim_request(
    claim: Mapping[str, Any],
    vendors: VendorRegistry,
    *,
    driver: str = DRIVER_NAME,
    device_classes: Mapping[str, str] = DEVICE_CLASSES,
    class_configs: Mapping[str, Sequence[VGPUConfig]] | None = None,
) -> tuple[PodRequest, tuple[str, ...]]:
    """The engine request for a claim and the claim request names, in order.

    `class_configs` holds each DeviceClass's own VGPUConfig parameters, applied
    before the claim's (the claim overrides the class field by field).
    """
    metadata = claim.get("metadata") or {}
    devices = (claim.get("spec") or {}).get("devices") or {}
    requests = devices.get("requests") or []
    if not requests:
        raise InvalidParameterError("spec.devices.requests", "the claim requests no devices")
    claim_configs = _claim_configs(devices.get("config") or [], driver)
    containers, names, policies = [], [], []
    for position, entry in enumerate(requests):
        where = f"spec.devices.requests[{position}]"
        name = entry.get("name") or ""
        exactly = entry.get("exactly")
        if exactly is None:
            raise InvalidParameterError(
                f"{where}.firstAvailable", "only `exactly` requests are supported"
            )
        class_name = exactly.get("deviceClassName") or ""
        vendor = device_classes.get(class_name)
        if vendor is None:
            raise InvalidParameterError(
                f"{where}.exactly.deviceClassName",
                f"{class_name!r} is not a class of this driver; use one of "
                f"{', '.join(sorted(device_classes))}",
            )
        vendors.get(vendor)
        config = merge_configs(
            (class_configs or {}).get(class_name, ()),
            [c for scope, c in claim_configs if not scope or name in scope],
        )
        containers.append((_device_request(vendor, exactly, config, f"{where}.exactly"),))
        names.append(name)
        policies.append(config)
    request = PodRequest(
        namespace=metadata.get("namespace") or "default",
        name=metadata.get("name") or "",
        containers=tuple(containers),
        gpu_policy=next((c.gpu_policy for c in policies if c.gpu_policy), None),
        node_policy=next((c.node_policy for c in policies if c.node_policy), None),
    )
    return request, tuple(names)


def _claim_configs(entries: Sequence[Mapping[str, Any]], driver: str):
    """(request scope, parsed config) for each opaque config meant for `driver`."""
    result = []
    for position, entry in enumerate(entries):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        path = f"spec.devices.config[{position}].opaque.parameters"
        try:
            config = parse_vgpu_config(opaque.get("parameters") or {}, path)
        except VGPUConfigError as error:
            reason = "; ".join(
                f"{where.removeprefix(path + '.')}: {why}" for where, why in error.problems
            )
            raise InvalidParameterError(path, reason) from None
        result.append((frozenset(entry.get("requests") or ()), config))
    return result


def exact_count(exactly: Mapping[str, Any], where: str) -> int:
    """How many devices an `exactly` request asks for: only `ExactCount` (the default)
    is supported, with a positive count (default 1)."""
    mode = exactly.get("allocationMode") or "ExactCount"
    if mode != "ExactCount":
        raise InvalidParameterError(f"{where}.allocationMode", f"{mode} is not supported")
    count = exactly.get("count", 1)
    if not isinstance(count, int) or count < 1:
        raise InvalidParameterError(f"{where}.count", "must be a positive integer")
    return count


def _device_request(
    vendor: str, exactly: Mapping[str, Any], config: VGPUConfig, where: str
) -> DeviceRequest:
    count = exact_count(exactly, where)
    capacity = ((exactly.get("capacity") or {}).get("requests")) or {}
    memory = config.memory_mib or 0
    percent = config.memory_percentage or MEMORY_PERCENT_UNSET
    if "memory" in capacity:
        memory = _capacity(capacity["memory"], f"{where}.capacity.requests.memory", to_mib_ceil)
        percent = MEMORY_PERCENT_UNSET
    if memory == 0 and percent == MEMORY_PERCENT_UNSET:
        percent = 100
    cores = config.cores or 0
    if "cores" in capacity:
        cores = _capacity(capacity["cores"], f"{where}.capacity.requests.cores", _whole_up)
    return DeviceRequest(
        vendor=vendor,
        count=count,
        memory_mib=memory,
        memory_percent=percent,
        cores=cores,
        filters=DeviceFilters(
            use_types=tuple(config.use_types or ()),
            no_use_types=tuple(config.no_use_types or ()),
            use_uuids=tuple(config.use_uuids or ()),
            no_use_uuids=tuple(config.no_use_uuids or ()),
            numa_bind=bool(config.numa_bind),
        ),
    )


def _whole_up(text: str) -> int:
    value = parse_quantity(text)
    if value < 0:
        raise QuantityError(text, "must not be negative")
    return whole_value(value)


def _capacity(raw: Any, field: str, convert) -> int:
    try:
        return convert(str(raw))
    except QuantityError as error:
        raise InvalidParameterError(field, error.reason) from None
