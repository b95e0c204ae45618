"""Mixed mode's node-side check: one GPU's holders from both paths, summed, decided without I/O.

A node may serve the same GPUs to legacy pods (device plugin, HAMi annotations)
and to DRA claims (kubelet plugin) at once. The control plane keeps the two from
over-committing a GPU (the DRA controller counts legacy pods, the extender
counts claims, both under the node lock); this is the second line behind it: the
kubelet plugin's prepare and the device plugin's Allocate add up what the node
really holds of each GPU and refuse a share that would exceed its memory, cores
or share slots. In a correct run it never fires, so it must never count more
than the allocators do: a legacy pod counts as HAMi's scheduler counts it
(every vendor's allocated list, init containers collapsed, terminated pods
not at all), a DRA result as the controller counts it (its consumedCapacity,
or the whole device when it has none).

Usage is keyed by the GPU's uuid, the identity both paths share: the slice
device's `uuid` attribute and the register annotation's device id.
Units are the engine's: memory in MiB, cores in percent, slots in shares.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.hami_annotations import (
    AnnotationDecodeError,
    PodDevices,
    RegisteredDevice,
    decode_pod_devices,
)
from api.quantity import MIB, QuantityError, parse_quantity, to_mib_ceil
from dra_driver.engine.grants import Grant
from dra_driver.engine.usage import collapse_pod_usage
from kubeletplugin.prepare_plan import ClaimPlan, DeviceCapacity

HAMI_PREFIX = "hami.io/"
ALLOCATED_SUFFIX = "-devices-allocated"
"""Every HAMi vendor's allocated list is `hami.io/<vendor>-devices-allocated`
(`hami.io/vgpu-devices-allocated` for NVIDIA); the node side reads them all,
since it does not know the scheduler's device config."""

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})

PreparedShare = tuple[str, str, int, int]
"""(holder, device name, memory bytes, cores) of a claim prepared (or being prepared) here."""


@dataclass(frozen=True, slots=True)
class GpuHold:
    """What one holder (a legacy pod or a DRA claim) takes of one GPU."""

    holder: str
    """`pod <namespace>/<name>` or `claim <namespace>/<name>`, as the refusal names it."""
    uuid: str
    memory_mib: int
    cores: int
    shares: int

    def describe(self) -> str:
        return f"{self.holder} ({self.memory_mib} MiB, {self.cores} cores, {self.shares} share)"


@dataclass(frozen=True, slots=True)
class GpuLimits:
    """What one GPU offers to both paths together."""

    uuid: str
    name: str
    """The slice device name (`gpu-<index>`), for the message."""
    memory_mib: int
    cores: int
    shares: int


def allocated_lists(annotations: Mapping[str, str]) -> list[PodDevices]:
    """Every vendor's allocated device list on the pod; a list that does not decode
    counts nothing, as HAMi's scheduler counts nothing for such a pod."""
    lists = []
    for key, value in sorted(annotations.items()):
        if not (key.startswith(HAMI_PREFIX) and key.endswith(ALLOCATED_SUFFIX)) or not value:
            continue
        try:
            lists.append(decode_pod_devices(value, key))
        except AnnotationDecodeError:
            continue
    return lists


