"""Metax sGPU (request Type `Metax-SGPU`): shared Metax cards, from the `metax:` section.

Where it differs from NVIDIA (reference/hami-vendors.md, HAMi's
`pkg/device/metax/sdevice.go`): requests are read from **limits only**, a
bare vmemory number is GiB and a quantity with a unit is bytes (both end as
MiB); the webhook checks the pod's app class (`online`/`offline`, one card)
and qos policy, writing the default `best-effort` into the pod; the devices
come from the JSON list in `metax-tech.com/node-gpu-devices`, each carrying
its qos policy, model and MetaLink zone. The Fit is shaped differently: every
candidate is collected first (type before health, then app class and qos),
without clamping cores, and only then are `count` cards taken, online pods
preferring lightly loaded cards and exclusive requests one MetaLink zone.
The score is policy-neutral (online load, or MetaLink topology for exclusive
cards) and weighted by HAMi's OverrideScore: x10000, x-10000 under spread.
The Fit and the score, and how they know the pods already on a card, are in
`metax_sgpu_fit`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from pydantic import Field

from api.quantity import QuantityError, canonical_quantity, parse_quantity
from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant
from dra_driver.engine.model import Device
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends.adapters import (
    ConfigSection,
    reading_with,
    vendor_keys,
    vendor_resources,
)
from dra_driver.engine.vendor_backends.base import (
    NO_MUTATION,
    NO_PATCH_CONTEXT,
    BackendFamily,
    ContainerMutation,
    PatchContext,
    VendorBackend,
    VendorNodeDevices,
    annotations_of,
)
from dra_driver.engine.vendor_backends.metax_gpu import DEFAULT_SECTION
from dra_driver.engine.vendor_backends.metax_sgpu_fit import (
    APP_CLASS,
    APP_CLASSES,
    METAX_SGPU,
    OFFLINE,
    ONLINE,
    QOS_POLICY,
    TOPOLOGY_AWARE,
    WHOLE_CARD,
    fit_sgpu,
    sgpu_score,
    share_tag,
)
from dra_driver.engine.vendor_backends.reading import (
    INT32_MAX,
    as_int64,
    limit_value,
    request_count,
)
from dra_driver.engine.vendors import VendorAdapter
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_workloads import vendor_filters

REGISTER = "metax-tech.com/node-gpu-devices"
TO_ALLOCATE = "hami.io/metax-sgpu-devices-to-allocate"
ALLOCATED = "hami.io/metax-sgpu-devices-allocated"
ALLOCATED_SDEVICES = "metax-tech.com/gpu-devices-allocated"
PREDICATE_TIME = "metax-tech.com/predicate-time"
USE_UUID, NO_USE_UUID = "metax-tech.com/use-gpuuuid", "metax-tech.com/nouse-gpuuuid"
POD_FACT_KEYS = (APP_CLASS, QOS_POLICY, TOPOLOGY_AWARE)
BEST_EFFORT, FIXED_SHARE, BURST_SHARE = "best-effort", "fixed-share", "burst-share"
QOS_POLICIES = (BEST_EFFORT, FIXED_SHARE, BURST_SHARE)


MEMORY_FACTOR = 1024
"""A bare vmemory number is GiB: 1024 MiB each."""


class MetaxSgpuConfig(ConfigSection):
    """The sGPU keys of the `metax:` section (Go `MetaxConfig`); a key left out is empty,
    as in Go, so HAMi's default section (whole cards only) reads no sGPU resource."""

    resource_vcount_name: str = Field("", alias="resourceVCountName")
    resource_vmemory_name: str = Field(
        "", alias="resourceVMemoryName", description="GiB as a bare number, bytes with a unit."
    )
    resource_vcore_name: str = Field("", alias="resourceVCoreName", description="Percent.")
    topology_aware: bool = Field(
        False,
        alias="sgpuTopologyAware",
        description="Score exclusive cards by MetaLink zone unless the pod says otherwise.",
    )


# -- requests


def _go_divide(value: int, divisor: int) -> int:
    """Go's integer division, truncating toward zero."""
    quotient = abs(value) // divisor
    return quotient if value >= 0 else -quotient


def _memory_mib(raw: Any) -> int | None:
    """A vmemory limit in MiB: a bare number is GiB, a quantity whose canonical form
    has a unit (`16Gi`, and `2k` for 2000) is bytes; None when out of int32."""
    value = as_int64(raw)
    if value is None:
        return 0
    if any(char.isascii() and char.isalpha() for char in canonical_quantity(str(raw))):
        memory = _go_divide(_go_divide(value, 1024), 1024)
    elif not 0 <= value <= INT32_MAX // MEMORY_FACTOR:
        return None
    else:
        memory = value * MEMORY_FACTOR
    return memory if 0 <= memory <= INT32_MAX else None


