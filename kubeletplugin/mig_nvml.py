"""A card's MIG side through NVML: mode, GPU-instance profiles with their placements,
and the GPU and compute instances present.

`nvml` is the pynvml module or a stand-in with its API. The listing calls take
ctypes arrays and a count by reference, as pynvml's wrappers pass them straight
to the C library, so the arrays are built from the module's own structure types.
A card whose `nvmlDeviceGetMigMode` answers NOT_SUPPORTED (or a module without
that call) is not MIG capable and reads as `MigState()`. Only a card whose current
mode is MIG has its profiles and instances read.

Prepare creates a partition as NVIDIA's tools do: a GPU instance of the profile at
the allocated placement (`nvmlDeviceCreateGpuInstanceWithPlacement`), then one
compute instance of the GPU instance's full compute profile; a refused compute
instance takes its GPU instance back with it. NVML's refusals become `MigError`s
naming the card, profile, placement and what is free.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from typing import Any

from dra_driver.objects.mig_profiles import MigCard, MigProfile, Placement, mig_card
from kubeletplugin.mig_free import describe_free
from kubeletplugin.mig_state import (
    NVML_ERROR_IN_USE,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    MigError,
    MigInstance,
    MigInsufficientResourcesError,
    MigInUseError,
    MigInvalidPlacementError,
    MigNotFoundError,
    MigNotSupportedError,
    MigState,
)
from libvgpu.host_gpus import nvml_text
from libvgpu.host_mig import NVML_DEVICE_MIG_ENABLE, gpu_instance_profiles

COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0


def read_mig(nvml: Any, handle: Any, card: MigCard | None = None) -> MigState:
    """The card's MIG state; `card` (NVIDIA's table for its model) names profiles when
    the driver's profile info carries no name."""
    get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if get_mode is None:
        return MigState()
    try:
        current, pending = get_mode(handle)
    except nvml.NVMLError as error:
        if isinstance(error, getattr(nvml, "NVMLError_NotSupported", nvml.NVMLError)):
            return MigState()
        raise
    enabled = current == NVML_DEVICE_MIG_ENABLE
    pending_enabled = pending == NVML_DEVICE_MIG_ENABLE
    if not enabled:
        return MigState(capable=True, enabled=False, pending_enabled=pending_enabled)
    uuids = _mig_uuids(nvml, handle)
    profiles: list[MigProfile] = []
    instances: list[MigInstance] = []
    empty: list[tuple[int, str, Placement]] = []
    for nvml_profile, info in gpu_instance_profiles(nvml, handle):
        placements = _placements(nvml, handle, info.id)
        profile = MigProfile(
            name=_profile_name(info, card),
            nvml_profile=nvml_profile,
            profile_id=int(info.id),
            compute_slices=int(info.sliceCount),
            memory_slices=placements[0].size if placements else 0,
            memory_mib=int(info.memorySizeMB),
            multiprocessors=int(info.multiprocessorCount),
            max_instances=int(info.instanceCount),
            placements=placements,
        )
        profiles.append(profile)
        for gpu_instance in _gpu_instances(nvml, handle, info):
            gi = nvml.nvmlGpuInstanceGetInfo(gpu_instance)
            placement = Placement(int(gi.placement.start), int(gi.placement.size))
            computes = _compute_instance_ids(nvml, gpu_instance)
            if not computes:
                empty.append((int(gi.id), profile.name, placement))
            instances.extend(
                MigInstance(
                    int(gi.id), ci, profile.name, placement, uuids.get((int(gi.id), ci), "")
                )
                for ci in computes
            )
    return MigState(
        capable=True,
        enabled=True,
        pending_enabled=pending_enabled,
        profiles=tuple(profiles),
        instances=tuple(sorted(instances, key=lambda i: (i.placement, i.compute_instance_id))),
        empty_gpu_instances=tuple(sorted(empty, key=lambda e: e[2])),
    )


