"""Which pod and container an Allocate call serves, and with what, decided without I/O.

kubelet's Allocate carries no pod identity, only replica IDs. Like HAMi, the
pod is the one the node lock (`hami.io/mutex.lock`) names: the extender
locked the node for it in `/bind`. Unlike HAMi, there is no fallback search
over pending pods (HAMi#3076, #2640: a fallback lets a second pod be served
with the first one's devices). Each call takes the next non-empty container
entry of the pod's `hami.io/vgpu-devices-to-allocate` (init containers
first, as kubelet calls them) and empties it, so the next call gets the next
container.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    AnnotationDecodeError,
    BindPhase,
    ContainerDevice,
    RegisteredDevice,
    annotation_is_true,
    decode_pod_devices,
    encode_pod_devices,
)
from api.quantity import MIB
from dra_driver.errors import DriverError
from dra_driver.objects.node_lock import NodeLockError, read_lock
from kubeletplugin.gpus import GpuInfo
from libvgpu.cache_paths import CacheLocation
from libvgpu.container_edits import CorePolicy, DeviceShare, ShareSet
from libvgpu.settings import CORE_POLICY_ENV, DISABLE_CONTROL_ENV, TASK_PRIORITY_ENV


class AllocateError(DriverError):
    """This Allocate call cannot be served; the message is what kubelet puts on the pod."""


@dataclass(frozen=True, slots=True)
class PodRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class ContainerGrant:
    """The container served by one Allocate call and what the pod's device list gives it."""

    pod: PodRef
    pod_uid: str
    container: str
    position: int
    """The container's place in the pod, init containers first (HAMi's container index)."""

    devices: tuple[ContainerDevice, ...]
    env: Mapping[str, str]
    """The container's literal env vars (valueFrom entries have no value here)."""

    remaining: str
    """`hami.io/vgpu-devices-to-allocate` with this container's entry emptied."""

    finished: bool
    """No container entry is left to serve: the pod is fully allocated."""


def lock_holder(node: Mapping[str, Any]) -> PodRef:
    """The pod the node lock names; anything else means there is no pod to serve."""
    name = (node.get("metadata") or {}).get("name", "")
    value = _annotations(node).get(NODE_LOCK)
    try:
        lock = read_lock(name, value)
    except NodeLockError as error:
        raise AllocateError(str(error)) from None
    if lock is None:
        raise AllocateError(
            f"node {name} has no {NODE_LOCK}: no pod is being bound to it by the scheduler "
            "extender, so there is no pod to allocate for"
        )
    if not lock.pod:
        raise AllocateError(
            f"node {name}: {NODE_LOCK} {value!r} names no pod (old bare-time format); "
            "allocation serves only the pod the lock names"
        )
    return PodRef(lock.namespace, lock.pod)


def require_bound(pod: Mapping[str, Any], node_name: str) -> None:
    """kubelet admits only pods bound to its node, so a lock holder not bound here yet
    (its /bind still running) cannot be the pod this call is for: another pod's
    Allocate arrived after its lock was taken over (HAMi#3096). Refusing it is
    better than serving it the lock holder's devices and limits."""
    metadata = pod.get("metadata") or {}
    bound_to = (pod.get("spec") or {}).get("nodeName") or ""
    if bound_to != node_name:
        raise AllocateError(
            f"pod {metadata.get('namespace')}/{metadata.get('name')} holds the lock of node "
            f"{node_name} but is not bound to it (spec.nodeName {bound_to!r}), so this "
            "Allocate is for another pod whose node lock was taken over; refused rather "
            "than served with the lock holder's devices"
        )


def next_container(pod: Mapping[str, Any], node_name: str, requested: int) -> ContainerGrant:
    """The grant for kubelet's next container request of `requested` devices."""
    metadata = pod.get("metadata") or {}
    ref = PodRef(metadata.get("namespace", ""), metadata.get("name", ""))
    annotations = _annotations(pod)
    assigned = annotations.get(VGPU_NODE)
    if assigned != node_name:
        raise AllocateError(
            f"pod {ref} holds the lock of node {node_name} but {VGPU_NODE} is {assigned!r}"
        )
    phase = annotations.get(BIND_PHASE)
    if phase != BindPhase.ALLOCATING:
        raise AllocateError(
            f"pod {ref} is not being allocated: {BIND_PHASE} is {phase!r}, expected "
            f"{BindPhase.ALLOCATING.value!r}"
        )
    try:
        entries = decode_pod_devices(annotations.get(VGPU_DEVICES_TO_ALLOCATE, ""))
        allocated = decode_pod_devices(annotations.get(VGPU_DEVICES_ALLOCATED, ""))
    except AnnotationDecodeError as error:
        raise AllocateError(f"pod {ref}: {error}") from None
    _require_part_of_allocated(ref, entries, allocated)
    position = next((i for i, entry in enumerate(entries) if entry), None)
    if position is None:
        raise AllocateError(
            f"pod {ref}: {VGPU_DEVICES_TO_ALLOCATE} has no container left to allocate"
        )
    containers = _containers(pod)
    if position >= len(containers):
        raise AllocateError(
            f"pod {ref}: {VGPU_DEVICES_TO_ALLOCATE} entry {position} names no container "
            f"(the pod has {len(containers)}, init containers first)"
        )
    container = containers[position]
    cname = str(container.get("name", ""))
    devices = tuple(entries[position])
    if len(devices) != requested:
        raise AllocateError(
            f"pod {ref} container {cname}: {VGPU_DEVICES_TO_ALLOCATE} assigns "
            f"{len(devices)} device(s) but kubelet asked for {requested}"
        )
    emptied = [list(entry) for entry in entries]
    emptied[position] = []
    return ContainerGrant(
        pod=ref,
        pod_uid=str(metadata.get("uid", "")),
        container=cname,
        position=position,
        devices=devices,
        env={
            str(e["name"]): str(e["value"])
            for e in container.get("env") or []
            if isinstance(e, Mapping) and "name" in e and "value" in e
        },
        remaining=encode_pod_devices(emptied),
        finished=not any(emptied),
    )


