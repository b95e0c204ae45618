"""AMD (request Type `AMD`) and the `amd:` section of device-config.yaml.

HAMi's `pkg/device/amd` (reference/hami-vendors.md): the count resource
`amd.com/gpu` and optional memory (MiB) and core-percentage names from the
config; requests read from **limits only**; the JSON register
`hami.io/node-amd-register`, no handshake, and CheckHealth = a count in
`status.capacity` above 0 (else the vendor's devices are dropped from the
node); the type filter `amd.com/use-gputype` / `nouse-gputype` and the uuid
filter `amd.com/use-gpu-uuid` / `nouse-gpu-uuid` (hyphenated); the shared
lock and the pod keys `hami.io/amd-devices-to-allocate` / `-allocated`.
Its Fit is its own (`fit_amd`): no memory means the whole card, cores are a
percentage of the card's compute units, and a grant keeps the card's
registered type.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from api.hami_annotations import RegisteredDevice, decode_node_devices_json
from dra_driver.engine import reasons
from dra_driver.engine.fit import type_allowed
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends.adapters import ResourceSection, reading_with, vendor_keys
from dra_driver.engine.vendor_backends.base import (
    BackendFamily,
    ContainerMutation,
    VendorBackend,
    VendorNodeDevices,
    node_quantity,
)
from dra_driver.engine.vendor_backends.fit_checks import sharing_refusal
from dra_driver.engine.vendor_backends.reading import (
    INT32_MAX,
    as_int64,
    limit_value,
    request_count,
)
from dra_driver.engine.vendors import FitContext, VendorAdapter
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_workloads import vendor_filters

AMD = "AMD"
REGISTER = "hami.io/node-amd-register"
KEYS = vendor_keys(
    use_types="amd.com/use-gputype",
    no_use_types="amd.com/nouse-gputype",
    use_uuids="amd.com/use-gpu-uuid",
    no_use_uuids="amd.com/nouse-gpu-uuid",
    to_allocate="hami.io/amd-devices-to-allocate",
    allocated="hami.io/amd-devices-allocated",
)
"""The pod annotations that filter AMD cards and carry their grants."""
WHOLE_CARD_PERCENT = 100


class AMDConfig(ResourceSection):
    """The `amd:` section (Go `AMDConfig`): the memory resource is MiB per card (empty:
    whole cards), the core resource percent of each card's compute units."""


HAMI_DEFAULT = {"resourceCountName": "amd.com/gpu"}
"""The section of HAMi's built-in default config (InitDefaultDevices)."""


