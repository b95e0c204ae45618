"""The env vars and mounts that put a set of GPU shares under libvgpu's control.

One pure function serves both the CDI writer (DRA) and the legacy device
plugin, so a share is enforced the same way whichever path allocated it. The
encodings are libvgpu's, not Kubernetes': a memory limit is `<MiB>m` because
libvgpu reads only the last character as the unit (`4Gi` would mean 4 bytes),
and a core limit is an integer percent.

Every variable libvgpu reads for its limits is set, to the value the share
implies, including the ordinals a container has no device for, and so is
`CUDA_REDIRECT`, the library libvgpu loads for its `dlsym` override: a CDI env entry
replaces the container's own of the same name, so in DRA mode a pod's `env` or
`envFrom` cannot lift a limit by setting one the spec left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from dra_driver.errors import InvalidParameterError
from libvgpu.cache_paths import CacheLocation
from libvgpu.settings import (
    CONTAINER_LOCK_DIR,
    CORE_POLICY_ENV,
    DISABLE_CONTROL_ENV,
    MEMORY_LIMIT_ENV,
    REDIRECT_ENV,
    SHARED_CACHE_ENV,
    SM_LIMIT_ENV,
    TASK_PRIORITY_ENV,
    LibvgpuPaths,
)

MAX_DEVICES = 16
"""libvgpu reads `CUDA_DEVICE_MEMORY_LIMIT_<i>` / `CUDA_DEVICE_SM_LIMIT_<i>` for i in 0..15."""

MIB = 1 << 20

NO_OWN_LIMIT = "0"
"""libvgpu's "no limit of its own": a per-ordinal 0 falls back to the global value, and a
global 0 means no memory limit and 100 % of the SMs. It never raises a limit that is set."""

DEFAULT_PRIORITY = 1
"""libvgpu's `CUDA_TASK_PRIORITY` when unset: low, so a tenant cannot claim high by itself."""


class CorePolicy(StrEnum):
    """`GPU_CORE_UTILIZATION_POLICY`: default follows the region switch; force/disable override."""

    DEFAULT = "default"
    FORCE = "force"
    DISABLE = "disable"


@dataclass(frozen=True)
class DeviceShare:
    """One GPU's slice for a container set."""

    uuid: str
    host_index: int
    """NVML index on the host: NVML enumerates in PCI bus order, as CUDA does in the container."""

    memory_limit_bytes: int | None
    """None leaves memory unlimited; otherwise at least 1 MiB, rounded down to whole MiB."""

    core_limit_percent: int | None
    """None leaves cores unthrottled; otherwise 0..100 (libvgpu treats 0 as 100)."""


@dataclass(frozen=True)
class ShareSet:
    """Everything one container set gets: its devices and the settings they share."""

    devices: tuple[DeviceShare, ...]
    cache: CacheLocation
    policy: CorePolicy = CorePolicy.DEFAULT
    priority: int | None = None
    """`CUDA_TASK_PRIORITY` (HAMi: 0 high, 1 low); None pins libvgpu's default of 1."""

    disable_control: bool = False
    """Skip the `ld.so.preload` mount so libvgpu is not loaded (HAMi's `CUDA_DISABLE_CONTROL`)."""


@dataclass(frozen=True)
class EnvVar:
    name: str
    value: str


@dataclass(frozen=True)
class Mount:
    host_path: str
    container_path: str
    read_only: bool


@dataclass(frozen=True)
class ContainerEdits:
    """Env vars, and mounts in the order they must be applied (parent before nested)."""

    env: tuple[EnvVar, ...]
    mounts: tuple[Mount, ...]


def order_devices(devices: Sequence[DeviceShare]) -> tuple[DeviceShare, ...]:
    """In-container CUDA order under `CUDA_DEVICE_ORDER=PCI_BUS_ID`: by host index."""
    seen: set[str] = set()
    indexes: set[int] = set()
    for device in devices:
        if device.uuid in seen:
            raise InvalidParameterError("devices", f"device {device.uuid} listed twice")
        if device.host_index in indexes:
            raise InvalidParameterError("devices", f"host index {device.host_index} listed twice")
        seen.add(device.uuid)
        indexes.add(device.host_index)
    return tuple(sorted(devices, key=lambda device: device.host_index))


def encode_memory_limit(limit_bytes: int) -> str:
    """`<MiB>m`; refuses sizes under 1 MiB, which would encode as `0m` and mean "no limit"."""
    if limit_bytes < MIB:
        raise InvalidParameterError("memory", f"{limit_bytes} bytes is below libvgpu's 1 MiB unit")
    return f"{limit_bytes // MIB}m"


def encode_core_limit(percent: int) -> str:
    if not 0 <= percent <= 100:
        raise InvalidParameterError("cores", f"{percent} is not a percentage in 0..100")
    return str(percent)


def limit_env(devices: Sequence[DeviceShare]) -> list[EnvVar]:
    """Every limit variable libvgpu reads, the global ones and ordinals 0..15, in container
    order; an ordinal without a device, or a device without that limit, gets NO_OWN_LIMIT."""
    env = [
        EnvVar(MEMORY_LIMIT_ENV, NO_OWN_LIMIT),
        EnvVar(SM_LIMIT_ENV, NO_OWN_LIMIT),
    ]
    for ordinal in range(MAX_DEVICES):
        device = devices[ordinal] if ordinal < len(devices) else None
        memory = device.memory_limit_bytes if device else None
        cores = device.core_limit_percent if device else None
        env += [
            EnvVar(
                f"{MEMORY_LIMIT_ENV}_{ordinal}",
                NO_OWN_LIMIT if memory is None else encode_memory_limit(memory),
            ),
            EnvVar(
                f"{SM_LIMIT_ENV}_{ordinal}",
                NO_OWN_LIMIT if cores is None else encode_core_limit(cores),
            ),
        ]
    return env


def build_container_edits(shares: ShareSet, paths: LibvgpuPaths) -> ContainerEdits:
    """Env vars and mounts for one container set; deterministic, so repeated prepares agree."""
    devices = order_devices(shares.devices)
    if not devices:
        raise InvalidParameterError("devices", "a share set needs at least one device")
    if len(devices) > MAX_DEVICES:
        raise InvalidParameterError(
            "devices", f"{len(devices)} devices exceed libvgpu's {MAX_DEVICES}"
        )
    env = [
        EnvVar("NVIDIA_VISIBLE_DEVICES", ",".join(device.uuid for device in devices)),
        EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        EnvVar(SHARED_CACHE_ENV, shares.cache.container_file),
        EnvVar(REDIRECT_ENV, paths.container_library_path),
        EnvVar(DISABLE_CONTROL_ENV, "true" if shares.disable_control else "false"),
        *limit_env(devices),
        EnvVar(CORE_POLICY_ENV, shares.policy.value),
        EnvVar(
            TASK_PRIORITY_ENV,
            str(DEFAULT_PRIORITY if shares.priority is None else shares.priority),
        ),
    ]
    mounts = [
        Mount(shares.cache.host_dir, shares.cache.container_dir, read_only=False),
        Mount(paths.host_library_path, paths.container_library_path, read_only=True),
    ]
    if not shares.disable_control:
        mounts.append(Mount(paths.host_preload_path, paths.container_preload_path, read_only=True))
    mounts.append(Mount(paths.lock_dir, CONTAINER_LOCK_DIR, read_only=False))
    return ContainerEdits(env=tuple(env), mounts=tuple(mounts))
