"""AWS Neuron (Inferentia, Trainium): whole devices or single NeuronCores.

A pod asks for devices (`aws.amazon.com/neuron`) or for cores
(`aws.amazon.com/neuroncore`, split into whole devices of at most two
addressable cores). Devices come from `status.capacity`: a device's core
total is a bitmask of its cores (3 for two), and the cores a share takes are
a mask too, so a second one-core pod gets the other core. Several devices
must be a contiguous run: any start on Inferentia (`inf*`, a ring), aligned
runs of 1, 4, 8 or 16 elsewhere; anything else is one `NumaNotFit`. The
webhook only validates, with HAMi's exact messages. The pod keys are only
`hami.io/aws-neuron-devices-allocated` plus the Neuron device plugin's
`AWS_NEURON_IDS` and `NEURON_*`. No lock. Reference: hami-vendors.md (AWS).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from api.quantity import QuantityError, parse_quantity
from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Device
from dra_driver.engine.requests import DeviceFilters, DeviceRequest
from dra_driver.engine.vendor_backends.adapters import PinnedSection, vendor_keys, vendor_resources
from dra_driver.engine.vendor_backends.base import (
    NO_LOCK,
    NO_MUTATION,
    NO_PATCH_CONTEXT,
    BackendFamily,
    ContainerMutation,
    PatchContext,
    VendorBackend,
    VendorNodeDevices,
    node_quantity,
)
from dra_driver.engine.vendor_backends.fit_checks import sharing_refusal
from dra_driver.engine.vendors import FitContext, VendorAdapter
from dra_driver.errors import InvalidParameterError

NEURON_TYPE = "AWSNeuron"
DEVICE_RESOURCE = "aws.amazon.com/neuron"
CORE_RESOURCE = "aws.amazon.com/neuroncore"
USE_UUID, NO_USE_UUID = "aws.amazon.com/use-neuron-uuid", "aws.amazon.com/nouse-neuron-uuid"
ALLOCATED = "hami.io/aws-neuron-devices-allocated"
ASSIGNED_IDS = "AWS_NEURON_IDS"
ASSIGNED_NODE = "aws.amazon.com/predicate-node"
ALLOC_TIME = "NEURON_ALLOC_TIME"
RESOURCE_TYPE = "NEURON_RESOURCE_TYPE"
ALLOCATED_FLAG = "NEURON_ALLOCATED"
NODE_TYPE = "AWSNodeType"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
MAX_DEVICES = (1 << 31) - 1
MAX_CORES_PER_DEVICE = 2
"""Only two cores of a device are addressable (a two-bit mask)."""
MAX_CORES = MAX_DEVICES * MAX_CORES_PER_DEVICE
ALIGNED_RUNS = (1, 4, 8, 16)


def _whole_value(raw: Any) -> int | None:
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return None
    if value != value.to_integral_value() or not -(1 << 63) <= value < (1 << 63):
        return None
    return int(value)


def validate(raw: Any, resource: str, maximum: int, where: str) -> int:
    """The webhook's check of a count: HAMi's messages, naming the field."""
    field = f"{where}.resources.{resource}"
    value = _whole_value(raw)
    if value is None:
        raise InvalidParameterError(field, f"{resource} must be an integer")
    if value <= 0:
        raise InvalidParameterError(field, f"{resource} must be greater than 0")
    if value > maximum:
        raise InvalidParameterError(field, f"{resource} must not exceed {maximum}")
    return value


def split_cores(cores: int, cores_per_device: int, where: str = "container") -> tuple[int, int]:
    """(devices, cores per device) for a core count: one device when it fits in
    one, else whole devices; a count that neither fits nor fills is refused."""
    per_device = min(cores_per_device, MAX_CORES_PER_DEVICE) if cores_per_device > 0 else 2
    field = f"{where}.resources.{CORE_RESOURCE}"
    if cores <= per_device:
        return 1, cores
    if cores % per_device:
        raise InvalidParameterError(
            field, f"{CORE_RESOURCE} must be 1 or a multiple of {per_device}, got {cores}"
        )
    devices = cores // per_device
    if devices > MAX_DEVICES:
        raise InvalidParameterError(
            field,
            f"{CORE_RESOURCE} needs {devices} devices, which exceeds the maximum of {MAX_DEVICES}",
        )
    return devices, per_device


def mask_cores(mask: int) -> int:
    """How many cores a core bitmask names."""
    return bin(mask).count("1") if mask > 0 else 0


def next_core_mask(used_mask: int, wanted: int) -> int:
    """The cores a share gets: on an idle device core 0 (one core) or both (two);
    on a busy one the cores it does not use."""
    if used_mask == 0 and wanted in (1, 2):
        return 1 if wanted == 1 else 3
    return 3 - used_mask


def contiguous_run(free: Sequence[bool], count: int, node_type: str | None) -> list[int]:
    """Positions of `count` contiguous free devices, or []: any start on Inferentia,
    starts aligned to the run length (1, 4, 8, 16) elsewhere; [] without a node type."""
    if node_type is None:
        return []
    step = 1 if "inf" in node_type or "Inf" in node_type else count
    if step != 1 and count not in ALIGNED_RUNS:
        return []
    for start in range(0, len(free), step):
        if start + count <= len(free) and all(free[start : start + count]):
            return list(range(start, start + count))
    return []


class NeuronRules:
    """What one scheduler learns of its nodes: cores per device, from the first node
    it reads (HAMi keeps it per backend), which sizes count requests and core ids."""

    def __init__(self) -> None:
        self.cores_per_device = 0

    def read_request(
        self,
        container: Mapping[str, Any],
        annotations: Mapping[str, str],
        where: str,
        dropped: list[str] | None,
    ) -> DeviceRequest | None:
        """A device count asks that many devices with every core; a core count is
        split into devices. An invalid value asks nothing (the webhook refuses it)."""
        filters = _uuid_filters(annotations)
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        try:
            if DEVICE_RESOURCE in limits or DEVICE_RESOURCE in requests:
                raw = limits.get(DEVICE_RESOURCE, requests.get(DEVICE_RESOURCE))
                count = validate(raw, DEVICE_RESOURCE, MAX_DEVICES, where)
                return DeviceRequest(NEURON_TYPE, count, 0, 0, self.cores_per_device, filters)
            if CORE_RESOURCE in limits or CORE_RESOURCE in requests:
                raw = limits.get(CORE_RESOURCE, requests.get(CORE_RESOURCE))
                cores = validate(raw, CORE_RESOURCE, MAX_CORES, where)
                devices, per_device = split_cores(cores, self.cores_per_device, where)
                return DeviceRequest(NEURON_TYPE, devices, 0, 0, per_device, filters)
        except InvalidParameterError as error:
            if dropped is not None:
                dropped.append(str(error))
        return None

    def fit(
        self,
        slots: Sequence[Slot],
        request: DeviceRequest,
        ctx: FitContext,
        earlier: Sequence[ContainerGrants],
    ) -> tuple[list[Grant] | None, str]:
        """Several devices: a contiguous idle run, each device whole. One device:
        HAMi's per-device checks, the tail first, with cores counted in the mask."""
        if request.count > 1:
            return _run_fit(slots, request)
        failed: dict[str, int] = {}
        for slot in reversed(slots):
            device = slot.device
            reason = _refusal(slot, request, ctx.policy.mutex)
            if reason:
                failed[reason] = failed.get(reason, 0) + 1
                continue
            mask = next_core_mask(slot.cores, request.cores)
            return [Grant(device.id, request.vendor, 0, mask, device.index)], ""
        return None, reasons.format_reason(failed, len(slots))


