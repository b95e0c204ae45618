"""What a scheduled pod holds, read back from the annotations the extender wrote.

Pure. HAMi's pod cache counts every non-terminated pod that carries
`hami.io/vgpu-node` by its `hami.io/vgpu-devices-allocated` list, init
containers collapsed (per device, the larger of the biggest init container
and the sum of the app containers); once every init container has succeeded
only the app containers count. Reference: hami-protocol.md §2 (node usage).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import PodDevices, decode_pod_devices
from dra_driver.engine.engine import Placement
from dra_driver.engine.fit import ContainerGrants, Grant
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.usage import collapse_pod_usage

TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodAllocation:
    """A pod's grants on its node, in the engine's terms, and the usage they add up to."""

    uid: str
    namespace: str
    name: str
    placement: Placement
    usage: Mapping[str, DeviceUsage]


def pod_uid(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


def is_terminated(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINATED_PHASES


def init_containers_done(pod: Mapping[str, Any]) -> bool:
    """Every init container has terminated with exit code 0."""
    init = (pod.get("spec") or {}).get("initContainers") or []
    statuses = (pod.get("status") or {}).get("initContainerStatuses") or []
    if not init or len(statuses) < len(init):
        return False
    for status in statuses:
        terminated = (status.get("state") or {}).get("terminated")
        if not terminated or terminated.get("exitCode") != 0:
            return False
    return True


def placement_from_devices(
    node: str, devices: PodDevices, init_count: int, vendor: str, indices: Mapping[str, int]
) -> Placement:
    """The engine Placement a device list stands for (device indices from the node)."""
    containers: list[ContainerGrants] = [
        tuple(
            Grant(d.uuid, vendor, d.usedmem, d.usedcores, indices.get(d.uuid, 0)) for d in container
        )
        for container in devices
    ]
    return Placement(node=node, containers=tuple(containers), score=0.0, init_count=init_count)


def read_pod_allocation(
    pod: Mapping[str, Any], vendor: str, indices_of: Callable[[str], Mapping[str, int]]
) -> PodAllocation | None:
    """The pod's allocation, or None when it holds nothing (unscheduled, terminated).

    `indices_of(node)` maps the node's device UUIDs to their indices.

    A malformed device list raises AnnotationDecodeError; the caller logs it and
    counts nothing for the pod.
    """
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    node = annotations.get(keys.VGPU_NODE)
    value = annotations.get(keys.VGPU_DEVICES_ALLOCATED)
    if not node or not value or is_terminated(pod):
        return None
    devices = decode_pod_devices(value, keys.VGPU_DEVICES_ALLOCATED)
    init_count = min(len((pod.get("spec") or {}).get("initContainers") or []), len(devices))
    if init_count and init_containers_done(pod):
        devices = [[] for _ in range(init_count)] + devices[init_count:]
    placement = placement_from_devices(node, devices, init_count, vendor, indices_of(node))
    usage = collapse_pod_usage(placement.containers, init_count)
    if not usage:
        return None
    return PodAllocation(
        pod_uid(pod),
        str(metadata.get("namespace") or ""),
        str(metadata.get("name") or ""),
        placement,
        usage,
    )
