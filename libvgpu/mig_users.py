"""Who uses which MIG device on this node: the owners of `hami_mig_device_info`.

A MIG container runs without libvgpu, so it has no cache file to be found by; its
owner comes from the API objects instead, fed by the monitor's informers:

- a legacy pod: `hami.io/vgpu-mig-allocations`, read as HAMi's monitor reads it
  (entries without a runtime identity are skipped: the instance is not made yet;
  the container is named by its index, init containers first; an annotation that
  does not decode names nobody);
- a DRA claim: its allocation results for partition devices
  (`gpu-<i>-mig-<profile>-at-<start>`) in this node's pool, each pod reserving the
  claim as an owner (container empty, as the claim's other series), the partition's
  place among the claim's partitions on this node as its `vdevice_index`. Which MIG
  device it is (uuid, instance ids) is what the node's cards show at that card,
  profile and placement (`mig_series`).

Pure: objects in, plain tuples out; each update replaces a whole entry, so a scrape
in another thread never sees half an object.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from api.hami_annotations.go_compat import AnnotationDecodeError
from api.hami_annotations.keys import VGPU_MIG_ALLOCATIONS
from api.hami_annotations.mig_allocations import decode_mig_allocations
from dra_driver.objects.mig_devices import parse_partition_device_name
from dra_driver.objects.pod_claims import reserving_pods
from libvgpu.owners import WATCH_ADDED, WATCH_DELETED, WATCH_MODIFIED

log = logging.getLogger(__name__)
UseT = TypeVar("UseT")


@dataclass(frozen=True, slots=True)
class LegacyMigUse:
    """One MIG slice a legacy pod's container runs on, with its runtime identity."""

    namespace: str
    pod: str
    container: str
    vdevice_index: int
    gpu_uuid: str
    mig_uuid: str
    profile: str
    gpu_instance_id: int
    compute_instance_id: int
    placement_start: int
    placement_size: int


@dataclass(frozen=True, slots=True)
class ClaimPartitionUse:
    """One partition device allocated to a claim in this node's pool, for one pod."""

    namespace: str
    pod: str
    claim_uid: str
    vdevice_index: int
    gpu_index: int
    profile_slug: str
    start: int


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _container_names(pod: Mapping[str, Any]) -> list[str]:
    spec = pod.get("spec") or {}
    return [
        str(container.get("name", ""))
        for container in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
    ]


def legacy_uses(pod: Mapping[str, Any]) -> tuple[LegacyMigUse, ...]:
    """The pod's MIG slices whose instance exists (runtime identity recorded)."""
    metadata = pod.get("metadata") or {}
    value = (metadata.get("annotations") or {}).get(VGPU_MIG_ALLOCATIONS, "")
    namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
    try:
        allocations = decode_mig_allocations(value)
    except AnnotationDecodeError as error:
        log.warning("pod %s/%s: %s", namespace, name, error)
        return ()
    containers = _container_names(pod)
    uses = []
    for allocation in allocations:
        if (
            not allocation.mig_uuid
            or allocation.gpu_instance_id is None
            or allocation.compute_instance_id is None
        ):
            continue
        if allocation.container_index >= len(containers):
            log.warning(
                "pod %s/%s: MIG allocation names container %d of %d",
                namespace,
                name,
                allocation.container_index,
                len(containers),
            )
            continue
        uses.append(
            LegacyMigUse(
                namespace,
                name,
                containers[allocation.container_index],
                allocation.device_index,
                allocation.gpu_uuid,
                allocation.mig_uuid,
                allocation.profile,
                allocation.gpu_instance_id,
                allocation.compute_instance_id,
                allocation.start,
                allocation.size,
            )
        )
    return tuple(uses)


def claim_uses(claim: Mapping[str, Any], node: str) -> tuple[ClaimPartitionUse, ...]:
    """The claim's partitions in `node`'s pool, once per reserving pod."""
    metadata = claim.get("metadata") or {}
    allocation = (claim.get("status") or {}).get("allocation") or {}
    partitions = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        name = parse_partition_device_name(str(result.get("device", "")))
        if name is not None and result.get("pool") == node:
            partitions.append(name)
    if not partitions:
        return ()
    namespace, uid = str(metadata.get("namespace") or ""), _uid(claim)
    pods = [pod.name for pod in reserving_pods(claim)] or [""]
    return tuple(
        ClaimPartitionUse(
            namespace, pod, uid, position, part.gpu_index, part.profile_slug, part.start
        )
        for pod in pods
        for position, part in enumerate(partitions)
    )


class MigUsers:
    """Legacy pods' and claims' MIG uses by object UID, fed by watch events."""

    def __init__(self, node: str) -> None:
        self._node = node
        self._pods: dict[str, tuple[LegacyMigUse, ...]] = {}
        self._claims: dict[str, tuple[ClaimPartitionUse, ...]] = {}

    def apply_pod_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self._apply(self._pods, event_type, obj, legacy_uses)

    def apply_claim_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        self._apply(self._claims, event_type, obj, lambda claim: claim_uses(claim, self._node))

    @staticmethod
    def _apply(
        index: dict[str, tuple[UseT, ...]],
        event_type: str,
        obj: Mapping[str, Any],
        uses: Callable[[Mapping[str, Any]], tuple[UseT, ...]],
    ) -> None:
        uid = _uid(obj)
        if not uid:
            return
        if event_type in (WATCH_ADDED, WATCH_MODIFIED):
            found = uses(obj)
            if found:
                index[uid] = found
            else:
                index.pop(uid, None)
        elif event_type == WATCH_DELETED:
            index.pop(uid, None)

    def legacy(self) -> list[LegacyMigUse]:
        return [use for uses in list(self._pods.values()) for use in uses]

    def claims(self) -> list[ClaimPartitionUse]:
        return [use for uses in list(self._claims.values()) for use in uses]
