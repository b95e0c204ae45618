"""How HAMi's capacity-sized vendors read a container's count, memory and cores.

Cambricon and Mthreads (and their kin) share one shape of
GenerateResourceRequests that is not NVIDIA's: the count is read as a whole
number (limits before requests); the memory is a number of vendor units
times a fixed factor, and a memory value that is not a whole number, is
negative, or overflows int32 after the factor drops the whole request; no
memory means the whole card (percentage 100), a memory amount means a
percentage of 0; a core value that is not a whole number is ignored and the
vendor's default applies. The vendor modules call `read_sized_request` with
their factor and default; the rest (Mthreads' division by the count) is
theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendors import VendorAdapter
from dra_driver.objects.pod_workloads import vendor_filters

INT32_MAX = (1 << 31) - 1
WHOLE_CARD_PERCENT = 100


def resource_value(container: Mapping[str, Any], name: str) -> Any:
    """A resource's raw value, limits before requests; None when in neither (or unnamed)."""
    if not name:
        return None
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    if name in limits:
        return limits[name]
    return (resources.get("requests") or {}).get(name)


def limit_value(container: Mapping[str, Any], name: str) -> Any:
    """A resource's raw value in limits only (AMD and Metax sGPU read nothing else);
    None when absent (or unnamed)."""
    if not name:
        return None
    return ((container.get("resources") or {}).get("limits") or {}).get(name)


def as_int64(raw: Any) -> int | None:
    """Go's `Quantity.AsInt64`: the value when it is a whole number, else None."""
    if raw is None:
        return None
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return None
    if value != value.to_integral_value():
        return None
    return int(value)


def request_count(raw: Any) -> int | None:
    """A device count HAMi's vendors accept (AMD, Hygon, Metax sGPU): a whole number
    in 1..MaxInt32; None for anything else, which drops the request."""
    count = as_int64(raw)
    return count if count is not None and 0 < count <= INT32_MAX else None


def read_sized_request(
    vendor: VendorAdapter,
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
    *,
    default_cores: int,
) -> DeviceRequest | None:
    """The shared reading (module docstring); `vendor.memory_factor` is the unit in MiB.

    None when the container asks for no device of the vendor (no count, or a
    count of 0 or less) or when HAMi drops the request for its memory value.
    """
    names = vendor.resources
    count = as_int64(resource_value(container, names.count))
    if count is None or count <= 0:
        return None
    memory = 0
    raw_memory = resource_value(container, names.memory)
    if raw_memory is not None:
        units = as_int64(raw_memory)
        factor = vendor.memory_factor
        if units is None or not 0 <= units <= INT32_MAX // factor:
            if dropped is not None:
                dropped.append(
                    f"{where}.resources.{names.memory}: {raw_memory!s} is not a whole number "
                    f"of {factor} MiB units within int32; HAMi ignores this {vendor.name} "
                    "request, so the container gets no device"
                )
            return None
        memory = units * factor
    cores = as_int64(resource_value(container, names.cores))
    return DeviceRequest(
        vendor=vendor.name,
        count=count,
        memory_mib=memory,
        memory_percent=0 if memory else WHOLE_CARD_PERCENT,
        cores=default_cores if cores is None else cores,
        filters=vendor_filters(vendor, annotations),
    )