def _init_containers_done(pod: Mapping[str, Any]) -> bool:
    init = (pod.get("spec") or {}).get("initContainers") or []
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    if not init or len(statuses) < len(init):
        return False
    return all(
        ((status.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
        for status in statuses
    )


def pod_holds(pod: Mapping[str, Any], uuids: Iterable[str]) -> list[GpuHold]:
    """What a pod holds of the given GPUs by its HAMi annotations (nothing once it has
    terminated): per GPU, init containers at their peak (HAMi's collapse)."""
    if (pod.get("status") or {}).get("phase") in TERMINATED_PHASES:
        return []
    metadata = pod.get("metadata") or {}
    lists = allocated_lists(metadata.get("annotations") or {})
    if not lists:
        return []
    containers: list[list[Grant]] = []
    for per_container in lists:
        for position, devices in enumerate(per_container):
            while len(containers) <= position:
                containers.append([])
            containers[position] += [
                Grant(d.uuid, d.type, d.usedmem, d.usedcores, 0) for d in devices
            ]
    init_count = min(len((pod.get("spec") or {}).get("initContainers") or []), len(containers))
    if init_count and _init_containers_done(pod):
        containers = [[] for _ in range(init_count)] + containers[init_count:]
    usage = collapse_pod_usage([tuple(c) for c in containers], init_count)
    holder = f"pod {metadata.get('namespace')}/{metadata.get('name')}"
    wanted = set(uuids)
    return [
        GpuHold(holder, uuid, use.memory_mib, use.cores, use.used)
        for uuid, use in usage.items()
        if uuid in wanted
    ]


def result_hold(
    holder: str, result: Mapping[str, Any], driver: str, uuid: str, whole: GpuLimits
) -> GpuHold:
    """One DRA allocation result, as the controller charges it: its consumedCapacity,
    or the whole device when it was allocated without a share."""
    consumed = result.get("consumedCapacity") or {}
    if not result.get("shareID") or not consumed:
        return GpuHold(holder, uuid, whole.memory_mib, whole.cores, whole.shares)
    amounts: dict[str, Decimal] = {}
    for name, quantity in consumed.items():
        try:
            amounts[str(name).removeprefix(f"{driver}/")] = parse_quantity(str(quantity))
        except QuantityError:
            continue
    try:
        memory = to_mib_ceil(amounts.get("memory", Decimal(0)))
    except QuantityError:
        memory = whole.memory_mib
    return GpuHold(
        holder,
        uuid,
        memory,
        int(amounts.get("cores", Decimal(0))),
        max(int(amounts.get("shares", Decimal(1))), 1),
    )


def claim_holds(
    claims: Iterable[Mapping[str, Any]],
    driver: str,
    uuid_of: Mapping[tuple[str, str], str],
    limits: Mapping[str, GpuLimits],
) -> list[GpuHold]:
    """What allocated claims hold of this node's GPUs; `uuid_of` maps a slice
    device (pool, device name) to its GPU's uuid."""
    holds = []
    for claim in claims:
        metadata = claim.get("metadata") or {}
        holder = f"claim {metadata.get('namespace')}/{metadata.get('name')}"
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") != driver:
                continue
            uuid = uuid_of.get((result.get("pool") or "", result.get("device") or ""))
            if uuid is None or uuid not in limits:
                continue
            holds.append(result_hold(holder, result, driver, uuid, limits[uuid]))
    return holds


def overcommit_message(
    held: Sequence[GpuHold], adding: Sequence[GpuHold], limits: Mapping[str, GpuLimits]
) -> str | None:
    """A message when `adding` on top of `held` exceeds a GPU's memory, cores or share
    slots: it names the GPU, the totals against what it offers, and every holder."""
    for uuid in dict.fromkeys(hold.uuid for hold in adding):
        gpu = limits[uuid]
        on_gpu = [hold for hold in [*held, *adding] if hold.uuid == uuid]
        totals = (
            ("memory", sum(h.memory_mib for h in on_gpu), gpu.memory_mib, " MiB"),
            ("cores", sum(h.cores for h in on_gpu), gpu.cores, ""),
            ("shares", sum(h.shares for h in on_gpu), gpu.shares, ""),
        )
        if all(total <= offered for _, total, offered, _ in totals):
            continue
        over = ", ".join(
            f"{name} {total}{unit} of {offered}{unit}"
            for name, total, offered, unit in totals
            if total > offered
        )
        holders = "; ".join(h.describe() for h in held if h.uuid == uuid) or "none"
        new = "; ".join(h.describe() for h in adding if h.uuid == uuid)
        return (
            f"GPU {gpu.name} ({uuid}) would be over-committed in mixed mode: {over}; "
            f"held by {holders}; asked by {new}. Legacy pods and DRA claims share this "
            "GPU, and the allocators must not hand out more than it offers"
        )
    return None


def device_limits(devices: Mapping[str, DeviceCapacity]) -> dict[str, GpuLimits]:
    """The kubelet plugin's published devices, keyed by GPU uuid."""
    return {
        capacity.gpu.uuid: GpuLimits(
            capacity.gpu.uuid,
            name,
            capacity.memory_bytes // MIB,
            capacity.cores,
            capacity.shares,
        )
        for name, capacity in devices.items()
    }


def prepare_overcommit(
    plan: ClaimPlan,
    prepared: Iterable[PreparedShare],
    pods: Iterable[Mapping[str, Any]],
    devices: Mapping[str, DeviceCapacity],
) -> str | None:
    """Prepare's mixed-mode check: the claim's grants on top of the other claims prepared
    here (one share each, at their limits) and the legacy pods the node runs."""
    limits = device_limits(devices)

    def hold(holder: str, device: str, memory_bytes: int, cores: int) -> GpuHold:
        uuid = devices[device].gpu.uuid
        return GpuHold(holder, uuid, -(-memory_bytes // MIB), cores, 1)

    held = [hold(*share) for share in prepared if share[1] in devices]
    for pod in pods:
        held += pod_holds(pod, limits)
    adding = [
        hold(f"claim {plan.namespace}/{plan.name}", g.device, g.memory_limit_bytes, g.core_limit)
        for g in plan.grants
    ]
    return overcommit_message(held, adding, limits)


def register_limits(registered: Iterable[RegisteredDevice]) -> dict[str, GpuLimits]:
    """The device plugin's register entries, keyed by GPU uuid; named as the slice names
    the same GPU (`gpu-<index>`)."""
    return {
        device.id: GpuLimits(
            device.id, f"gpu-{device.index}", device.devmem, device.devcore, device.count
        )
        for device in registered
    }


def allocate_overcommit(
    pod: Mapping[str, Any],
    node_pods: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    driver: str,
    uuid_of: Mapping[tuple[str, str], str],
    limits: Mapping[str, GpuLimits],
) -> str | None:
    """Allocate's mixed-mode check: the whole pod's HAMi allocation on top of the node's
    other legacy pods and the DRA claims allocated on its GPUs. Checking the pod, not
    the container, answers every container's call the same way."""
    uid = (pod.get("metadata") or {}).get("uid")
    held = claim_holds(claims, driver, uuid_of, limits)
    for other in node_pods:
        if (other.get("metadata") or {}).get("uid") != uid:
            held += pod_holds(other, limits)
    return overcommit_message(held, pod_holds(pod, limits), limits)
