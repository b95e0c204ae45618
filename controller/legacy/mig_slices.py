"""The MIG slices of a legacy pod, between the engine's grants and
`hami.io/vgpu-mig-allocations`.

Writing: the engine tags each MIG grant with its profile and placement
(`dra_driver.engine.mig_fit`); HAMi's Filter writes one entry per such
grant, numbered by container (init containers first) and by the grant's
place among that container's NVIDIA devices (`EncodeMigAllocations`).
Reading: HAMi's getNodesUsage hands a pod's entries for a GPU, in order, to
the pod's devices on that GPU, and entries left over still hold their slices
(they go with the pod's last device on that GPU here). A value that does not
decode counts as no entry, as in HAMi, so a MIG GPU the pod holds fails closed.
Pure. Reference: HAMi `pkg/device/nvidia/mig_allocations.go`,
`pkg/scheduler/scheduler.go`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from api import hami_annotations as keys
from api.hami_annotations import (
    AnnotationDecodeError,
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
)
from dra_driver.engine.engine import Placement
from dra_driver.engine.grants import ContainerGrants, Grant
from dra_driver.engine.mig_fit import NVIDIA_REQUEST_TYPE, MigSlice, slice_tag, tag_slices


def mig_allocations_annotation(
    containers: Sequence[ContainerGrants], vendor: str = NVIDIA_REQUEST_TYPE
) -> dict[str, str]:
    """`hami.io/vgpu-mig-allocations` for the pod's grants (init containers first),
    or nothing when no grant is a MIG slice."""
    allocations = []
    for container_index, container in enumerate(containers):
        own = [grant for grant in container if grant.vendor == vendor]
        for device_index, grant in enumerate(own):
            allocations.extend(
                MigAllocation(
                    container_index,
                    device_index,
                    grant.uuid,
                    piece.profile,
                    piece.start,
                    piece.size,
                )
                for piece in tag_slices(grant.tag)
            )
    if not allocations:
        return {}
    return {keys.VGPU_MIG_ALLOCATIONS: encode_mig_allocations(allocations)}


def with_mig_slices(
    placement: Placement,
    annotations: Mapping[str, str],
    vendor: str = NVIDIA_REQUEST_TYPE,
) -> Placement:
    """The placement read back from a pod, its `vendor` grants tagged with the slices
    the pod's MIG annotation gives them (unchanged without one)."""
    value = annotations.get(keys.VGPU_MIG_ALLOCATIONS)
    if not value:
        return placement
    try:
        allocations = decode_mig_allocations(value)
    except AnnotationDecodeError:
        return placement
    by_gpu: dict[str, list[MigAllocation]] = {}
    for allocation in allocations:
        by_gpu.setdefault(allocation.gpu_uuid, []).append(allocation)
    last: dict[str, tuple[int, int]] = {}
    for position, container in enumerate(placement.containers):
        for offset, grant in enumerate(container):
            if grant.vendor == vendor and grant.uuid in by_gpu:
                last[grant.uuid] = (position, offset)
    containers: list[list[Grant]] = [list(container) for container in placement.containers]
    for position, container in enumerate(containers):
        for offset, grant in enumerate(container):
            if grant.vendor != vendor or not by_gpu.get(grant.uuid):
                continue
            pending = by_gpu[grant.uuid]
            taken = pending[:] if last[grant.uuid] == (position, offset) else pending[:1]
            del pending[: len(taken)]
            tag = slice_tag(MigSlice(a.profile, a.start, a.size) for a in taken)
            container[offset] = replace(grant, tag=tag)
    return replace(placement, containers=tuple(tuple(c) for c in containers))
