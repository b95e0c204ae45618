"""What a scheduled pod holds, read back from the annotations the extender wrote.

Pure. HAMi's pod cache counts every non-terminated pod that carries
`hami.io/vgpu-node` by the allocated list of every vendor (DecodePodDevices
over each vendor's key: `hami.io/vgpu-devices-allocated` for NVIDIA,
`hami.io/dcu-devices-allocated` for Hygon, ...), one entry per container,
merged container by container; init containers are collapsed (per device,
the larger of the biggest init container and the sum of the app containers);
once every init container has succeeded only the app containers count.
A vendor may tag its grants with what its Fit reads of the pod
(`VendorBackend.usage_tag`: Metax sGPU's app class and qos policy); NVIDIA
grants are tagged with the MIG slices `hami.io/vgpu-mig-allocations` gives
them (`mig_slices`).
Reference: hami-protocol.md §2 (node usage).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import PodDevices
from controller.legacy.mig_slices import with_mig_slices
from dra_driver.engine.engine import Placement
from dra_driver.engine.grants import ContainerGrants, Grant
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.usage import collapse_pod_usage
from dra_driver.engine.vendor_backends.base import VendorBackend

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
    node: str,
    devices: Iterable[tuple[str, PodDevices]],
    init_count: int,
    indices: Mapping[str, int],
) -> Placement:
    """The engine Placement that per-vendor device lists stand for: container i holds
    every vendor's entry i (device indices from the node)."""
    containers: list[list[Grant]] = []
    for vendor, per_container in devices:
        for position, container in enumerate(per_container):
            while len(containers) <= position:
                containers.append([])
            containers[position].extend(
                Grant(d.uuid, vendor, d.usedmem, d.usedcores, indices.get(d.uuid, 0))
                for d in container
            )
    grants: tuple[ContainerGrants, ...] = tuple(tuple(c) for c in containers)
    return Placement(node=node, containers=grants, score=0.0, init_count=init_count)


def read_pod_allocation(
    pod: Mapping[str, Any],
    backends: Iterable[VendorBackend],
    indices_of: Callable[[str], Mapping[str, int]],
) -> PodAllocation | None:
    """The pod's allocation over every vendor, or None when it holds nothing
    (unscheduled, terminated).

    `indices_of(node)` maps the node's device UUIDs to their indices.

    A malformed device list raises AnnotationDecodeError; the caller logs it and
    counts nothing for the pod.
    """
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    node = annotations.get(keys.VGPU_NODE)
    if not node or is_terminated(pod):
        return None
    per_vendor: list[tuple[str, PodDevices]] = []
    by_name: dict[str, VendorBackend] = {}
    for backend in backends:
        devices = backend.allocated_devices(annotations)
        if devices is not None:
            per_vendor.append((backend.name, devices))
            by_name[backend.name] = backend
    if not per_vendor:
        return None
    longest = max(len(devices) for _, devices in per_vendor)
    init_count = min(len((pod.get("spec") or {}).get("initContainers") or []), longest)
    if init_count and init_containers_done(pod):
        per_vendor = [
            (vendor, [[] for _ in range(min(init_count, len(devices)))] + devices[init_count:])
            for vendor, devices in per_vendor
        ]
    placement = placement_from_devices(node, per_vendor, init_count, indices_of(node))
    placement = replace(
        placement,
        containers=tuple(
            tuple(
                replace(grant, tag=by_name[grant.vendor].usage_tag(annotations, grant))
                for grant in container
            )
            for container in placement.containers
        ),
    )
    placement = with_mig_slices(placement, annotations)
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
