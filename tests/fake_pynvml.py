"""A stand-in for the pynvml module with the calls GPU discovery makes, MIG included.

Shaped as nvidia-ml-py 13.x shapes them: `nvmlDeviceGetMigMode` returns
[current, pending]; the listing calls take a ctypes array (or None, to count) and a
`ctypes.byref` count, and fill them, as pynvml hands both straight to the C library;
errors are `NVMLError` subclasses named as pynvml names them. A card's MIG side is a
`MockMigDevice`, so the NVML path and the mock backend read the same instances, and
create/destroy of GPU and compute instances go to it (its refusals become the
`NVMLError` of the same return code). `module.refuse` maps a call's name to the
error it raises instead, to test how a refusal midway is undone.
"""

from __future__ import annotations

import contextlib
import ctypes
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dra_driver.objects.mig_profiles import MigProfile
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.mig_state import MigError

GIB = 1 << 30
COMPUTE_PROFILES = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}
"""`NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE` -> compute slices."""


class NVMLError(Exception):
    value = 999

    def __str__(self) -> str:
        return type(self).__name__


class NVMLError_InvalidArgument(NVMLError):  # noqa: N801, N818 (pynvml's names)
    value = 2


class NVMLError_NotSupported(NVMLError):  # noqa: N801, N818
    value = 3


class NVMLError_NotFound(NVMLError):  # noqa: N801, N818
    value = 6


class NVMLError_InUse(NVMLError):  # noqa: N801, N818
    value = 19


class NVMLError_InsufficientResources(NVMLError):  # noqa: N801, N818
    value = 23


ERRORS = (
    NVMLError,
    NVMLError_InvalidArgument,
    NVMLError_NotSupported,
    NVMLError_NotFound,
    NVMLError_InUse,
    NVMLError_InsufficientResources,
)


class c_nvmlGpuInstancePlacement_t(ctypes.Structure):  # noqa: N801
    _fields_ = [("start", ctypes.c_uint), ("size", ctypes.c_uint)]


@dataclass
class FakeCard:
    """One card; `mig` None = a card without MIG (NOT_SUPPORTED)."""

    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    memory: int = 80 * GIB
    minor: int = 0
    bus: str = "00000000:3B:00.0"
    mig: MockMigDevice | None = None


@dataclass(frozen=True)
class MigHandle:
    card: FakeCard
    gpu_instance: int
    compute_instance: int


@dataclass
class _Handles:
    """ctypes handle values (non-zero ints) for GPU and compute instances."""

    by_value: dict[int, tuple[FakeCard, int, int | None]] = field(default_factory=dict)

    def value(self, card: FakeCard, gi: int, ci: int | None = None) -> int:
        for value, entry in self.by_value.items():
            if entry == (card, gi, ci):
                return value
        value = len(self.by_value) + 1
        self.by_value[value] = (card, gi, ci)
        return value