def read_amd_request(
    adapter: VendorAdapter,
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """AMD's GenerateResourceRequests: count 1..MaxInt32, memory 0..MaxInt32 MiB and a
    core percentage 1..100 (default 100), all from limits; any of them out of
    range (or not a whole number) drops the request. The percentage field is 0."""
    names = adapter.resources
    count = request_count(limit_value(container, names.count))
    if count is None:
        return None

    def drop(name: str, raw: Any, allowed: str) -> None:
        if dropped is not None:
            dropped.append(
                f"{where}.resources.limits.{name}: {raw!s} is not a whole number in {allowed}; "
                f"HAMi ignores this {AMD} request, so the container gets no device"
            )

    memory = 0
    raw_memory = limit_value(container, names.memory)
    if raw_memory is not None:
        value = as_int64(raw_memory)
        if value is None or not 0 <= value <= INT32_MAX:
            drop(names.memory, raw_memory, "0..2147483647")
            return None
        memory = value
    cores = WHOLE_CARD_PERCENT
    raw_cores = limit_value(container, names.cores)
    if raw_cores is not None:
        value = as_int64(raw_cores)
        if value is None or not 1 <= value <= WHOLE_CARD_PERCENT:
            drop(names.cores, raw_cores, "1..100")
            return None
        cores = value
    return DeviceRequest(
        vendor=AMD,
        count=count,
        memory_mib=memory,
        memory_percent=0,
        cores=cores,
        filters=vendor_filters(adapter, annotations),
    )


def fit_amd(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[list[Grant] | None, str]:
    """AMD's Fit, from the tail: health, type, uuid, a free slot, mutex; then memory
    (0: the whole card) and compute units (`total * percent / 100`, at least 1, at
    most the card; no percentage with whole-card memory takes every CU)."""
    wanted = request.count
    picks: list[Grant] = []
    failed: Counter[str] = Counter()
    for slot in reversed(slots):
        device = slot.device
        if not device.healthy:
            failed[reasons.CARD_NOT_HEALTH] += 1
            continue
        if not type_allowed(request.filters, device):
            failed[reasons.CARD_TYPE_MISMATCH] += 1
            continue
        if refusal := sharing_refusal(slot, request.filters, ctx.policy.mutex):
            failed[refusal] += 1
            continue
        memory = request.memory_mib
        if memory <= 0 and device.memory_mib > 0:
            memory = device.memory_mib
        if device.memory_mib - slot.memory < memory:
            failed[reasons.CARD_INSUFFICIENT_MEMORY] += 1
            continue
        cores = 0
        if request.cores > 0:
            if device.cores <= 0:
                failed[reasons.CARD_INSUFFICIENT_CORE] += 1
                continue
            cores = min(max(device.cores * request.cores // 100, 1), device.cores)
        elif device.memory_mib > 0 and memory >= device.memory_mib:
            cores = device.cores
        if device.cores - slot.cores < cores:
            failed[reasons.CARD_INSUFFICIENT_CORE] += 1
            continue
        picks.append(Grant(device.id, AMD, memory, cores, device.index, device.type))
        if len(picks) == wanted:
            return picks, ""
    if picks:
        failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picks)
    return None, reasons.format_reason(failed, len(slots))


def amd_adapter(config: AMDConfig) -> VendorAdapter:
    """The engine's AMD adapter for one `amd:` section."""
    adapter = VendorAdapter(
        name=AMD,
        common_word=AMD,
        resources=config.resources(),
        annotations=KEYS,
        default_count=0,
        default_cores=WHOLE_CARD_PERCENT,
        fit=fit_amd,
    )
    return reading_with(adapter, read_amd_request)


class AMDBackend(VendorBackend):
    """HAMi's AMD backend."""

    def __init__(self, config: AMDConfig) -> None:
        super().__init__(amd_adapter(config), register_key=REGISTER, handshake_key=None)

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        """GetNodeDevices: UnMarshalNodeDevices only."""
        return decode_node_devices_json(value, REGISTER)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """The JSON register, dropped when CheckHealth fails: no count in capacity."""
        read = super().node_devices(node, now, handshake_timeout)
        gone = self.count_resource and node_quantity(node, "capacity", self.count_resource) <= 0
        if read.usable and gone:
            problem = f"{self.count_resource} capacity is 0: the AMD device plugin is gone"
            return VendorNodeDevices(self.name, (), read.register_value, problem, False)
        return read

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """True when the count, memory or core resource is in limits; with the count, a
        core value that is not a whole percentage in 1..100 is refused."""
        names = self.adapter.resources
        count = limit_value(container, names.count)
        cores = limit_value(container, names.cores)
        if count is not None and cores is not None:
            value = as_int64(cores)
            if value is None or not 1 <= value <= WHOLE_CARD_PERCENT:
                raise InvalidParameterError(
                    f"{where}.resources.limits.{names.cores}",
                    f"{names.cores} must be an integer percentage between 1 and 100",
                )
        found = any(
            limit_value(container, name) is not None for name in (names.count, names.memory)
        )
        return ContainerMutation(found or cores is not None)


FAMILY = BackendFamily(
    section="amd",
    model=AMDConfig,
    build=lambda config: (AMDBackend(config),),
    default=HAMI_DEFAULT,
)