def _profile_name(info: Any, card: MigCard | None) -> str:
    name = nvml_text(getattr(info, "name", b"") or b"").removeprefix("MIG ").strip()
    if name:
        return name
    known = card.profile_by_id(int(info.id)) if card is not None else None
    if known is not None:
        return known.name
    return f"{info.sliceCount}g.{round(info.memorySizeMB / 1024)}gb"


def _placements(nvml: Any, handle: Any, profile_id: int) -> tuple[Placement, ...]:
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    if count.value == 0:
        return ()
    array = (nvml.c_nvmlGpuInstancePlacement_t * count.value)()
    nvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, array, ctypes.byref(count))
    return tuple(Placement(int(p.start), int(p.size)) for p in array[: count.value])


def _gpu_instances(nvml: Any, handle: Any, info: Any) -> list[Any]:
    if info.instanceCount == 0:
        return []
    count = ctypes.c_uint(0)
    array = (nvml.c_nvmlGpuInstance_t * info.instanceCount)()
    nvml.nvmlDeviceGetGpuInstances(handle, info.id, array, ctypes.byref(count))
    return list(array[: count.value])


def _compute_profiles(nvml: Any, gpu_instance: Any) -> Iterator[Any]:
    """The compute-instance profiles the GPU instance supports (their profile infos)."""
    count_of = int(
        getattr(nvml, "NVML_COMPUTE_INSTANCE_PROFILE_COUNT", COMPUTE_INSTANCE_PROFILE_COUNT)
    )
    for ci_profile in range(count_of):
        try:
            info = nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gpu_instance, ci_profile, COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except nvml.NVMLError:
            continue
        yield info


def _compute_instance_ids(nvml: Any, gpu_instance: Any) -> list[int]:
    ids: list[int] = []
    for info in _compute_profiles(nvml, gpu_instance):
        if info.instanceCount == 0:
            continue
        count = ctypes.c_uint(0)
        array = (nvml.c_nvmlComputeInstance_t * info.instanceCount)()
        nvml.nvmlGpuInstanceGetComputeInstances(gpu_instance, info.id, array, ctypes.byref(count))
        ids.extend(int(nvml.nvmlComputeInstanceGetInfo(ci).id) for ci in array[: count.value])
    return sorted(ids)


def _mig_uuids(nvml: Any, handle: Any) -> dict[tuple[int, int], str]:
    """(GPU instance id, compute instance id) -> MIG device uuid, from the MIG device handles."""
    uuids: dict[tuple[int, int], str] = {}
    for index in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except nvml.NVMLError:
            continue
        key = (
            int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
            int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
        )
        uuids[key] = nvml_text(nvml.nvmlDeviceGetUUID(mig))
    return uuids


_ERRORS: dict[int, type[MigError]] = {
    NVML_ERROR_INVALID_ARGUMENT: MigInvalidPlacementError,
    NVML_ERROR_NOT_SUPPORTED: MigNotSupportedError,
    NVML_ERROR_NOT_FOUND: MigNotFoundError,
    NVML_ERROR_IN_USE: MigInUseError,
    NVML_ERROR_INSUFFICIENT_RESOURCES: MigInsufficientResourcesError,
}


def _card_name(nvml: Any, handle: Any, gpu_uuid: str) -> str:
    return f"{gpu_uuid} ({nvml_text(nvml.nvmlDeviceGetName(handle))})"


def _refusal(error: Exception, card: str, reason: str) -> MigError:
    """NVML's error as the `MigError` of its return code."""
    kind = _ERRORS.get(int(getattr(error, "value", 0)), MigError)
    return kind(card, f"{reason}: NVML says {error}")