def _require_part_of_allocated(
    ref: PodRef,
    entries: Sequence[Sequence[ContainerDevice]],
    allocated: Sequence[Sequence[ContainerDevice]],
) -> None:
    """The scheduler writes both lists alike in /bind and the device plugin only empties
    entries of the first, so an entry that differs from the allocated one was written
    by someone else (HAMi#3041: forged annotations lift a pod's share)."""
    for position, entry in enumerate(entries):
        written = allocated[position] if position < len(allocated) else []
        if entry and list(entry) != list(written):
            raise AllocateError(
                f"pod {ref}: {VGPU_DEVICES_TO_ALLOCATE} entry {position} "
                f"{encode_pod_devices([entry])!r} is not the scheduler's allocation "
                f"({VGPU_DEVICES_ALLOCATED} entry {encode_pod_devices([written])!r}); refused "
                "as not written by the scheduler"
            )


def require_registered(grant: ContainerGrant, registered: Sequence[RegisteredDevice]) -> None:
    """Every device of the grant within what this node registered for it: the scheduler
    never gives more, so a share beyond that (or a GPU not registered) is forged."""
    where = f"pod {grant.pod} container {grant.container}"
    by_uuid = {device.id: device for device in registered}
    for device in grant.devices:
        gpu = by_uuid.get(device.uuid)
        if gpu is None:
            raise AllocateError(f"{where}: GPU {device.uuid} is not on this node")
        if device.usedmem > gpu.devmem:
            raise AllocateError(
                f"{where}: {VGPU_DEVICES_TO_ALLOCATE} gives GPU {device.uuid} "
                f"{device.usedmem} MiB of memory, more than the {gpu.devmem} MiB this node "
                "registered; refused as not written by the scheduler"
            )
        if device.usedcores > gpu.devcore:
            raise AllocateError(
                f"{where}: {VGPU_DEVICES_TO_ALLOCATE} gives GPU {device.uuid} "
                f"{device.usedcores} cores, more than the {gpu.devcore} this node registered; "
                "refused as not written by the scheduler"
            )


def share_set(
    grant: ContainerGrant,
    gpus: Mapping[str, GpuInfo],
    cache: CacheLocation,
    disable_core_limit: bool = False,
) -> ShareSet:
    """The libvgpu share of the grant, sized as the CDI path sizes a claim's device:
    memory `<MiB>` exact, cores 0 meaning not throttled."""
    where = f"pod {grant.pod} container {grant.container}"
    shares = []
    for device in grant.devices:
        gpu = gpus.get(device.uuid)
        if gpu is None:
            raise AllocateError(f"{where}: GPU {device.uuid} is not on this node")
        if device.usedmem <= 0:
            raise AllocateError(
                f"{where}: {VGPU_DEVICES_TO_ALLOCATE} gives GPU {device.uuid} "
                f"{device.usedmem} MiB of memory; at least 1 is needed"
            )
        shares.append(
            DeviceShare(
                device.uuid, gpu.index, device.usedmem * MIB, min(device.usedcores, 100) or None
            )
        )
    return ShareSet(
        devices=tuple(shares),
        cache=cache,
        policy=CorePolicy.DISABLE if disable_core_limit else _core_policy(grant.env, where),
        priority=_priority(grant.env, where),
        disable_control=annotation_is_true(grant.env.get(DISABLE_CONTROL_ENV)),
    )


def _core_policy(env: Mapping[str, str], where: str) -> CorePolicy:
    value = env.get(CORE_POLICY_ENV)
    if value is None:
        return CorePolicy.DEFAULT
    try:
        return CorePolicy(value.lower())
    except ValueError:
        allowed = ", ".join(p.value for p in CorePolicy)
        raise AllocateError(
            f"{where}: env {CORE_POLICY_ENV} {value!r} is not one of {allowed}"
        ) from None


def _priority(env: Mapping[str, str], where: str) -> int | None:
    value = env.get(TASK_PRIORITY_ENV)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise AllocateError(
            f"{where}: env {TASK_PRIORITY_ENV} {value!r} is not an integer"
        ) from None


def _containers(pod: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]


def _annotations(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}