def _uuid_filters(annotations: Mapping[str, str]) -> DeviceFilters:
    def listed(key: str) -> tuple[str, ...]:
        return tuple(item.strip() for item in annotations.get(key, "").split(",") if item.strip())

    return DeviceFilters(use_uuids=listed(USE_UUID), no_use_uuids=listed(NO_USE_UUID))


def _refusal(slot: Slot, request: DeviceRequest, mutex: bool) -> str:
    device, filters = slot.device, request.filters
    if not device.healthy:
        return reasons.CARD_NOT_HEALTH
    if request.vendor not in device.type or request.vendor != NEURON_TYPE:
        return reasons.CARD_TYPE_MISMATCH
    if refusal := sharing_refusal(slot, filters, mutex):
        return refusal
    if mask_cores(device.cores) - mask_cores(slot.cores) < request.cores:
        return reasons.CARD_INSUFFICIENT_CORE
    return ""


def _run_fit(slots: Sequence[Slot], request: DeviceRequest) -> tuple[list[Grant] | None, str]:
    node_type = slots[0].device.custom_info.get(NODE_TYPE) if slots else None
    free = [slot.used == 0 and slot.device.healthy for slot in slots]
    run = contiguous_run(free, request.count, node_type if isinstance(node_type, str) else None)
    if not run:
        return None, reasons.format_reason({reasons.NUMA_NOT_FIT: 1}, len(slots))
    by_index: dict[int, Slot] = {}
    for slot in slots:
        by_index.setdefault(slot.device.index, slot)
    grants = []
    for position in run:
        slot = by_index.get(position)
        if slot is not None:
            device = slot.device
            grants.append(
                Grant(device.id, request.vendor, device.memory_mib, device.cores, device.index)
            )
    return grants, ""