def create_mig_instance(nvml: Any, gpu_uuid: str, profile_name: str, start: int) -> MigInstance:
    """A GPU instance of the profile at `start`, with one compute instance over all of it."""
    handle = nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    card = _card_name(nvml, handle, gpu_uuid)
    table = mig_card(nvml_text(nvml.nvmlDeviceGetName(handle)), _memory(nvml, handle))
    state = read_mig(nvml, handle, table)
    if not state.partitionable:
        mode = "MIG mode is pending a GPU reset" if state.reset_pending else "not in MIG mode"
        raise MigNotSupportedError(card, f"profile {profile_name} at {start}: {mode}")
    profile = state.profile(profile_name)
    if profile is None:
        names = ", ".join(p.name for p in state.profiles)
        raise MigNotSupportedError(
            card, f"profile {profile_name} not supported; its profiles: {names}"
        )
    placement = next((p for p in profile.placements if p.start == start), None)
    if placement is None:
        starts = ", ".join(str(p) for p in profile.placements)
        raise MigInvalidPlacementError(
            card,
            f"profile {profile.name} cannot start at memory slice {start}; "
            f"its placements: {starts}",
        )
    where = f"profile {profile.name} at {placement}"
    info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, profile.nvml_profile)
    wanted = nvml.c_nvmlGpuInstancePlacement_t()
    wanted.start, wanted.size = placement.start, placement.size
    try:
        gpu_instance = nvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            handle, info.id, ctypes.byref(wanted)
        )
    except nvml.NVMLError as error:
        raise _refusal(error, card, f"{where}; free: {describe_free(state)}") from None
    try:
        compute_profile = _full_compute_profile(nvml, gpu_instance, profile.compute_slices)
        if compute_profile is None:
            raise MigNotSupportedError(
                card, f"{where}: no compute profile of {profile.compute_slices} slices"
            )
        compute_instance = nvml.nvmlGpuInstanceCreateComputeInstance(gpu_instance, compute_profile)
    except nvml.NVMLError as error:
        nvml.nvmlGpuInstanceDestroy(gpu_instance)
        raise _refusal(error, card, f"{where}: compute instance") from None
    except MigError:
        nvml.nvmlGpuInstanceDestroy(gpu_instance)
        raise
    gi = int(nvml.nvmlGpuInstanceGetInfo(gpu_instance).id)
    ci = int(nvml.nvmlComputeInstanceGetInfo(compute_instance).id)
    return MigInstance(gi, ci, profile.name, placement, _mig_uuids(nvml, handle).get((gi, ci), ""))


def destroy_mig_instance(
    nvml: Any, gpu_uuid: str, gpu_instance_id: int, compute_instance_id: int | None
) -> None:
    """The compute instance (when given and present), then the GPU instance."""
    handle = nvml.nvmlDeviceGetHandleByUUID(gpu_uuid)
    card = _card_name(nvml, handle, gpu_uuid)
    try:
        gpu_instance = nvml.nvmlDeviceGetGpuInstanceById(handle, gpu_instance_id)
    except nvml.NVMLError as error:
        raise _refusal(error, card, f"GPU instance {gpu_instance_id}") from None
    if compute_instance_id is not None:
        try:
            compute = nvml.nvmlGpuInstanceGetComputeInstanceById(gpu_instance, compute_instance_id)
            nvml.nvmlComputeInstanceDestroy(compute)
        except nvml.NVMLError as error:
            refusal = _refusal(error, card, f"compute instance {compute_instance_id}")
            if not isinstance(refusal, MigNotFoundError):
                raise refusal from None
    try:
        nvml.nvmlGpuInstanceDestroy(gpu_instance)
    except nvml.NVMLError as error:
        raise _refusal(error, card, f"GPU instance {gpu_instance_id}") from None


def _full_compute_profile(nvml: Any, gpu_instance: Any, compute_slices: int) -> int | None:
    """The compute-instance profile id that spans the GPU instance's compute slices."""
    for info in _compute_profiles(nvml, gpu_instance):
        if int(info.sliceCount) == compute_slices:
            return int(info.id)
    return None


def _memory(nvml: Any, handle: Any) -> int:
    return int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
