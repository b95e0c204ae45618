"""Codec of `hami.io/vgpu-mig-allocations`: the MIG slices HAMi's scheduler reserved.

HAMi's Filter writes it beside the device lists when a container gets a MIG
slice of a GPU in `mig` mode (`EncodeMigAllocations`): one entry per slice,
naming the container (init containers first), the slice's place among that
container's NVIDIA devices, the physical GPU, the profile and the placement
(start and size in memory slices). The device plugin fills in the runtime
identity (MIG uuid, GPU and compute instance ids) once it created the
instance. Reads back as HAMi's `DecodeMigAllocations` does, with the same
refusals (an incomplete entry, a partial runtime identity, two entries for
one container's device). Calls `keys` and `go_compat` only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from api.hami_annotations.go_compat import (
    INT64_BOUNDS,
    UINT32_BOUNDS,
    AnnotationDecodeError,
    check_int,
    check_str,
    go_struct_fields,
    json_array,
    load_json,
    marshal_go_json,
)
from api.hami_annotations.keys import VGPU_MIG_ALLOCATIONS


@dataclass(frozen=True, slots=True)
class MigAllocation:
    """One reserved MIG slice (Go `nvidia.MigAllocation`).

    `start` and `size` are the placement (Go's `placement.start`/`.size`).
    The runtime identity (`mig_uuid`, `gpu_instance_id`, `compute_instance_id`)
    is all set or all unset; zero is a valid instance id, so unset is None.
    """

    container_index: int
    device_index: int
    gpu_uuid: str
    profile: str
    start: int
    size: int
    mig_uuid: str = ""
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    def __post_init__(self) -> None:
        check_int("containerIndex", self.container_index, INT64_BOUNDS)
        check_int("deviceIndex", self.device_index, INT64_BOUNDS)
        check_str("gpuUUID", self.gpu_uuid)
        check_str("profile", self.profile)
        check_int("placement.start", self.start, UINT32_BOUNDS)
        check_int("placement.size", self.size, UINT32_BOUNDS)
        check_str("migUUID", self.mig_uuid)
        for name, value in (
            ("gpuInstanceID", self.gpu_instance_id),
            ("computeInstanceID", self.compute_instance_id),
        ):
            if value is not None:
                check_int(name, value, UINT32_BOUNDS)


def encode_mig_allocations(allocations: Iterable[MigAllocation]) -> str:
    """The JSON HAMi's scheduler writes, byte for byte: keys in Go's struct order,
    the runtime identity left out while unset (`omitempty`, pointers for the ids)."""
    return marshal_go_json([_to_go(allocation) for allocation in allocations])


def _to_go(allocation: MigAllocation) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "containerIndex": allocation.container_index,
        "deviceIndex": allocation.device_index,
        "gpuUUID": allocation.gpu_uuid,
        "profile": allocation.profile,
        "placement": {"start": allocation.start, "size": allocation.size},
    }
    if allocation.mig_uuid:
        entry["migUUID"] = allocation.mig_uuid
    if allocation.gpu_instance_id is not None:
        entry["gpuInstanceID"] = allocation.gpu_instance_id
    if allocation.compute_instance_id is not None:
        entry["computeInstanceID"] = allocation.compute_instance_id
    return entry


_FIELDS = {
    "containerindex": "container_index",
    "deviceindex": "device_index",
    "gpuuuid": "gpu_uuid",
    "profile": "profile",
    "placement": "placement",
    "miguuid": "mig_uuid",
    "gpuinstanceid": "gpu_instance_id",
    "computeinstanceid": "compute_instance_id",
}
_PLACEMENT_FIELDS = {"start": "start", "size": "size"}


def decode_mig_allocations(
    value: str, annotation: str = VGPU_MIG_ALLOCATIONS
) -> list[MigAllocation]:
    """Read the annotation as HAMi's `DecodeMigAllocations`: empty is none; an entry
    without GPU, profile or a placement size, with a runtime identity set in part,
    or repeating a (container, device) pair is refused."""
    if value == "":
        return []
    document = load_json(value, annotation)
    if document is None:
        return []
    seen: set[tuple[int, int]] = set()
    result = []
    for position, item in enumerate(json_array(document, annotation, "value")):
        where = f"MIG allocation {position}"
        values = go_struct_fields(item, _FIELDS, annotation, where)
        placement = go_struct_fields(
            values.pop("placement", {}), _PLACEMENT_FIELDS, annotation, f"{where} placement"
        )
        defaults = {"container_index": 0, "device_index": 0, "gpu_uuid": "", "profile": ""}
        try:
            allocation = MigAllocation(
                **{**defaults, **values},
                start=placement.get("start", 0),
                size=placement.get("size", 0),
            )
        except (ValueError, TypeError) as error:
            raise AnnotationDecodeError(annotation, f"{where}: {error}") from error
        if (
            allocation.container_index < 0
            or allocation.device_index < 0
            or not allocation.gpu_uuid
            or not allocation.profile
            or allocation.size == 0
        ):
            raise AnnotationDecodeError(annotation, f"{where} is incomplete")
        identity = (
            bool(allocation.mig_uuid),
            allocation.gpu_instance_id is not None,
            allocation.compute_instance_id is not None,
        )
        if any(identity) and not all(identity):
            raise AnnotationDecodeError(annotation, f"{where} has partial runtime identity")
        key = (allocation.container_index, allocation.device_index)
        if key in seen:
            raise AnnotationDecodeError(
                annotation,
                f"duplicate MIG allocation for container {key[0]} device {key[1]}",
            )
        seen.add(key)
        result.append(allocation)
    return result