def fake_nvml(cards: list[FakeCard]) -> types.ModuleType:
    module = types.ModuleType("pynvml")
    handles = _Handles()
    module.calls = []
    module.refuse = {}
    for error in ERRORS:
        setattr(module, error.__name__, error)
    module.c_nvmlGpuInstancePlacement_t = c_nvmlGpuInstancePlacement_t
    module.c_nvmlGpuInstance_t = ctypes.c_void_p
    module.c_nvmlComputeInstance_t = ctypes.c_void_p
    module.NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
    module.NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
    module.nvmlInit = lambda: module.calls.append("init")
    module.nvmlShutdown = lambda: module.calls.append("shutdown")
    module.nvmlSystemGetDriverVersion = lambda: "570.86.15"
    module.nvmlSystemGetCudaDriverVersion = lambda: 12080
    module.nvmlDeviceGetCount = lambda: len(cards)
    module.nvmlDeviceGetHandleByIndex = lambda i: cards[i]
    module.nvmlDeviceGetMinorNumber = lambda h: h.minor
    module.nvmlDeviceGetName = lambda h: h.name
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=h.memory)
    module.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h.bus.encode())
    module.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)
    module.nvmlDeviceGetNumaNodeId = lambda h: 0

    def uuid(handle: FakeCard | MigHandle) -> str:
        if isinstance(handle, MigHandle):
            return _mig(handle.card).mig_uuid(handle.gpu_instance, handle.compute_instance)
        return handle.uuid

    def mig_mode(handle: FakeCard) -> list[int]:
        device = _mig(handle)
        return [int(device.enabled), int(device.pending_enabled)]

    def profile_info(handle: FakeCard, nvml_profile: int) -> Any:
        profile = _profile(handle, nvml_profile=nvml_profile)
        return types.SimpleNamespace(
            id=profile.profile_id,
            sliceCount=profile.compute_slices,
            instanceCount=profile.max_instances,
            multiprocessorCount=profile.multiprocessors,
            memorySizeMB=profile.memory_mib,
            name=f"MIG {profile.name}".encode(),
        )

    def placements(handle: FakeCard, profile_id: int, array: Any, count_ref: Any) -> int:
        found = _profile(handle, profile_id=profile_id).placements
        count_ref._obj.value = len(found)
        if array is not None:
            for slot, placement in zip(array, found, strict=False):
                slot.start, slot.size = placement.start, placement.size
        return 0

    def gpu_instances(handle: FakeCard, profile_id: int, array: Any, count_ref: Any) -> int:
        found = [gi for gi in _mig(handle).gpu_instances() if gi.profile.profile_id == profile_id]
        count_ref._obj.value = len(found)
        for index, gi in enumerate(found):
            array[index] = handles.value(handle, gi.id)
        return 0

    def gpu_instance_info(value: int) -> Any:
        card, gi_id, _ = handles.by_value[value]
        gi = _view(card, gi_id)
        placement = types.SimpleNamespace(start=gi.placement.start, size=gi.placement.size)
        return types.SimpleNamespace(id=gi.id, profileId=gi.profile.profile_id, placement=placement)

    def compute_profile_info(value: int, ci_profile: int, engine: int) -> Any:
        card, gi_id, _ = handles.by_value[value]
        gi = _view(card, gi_id)
        slices = COMPUTE_PROFILES.get(ci_profile)
        if slices is None or slices > gi.profile.compute_slices:
            raise NVMLError_NotSupported()
        return types.SimpleNamespace(
            id=ci_profile, sliceCount=slices, instanceCount=gi.profile.compute_slices // slices
        )

    def compute_instances(value: int, ci_profile: int, array: Any, count_ref: Any) -> int:
        card, gi_id, _ = handles.by_value[value]
        found = [
            ci
            for ci, slices in _view(card, gi_id).compute
            if COMPUTE_PROFILES[ci_profile] == slices
        ]
        count_ref._obj.value = len(found)
        for index, ci in enumerate(found):
            array[index] = handles.value(card, gi_id, ci)
        return 0

    def compute_instance_info(value: int) -> Any:
        _, _, ci = handles.by_value[value]
        return types.SimpleNamespace(id=ci)

    def mig_handle(handle: FakeCard, index: int) -> MigHandle:
        devices = _mig(handle).state().instances
        if index >= len(devices):
            raise NVMLError_NotFound()
        device = devices[index]
        return MigHandle(handle, device.gpu_instance_id, device.compute_instance_id)

    def by_uuid(wanted: str) -> FakeCard:
        card = next((c for c in cards if c.uuid == wanted), None)
        if card is None:
            raise NVMLError_NotFound()
        return card

    def refused(call: str) -> None:
        module.calls.append(call)
        error = module.refuse.get(call)
        if error is not None:
            raise error()

    def create_gpu_instance(handle: FakeCard, profile_id: int, placement_ref: Any) -> int:
        refused("nvmlDeviceCreateGpuInstanceWithPlacement")
        profile = _profile(handle, profile_id=profile_id)
        with _as_nvml_error():
            gi = _mig(handle).create_gpu_instance(profile.name, placement_ref._obj.start)
        return handles.value(handle, gi)

    def create_compute_instance(value: int, ci_profile: int) -> int:
        refused("nvmlGpuInstanceCreateComputeInstance")
        card, gi_id, _ = handles.by_value[value]
        with _as_nvml_error():
            ci = _mig(card).create_compute_instance(gi_id, COMPUTE_PROFILES[ci_profile])
        return handles.value(card, gi_id, ci)

    def gpu_instance_by_id(handle: FakeCard, gi_id: int) -> int:
        if not any(gi.id == gi_id for gi in _mig(handle).gpu_instances()):
            raise NVMLError_NotFound()
        return handles.value(handle, gi_id)

    def compute_instance_by_id(value: int, ci_id: int) -> int:
        card, gi_id, _ = handles.by_value[value]
        if ci_id not in dict(_view(card, gi_id).compute):
            raise NVMLError_NotFound()
        return handles.value(card, gi_id, ci_id)

    def destroy_compute_instance(value: int) -> int:
        refused("nvmlComputeInstanceDestroy")
        card, gi_id, ci_id = handles.by_value[value]
        with _as_nvml_error():
            _mig(card).destroy_compute_instance(gi_id, ci_id)
        return 0

    def destroy_gpu_instance(value: int) -> int:
        refused("nvmlGpuInstanceDestroy")
        card, gi_id, _ = handles.by_value[value]
        with _as_nvml_error():
            _mig(card).destroy_gpu_instance(gi_id)
        return 0

    module.nvmlDeviceGetHandleByUUID = by_uuid
    module.nvmlDeviceCreateGpuInstanceWithPlacement = create_gpu_instance
    module.nvmlGpuInstanceCreateComputeInstance = create_compute_instance
    module.nvmlDeviceGetGpuInstanceById = gpu_instance_by_id
    module.nvmlGpuInstanceGetComputeInstanceById = compute_instance_by_id
    module.nvmlComputeInstanceDestroy = destroy_compute_instance
    module.nvmlGpuInstanceDestroy = destroy_gpu_instance
    module.nvmlDeviceGetUUID = uuid
    module.nvmlDeviceGetMigMode = mig_mode
    module.nvmlDeviceGetGpuInstanceProfileInfo = profile_info
    module.nvmlDeviceGetGpuInstancePossiblePlacements = placements
    module.nvmlDeviceGetGpuInstances = gpu_instances
    module.nvmlGpuInstanceGetInfo = gpu_instance_info
    module.nvmlGpuInstanceGetComputeInstanceProfileInfo = compute_profile_info
    module.nvmlGpuInstanceGetComputeInstances = compute_instances
    module.nvmlComputeInstanceGetInfo = compute_instance_info
    module.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7 if _mig(h).enabled else 0
    module.nvmlDeviceGetMigDeviceHandleByIndex = mig_handle
    module.nvmlDeviceGetGpuInstanceId = lambda h: h.gpu_instance
    module.nvmlDeviceGetComputeInstanceId = lambda h: h.compute_instance
    return module


@contextlib.contextmanager
def _as_nvml_error() -> Iterator[None]:
    """The mock device's refusal as the pynvml error of its return code."""
    try:
        yield
    except MigError as error:
        kind = next((e for e in ERRORS if e.value == error.code), NVMLError)
        raise kind() from None


def _mig(card: FakeCard) -> MockMigDevice:
    if card.mig is None:
        raise NVMLError_NotSupported()
    return card.mig


def _profile(
    card: FakeCard, *, nvml_profile: int | None = None, profile_id: int | None = None
) -> MigProfile:
    device = _mig(card)
    for profile in device.card.profiles:
        if profile.nvml_profile == nvml_profile or profile.profile_id == profile_id:
            return profile
    raise NVMLError_NotSupported()


def _view(card: FakeCard, gi_id: int) -> Any:
    return next(gi for gi in _mig(card).gpu_instances() if gi.id == gi_id)
