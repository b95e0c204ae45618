"""Hygon DCU (request Type `DCU`) and the `hygon:` section of device-config.yaml.

HAMi's `pkg/device/hygon` (reference/hami-vendors.md): resources
`hygon.com/dcunum`, `dcumem`, `dcucores`; the register
`hami.io/node-dcu-register` in the legacy colon list only; the generic
handshake on `hami.io/node-handshake-dcu`; the type filter
`hygon.com/use-dcutype` / `nouse-dcutype` and the uuid filter
`hygon.com/use-gpuuuid` / `nouse-gpuuuid`; the standard Fit (no NUMA binding,
no topology), ScoreNode 0, the shared lock and the pod keys
`hami.io/dcu-devices-to-allocate` / `-allocated`. The webhook only reports
whether the count is in limits. What differs from NVIDIA is the request
reading (`read_dcu_request`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

from api.hami_annotations import RegisteredDevice, decode_node_devices_legacy
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends.adapters import ResourceSection, reading_with, vendor_keys
from dra_driver.engine.vendor_backends.base import BackendFamily, VendorBackend
from dra_driver.engine.vendor_backends.reading import (
    INT32_MAX,
    as_int64,
    request_count,
    resource_value,
)
from dra_driver.engine.vendors import VendorAdapter
from dra_driver.objects.pod_workloads import vendor_filters

DCU = "DCU"
REGISTER = "hami.io/node-dcu-register"
HANDSHAKE = "hami.io/node-handshake-dcu"
KEYS = vendor_keys(
    use_types="hygon.com/use-dcutype",
    no_use_types="hygon.com/nouse-dcutype",
    use_uuids="hygon.com/use-gpuuuid",
    no_use_uuids="hygon.com/nouse-gpuuuid",
    to_allocate="hami.io/dcu-devices-to-allocate",
    allocated="hami.io/dcu-devices-allocated",
)
"""The pod annotations that filter DCUs and carry their grants."""
DEFAULT_CORES = 100
"""No core resource: the whole card's compute (exclusive)."""


class HygonConfig(ResourceSection):
    """The `hygon:` section (Go `HygonConfig`) and its `memoryFactor`."""

    memory_factor: int = Field(
        0,
        alias="memoryFactor",
        ge=0,
        le=INT32_MAX,
        description="Multiplier of dcumem, applied when above 1 (int32 in Go).",
    )


HAMI_DEFAULT = {
    "resourceCountName": "hygon.com/dcunum",
    "resourceMemoryName": "hygon.com/dcumem",
    "resourceCoreName": "hygon.com/dcucores",
}
"""The section of HAMi's built-in default config (InitDefaultDevices)."""


def read_dcu_request(
    adapter: VendorAdapter,
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """Hygon's GenerateResourceRequests, limits before requests for each resource.

    The count must be a whole number in 1..MaxInt32. A whole memory value outside
    0..MaxInt32, or past MaxInt32 once `memoryFactor` (> 1) is applied, drops the
    request, and so does a whole core value outside 0..MaxInt32; a memory or
    core value that is not a whole number is ignored (no memory: the whole
    card by percentage; no cores: 100)."""
    names = adapter.resources
    count = request_count(resource_value(container, names.count))
    if count is None:
        return None

    def drop(resource: str, raw: Any, why: str) -> None:
        if dropped is not None:
            dropped.append(
                f"{where}.resources.{resource}: {raw!s} {why}; HAMi ignores this {DCU} "
                "request, so the container gets no device"
            )

    memory = 0
    raw_memory = resource_value(container, names.memory)
    units = as_int64(raw_memory)
    if units is not None:
        if not 0 <= units <= INT32_MAX:
            drop(names.memory, raw_memory, "is outside 0..2147483647")
            return None
        if adapter.memory_factor > 1:
            units *= adapter.memory_factor
            if units > INT32_MAX:
                drop(names.memory, raw_memory, f"overflows int32 x {adapter.memory_factor}")
                return None
        memory = units
    cores = DEFAULT_CORES
    raw_cores = resource_value(container, names.cores)
    whole_cores = as_int64(raw_cores)
    if whole_cores is not None:
        if not 0 <= whole_cores <= INT32_MAX:
            drop(names.cores, raw_cores, "is outside 0..2147483647")
            return None
        cores = whole_cores
    return DeviceRequest(
        vendor=DCU,
        count=count,
        memory_mib=memory,
        memory_percent=0 if memory else 100,
        cores=cores,
        filters=vendor_filters(adapter, annotations),
    )


def dcu_adapter(config: HygonConfig) -> VendorAdapter:
    """The engine's DCU adapter for one `hygon:` section."""
    adapter = VendorAdapter(
        name=DCU,
        common_word=DCU,
        resources=config.resources(),
        annotations=KEYS,
        memory_factor=max(config.memory_factor, 1),
        default_count=0,
        default_cores=DEFAULT_CORES,
    )
    return reading_with(adapter, read_dcu_request)


class HygonBackend(VendorBackend):
    """HAMi's DCU backend: the legacy colon register, everything else the default."""

    def __init__(self, config: HygonConfig) -> None:
        super().__init__(dcu_adapter(config), register_key=REGISTER, handshake_key=HANDSHAKE)

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        """GetNodeDevices: DecodeNodeDevices only (JSON is an error, as in HAMi)."""
        return decode_node_devices_legacy(value, REGISTER)


FAMILY = BackendFamily(
    section="hygon",
    model=HygonConfig,
    build=lambda config: (HygonBackend(config),),
    default=HAMI_DEFAULT,
)