def read_sgpu_request(
    adapter: VendorAdapter,
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """GenerateResourceRequests: count 1..MaxInt32, cores 0..MaxInt32 (default 100; a
    value that is not a whole number keeps it) and memory, all from limits. Out
    of range drops the request. No memory means the whole card (100 %)."""
    names = adapter.resources
    count = request_count(limit_value(container, names.count))
    if count is None:
        return None

    def drop(name: str, raw: Any) -> None:
        if dropped is not None:
            dropped.append(
                f"{where}.resources.limits.{name}: {raw!s} is out of int32 range; "
                f"HAMi ignores this {METAX_SGPU} request, so the container gets no device"
            )

    cores = WHOLE_CARD
    raw_cores = limit_value(container, names.cores)
    value = as_int64(raw_cores)
    if value is not None:
        if not 0 <= value <= INT32_MAX:
            drop(names.cores, raw_cores)
            return None
        cores = value
    memory = 0
    raw_memory = limit_value(container, names.memory)
    if raw_memory is not None:
        read = _memory_mib(raw_memory)
        if read is None:
            drop(names.memory, raw_memory)
            return None
        memory = read
    return DeviceRequest(
        vendor=METAX_SGPU,
        count=count,
        memory_mib=memory,
        memory_percent=0 if memory else WHOLE_CARD,
        cores=cores,
        filters=vendor_filters(adapter, annotations),
        pod_facts=tuple((key, annotations[key]) for key in POD_FACT_KEYS if key in annotations),
    )


# -- the backend


def sgpu_adapter(config: MetaxSgpuConfig) -> VendorAdapter:
    """The engine's Metax sGPU adapter for one `metax:` section."""
    adapter = VendorAdapter(
        name=METAX_SGPU,
        common_word=METAX_SGPU,
        resources=vendor_resources(
            config.resource_vcount_name, config.resource_vmemory_name, config.resource_vcore_name
        ),
        annotations=vendor_keys(
            use_uuids=USE_UUID,
            no_use_uuids=NO_USE_UUID,
            to_allocate=TO_ALLOCATE,
            allocated=ALLOCATED,
        ),
        memory_factor=MEMORY_FACTOR,
        default_count=0,
        default_cores=WHOLE_CARD,
        fit=fit_sgpu,
        usage_score=partial(sgpu_score, topology_default=config.topology_aware),
    )
    return reading_with(adapter, read_sgpu_request)


class RegisterError(ValueError):
    """The sGPU register annotation cannot be read as HAMi's MetaxSDeviceInfo list."""


_STRING_FIELDS = ("uuid", "bdf", "model", "qosPolicy")
_INT32_FIELDS = (
    "totalDevCount",
    "totalCompute",
    "totalVRam",
    "availableDevCount",
    "availableCompute",
    "availableVRam",
    "numa",
    "linkZone",
)


def decode_sgpu_register(value: str) -> list[dict[str, Any]]:
    """`metax-tech.com/node-gpu-devices` as Go's json.Unmarshal reads it into
    []*MetaxSDeviceInfo: keys matched case-insensitively, unknown keys ignored,
    null as the zero value, a wrong type or an int32 overflow an error."""
    try:
        document = json.loads(value)
    except ValueError as error:
        raise RegisterError(f"not JSON: {error}") from None
    if not isinstance(document, list):
        raise RegisterError("expected a JSON list of devices")
    return [_device_entry(entry, position) for position, entry in enumerate(document)]


def _device_entry(entry: Any, position: int) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise RegisterError(f"device {position}: expected an object")
    lowered: dict[str, Any] = {}
    for key, item in entry.items():
        lowered.setdefault(key.lower(), item)
    result: dict[str, Any] = {}
    for name in (*_STRING_FIELDS, *_INT32_FIELDS, "healthy"):
        item = lowered.get(name.lower())
        if name in _STRING_FIELDS:
            valid = item is None or isinstance(item, str)
            result[name] = item or ""
        elif name == "healthy":
            valid = item is None or isinstance(item, bool)
            result[name] = bool(item)
        else:
            valid = item is None or (
                isinstance(item, int)
                and not isinstance(item, bool)
                and -(1 << 31) <= item <= INT32_MAX
            )
            result[name] = item or 0
        if not valid:
            raise RegisterError(f"device {position}: {name}: {item!r} has the wrong type")
    return result


def sgpu_devices(entries: Sequence[Mapping[str, Any]]) -> tuple[Device, ...]:
    """convertMetaxSDeviceToHAMIDevice: index by position, totals from the register,
    the card's qos policy, model and MetaLink zone as its custom info."""
    return tuple(
        Device(
            id=entry["uuid"],
            index=index,
            type=METAX_SGPU,
            count=entry["totalDevCount"],
            memory_mib=entry["totalVRam"],
            cores=entry["totalCompute"],
            numa=entry["numa"],
            healthy=entry["healthy"],
            mode="",
            custom_info={
                "QosPolicy": entry["qosPolicy"],
                "Model": entry["model"],
                "LinkZone": entry["linkZone"],
            },
        )
        for index, entry in enumerate(entries)
    )


def _value(raw: Any) -> int | None:
    """Quantity.Value(): rounded up to a whole number; None when unreadable."""
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return None
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


class MetaxSgpuBackend(VendorBackend):
    """HAMi's Metax sGPU backend for one `metax:` section."""

    def __init__(self, config: MetaxSgpuConfig | None = None) -> None:
        self.config = config or MetaxSgpuConfig()
        super().__init__(sgpu_adapter(self.config), register_key=REGISTER, handshake_key=None)

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """MutateAdmission: a count in limits; an app class must be online or offline and
        ask one card; a pod that is not online gets `best-effort` unless it names
        one of the three qos policies."""
        count = limit_value(container, self.count_resource)
        if count is None:
            return NO_MUTATION
        annotations = annotations_of(pod)
        app_class = annotations.get(APP_CLASS)
        if app_class is not None:
            if app_class not in APP_CLASSES:
                raise InvalidParameterError(
                    f"metadata.annotations[{APP_CLASS}]",
                    f"{APP_CLASS} must be set one of [{ONLINE}, {OFFLINE}]",
                )
            if _value(count) != 1:
                raise InvalidParameterError(
                    f"{where}.resources.limits.{self.count_resource}",
                    "app-class pod must request single device",
                )
        if app_class == ONLINE:
            return ContainerMutation(True)
        qos = annotations.get(QOS_POLICY)
        if qos is None:
            return ContainerMutation(True, pod_annotations={QOS_POLICY: BEST_EFFORT})
        if qos not in QOS_POLICIES:
            raise InvalidParameterError(
                f"metadata.annotations[{QOS_POLICY}]",
                f"{QOS_POLICY} must be set one of [{', '.join(QOS_POLICIES)}]",
            )
        return ContainerMutation(True)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """GetNodeDevices and CheckHealth: the register's cards, none when it is missing,
        unreadable or empty (each card's own `healthy` is its health)."""
        register = annotations_of(node).get(REGISTER)
        if register is None:
            return VendorNodeDevices(self.name)
        try:
            entries = decode_sgpu_register(register)
        except RegisterError as error:
            problem = f"{reasons.NODE_UNREGISTERED}: annotation {REGISTER}: {error}"
            return VendorNodeDevices(self.name, (), register, problem)
        if not entries:
            problem = f"{reasons.NODE_UNREGISTERED}: annotation {REGISTER}: no sdevice found"
            return VendorNodeDevices(self.name, (), register, problem)
        return VendorNodeDevices(self.name, sgpu_devices(entries), register, "")

    def usage_tag(self, annotations: Mapping[str, str], grant: Grant) -> str:
        """The pod's app class and the qos it expects of the card (HAMi's PodInfos)."""
        app_class = annotations.get(APP_CLASS, "")
        return share_tag(app_class, annotations.get(QOS_POLICY, ""), grant.cores)

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """Both pod keys, the device plugin's `metax-tech.com/gpu-devices-allocated`
        (per container `[{uuid, compute, vRam}]`, zeros left out as Go's omitempty)
        and `metax-tech.com/predicate-time` (the placement's Unix nanoseconds)."""
        result = super().pod_annotations(containers, context)
        if not result:
            return result
        allocated = [
            [
                {
                    "uuid": device.uuid,
                    **({"compute": device.usedcores} if device.usedcores else {}),
                    **({"vRam": device.usedmem} if device.usedmem else {}),
                }
                for device in container
            ]
            for container in self.container_devices(containers)
        ]
        result[ALLOCATED_SDEVICES] = json.dumps(
            allocated, separators=(",", ":"), ensure_ascii=False
        )
        result[PREDICATE_TIME] = str(context.now_ns)
        return result


FAMILY = BackendFamily(
    section="metax",
    model=MetaxSgpuConfig,
    build=lambda config: (MetaxSgpuBackend(config),),
    default=DEFAULT_SECTION,
    name="metax-sgpu",
)