class AwsNeuronBackend(VendorBackend):
    """AWS Neuron devices and cores from `status.capacity`."""

    def __init__(self) -> None:
        self.rules = NeuronRules()
        adapter = VendorAdapter(
            name=NEURON_TYPE,
            common_word=NEURON_TYPE,
            resources=vendor_resources(DEVICE_RESOURCE, cores=CORE_RESOURCE),
            annotations=vendor_keys(
                use_uuids=USE_UUID,
                no_use_uuids=NO_USE_UUID,
                to_allocate="",
                allocated=ALLOCATED,
            ),
            read_request=self.rules.read_request,
            fit=self.rules.fit,
        )
        super().__init__(
            adapter, register_key=None, handshake_key=None, lock=NO_LOCK, to_allocate_key=""
        )

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """Validation only: a device count, else a core count that splits into devices."""
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if DEVICE_RESOURCE in limits or DEVICE_RESOURCE in requests:
            validate(
                limits.get(DEVICE_RESOURCE, requests.get(DEVICE_RESOURCE)),
                DEVICE_RESOURCE,
                MAX_DEVICES,
                where,
            )
            return ContainerMutation(True)
        if CORE_RESOURCE not in limits and CORE_RESOURCE not in requests:
            return NO_MUTATION
        cores = validate(
            limits.get(CORE_RESOURCE, requests.get(CORE_RESOURCE)), CORE_RESOURCE, MAX_CORES, where
        )
        split_cores(cores, self.rules.cores_per_device, where)
        return ContainerMutation(True)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """One device per unit of `aws.amazon.com/neuron`; slots and the core mask
        from the cores per device (learned from the first node read)."""
        metadata = node.get("metadata") or {}
        name = str(metadata.get("name") or "")
        devices = node_quantity(node, "capacity", DEVICE_RESOURCE)
        if devices <= 0:
            return VendorNodeDevices(self.name, problem=f"device not found {DEVICE_RESOURCE}")
        if self.rules.cores_per_device == 0:
            self.rules.cores_per_device = (
                max(node_quantity(node, "capacity", CORE_RESOURCE), 0) // devices
            )
        per_device = self.rules.cores_per_device
        node_type = str((metadata.get("labels") or {}).get(INSTANCE_TYPE_LABEL, ""))
        return VendorNodeDevices(
            self.name,
            tuple(
                Device(
                    id=f"{name}-{NEURON_TYPE}-{index}",
                    index=index,
                    type=NEURON_TYPE,
                    count=per_device,
                    memory_mib=0,
                    cores=(1 << per_device) - 1,
                    custom_info={NODE_TYPE: node_type},
                )
                for index in range(devices)
            ),
            None,
            "",
        )

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """PatchAnnotations: the allocated key, and for the device plugin the device
        indexes (containers with a device limit) or core ids (the others) of every
        container, in order, with the node (`context.node`), the time and the core
        resource type. Which containers have a device limit is read from `context.pod`."""
        result = super().pod_annotations(containers)
        if not result:
            return result
        spec = context.pod.get("spec") or {}
        pod_containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
        ids: list[str] = []
        for position, container in enumerate(containers):
            grants = [grant for grant in container if grant.vendor == self.name]
            if not grants or position >= len(pod_containers):
                continue
            limits = (pod_containers[position].get("resources") or {}).get("limits") or {}
            by_device = DEVICE_RESOURCE in limits
            for grant in grants:
                if by_device:
                    if (_whole_value(limits[DEVICE_RESOURCE]) or 0) > 0:
                        ids.append(str(grant.index))
                    continue
                base = self.rules.cores_per_device * grant.index
                for bit in (1, 2):
                    if grant.cores & bit:
                        ids.append(str(base + bit - 1))
                        result[RESOURCE_TYPE] = CORE_RESOURCE
            if ids:
                result[ASSIGNED_IDS] = ",".join(ids)
                result[ALLOC_TIME] = str(context.now_ns)
                result[ALLOCATED_FLAG] = "false"
                result[ASSIGNED_NODE] = context.node
        return result


class AwsNeuronConfig(PinnedSection):
    """The `awsneuron:` section of device-config.yaml (HAMi's keys)."""

    resource_count_name: Literal[DEVICE_RESOURCE] = Field(
        DEVICE_RESOURCE, alias="resourceCountName"
    )
    resource_core_name: Literal[CORE_RESOURCE] = Field(CORE_RESOURCE, alias="resourceCoreName")


FAMILY = BackendFamily(
    section="awsneuron",
    model=AwsNeuronConfig,
    build=lambda config: (AwsNeuronBackend(),),
)
