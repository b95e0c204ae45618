"""Where libvgpu's files live on the host and inside containers.

One small value object shared by the container-edit builder, the cache-path
naming and the host installer, so the three never disagree about a path.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass

# HAMi-core's opt-out variables, re-exported: defined below libvgpu, where status reads them.
from dra_driver.objects.enforcement_env import CORE_POLICY_ENV, DISABLE_CONTROL_ENV
from dra_driver.objects.tamper_rules import GuardedPaths

LIBRARY_NAME = "libvgpu.so"
PRELOAD_NAME = "ld.so.preload"
CONTAINER_LIBRARY_PATH = "/usr/local/vgpu/libvgpu.so"
"""Where libvgpu.so appears in every container, whatever the host directory: the
`ld.so.preload` that `install-libvgpu` writes names this path, so it cannot follow
the host's layout (libvgpu's own `CUDA_REDIRECT` default)."""
CONTAINER_LOCK_DIR = "/tmp/vgpulock"
"""Where the lock directory appears in every container, whatever the host directory:
HAMi-core builds that lock open `/tmp/vgpulock/lock` by this fixed path."""

MEMORY_LIMIT_ENV = "CUDA_DEVICE_MEMORY_LIMIT"
"""HAMi-core's memory limit: global as is, per device ordinal with a `_<i>` suffix."""
SM_LIMIT_ENV = "CUDA_DEVICE_SM_LIMIT"
"""HAMi-core's SM share: global as is, per device ordinal with a `_<i>` suffix."""
SHARED_CACHE_ENV = "CUDA_DEVICE_MEMORY_SHARED_CACHE"
TASK_PRIORITY_ENV = "CUDA_TASK_PRIORITY"
REDIRECT_ENV = "CUDA_REDIRECT"
"""The library libvgpu `dlopen`s for its `dlsym` override (default CONTAINER_LIBRARY_PATH):
a tenant's value could point it at a library of its own, so it is pinned to the
container library path."""
PINNED_ENV = (SHARED_CACHE_ENV, REDIRECT_ENV)
"""Single variables (besides the limit families) set from the share and never the
container's own: the legacy webhook refuses a GPU container that sets one."""
LIMIT_ENV_FAMILIES = (MEMORY_LIMIT_ENV, SM_LIMIT_ENV)
"""Each name and every `<name>_<i>` is set from the allocation."""
OPT_OUT_ENV = (DISABLE_CONTROL_ENV, CORE_POLICY_ENV)
"""Variables that switch HAMi-core's enforcement off: an administrator's decision."""


@dataclass(frozen=True)
class LibvgpuPaths:
    """Host and container paths of libvgpu's files; defaults are HAMi's."""

    host_dir: str = "/usr/local/vgpu"
    """Host directory holding `libvgpu.so` and `ld.so.preload` (HAMi's `$HOOK_PATH/vgpu`)."""

    container_library_path: str = CONTAINER_LIBRARY_PATH
    """Where libvgpu.so appears in containers; the host's `ld.so.preload` must name it."""

    container_preload_path: str = "/etc/ld.so.preload"
    """The dynamic loader's system-wide preload list, mounted read-only over the image's."""

    lock_dir: str = CONTAINER_LOCK_DIR
    """Host path of the lock directory older libvgpu builds require; containers see it at
    CONTAINER_LOCK_DIR."""

    cache_root: str = "/usr/local/vgpu"
    """Host root of per-claim (`claims/`) and per-container (`containers/`) cache dirs."""

    legacy_container_cache_dir: str = "/usr/local/vgpu"
    """Container path of a legacy container's cache dir, as HAMi's device plugin mounts it."""

    @property
    def host_library_path(self) -> str:
        return posixpath.join(self.host_dir, LIBRARY_NAME)

    @property
    def host_preload_path(self) -> str:
        return posixpath.join(self.host_dir, PRELOAD_NAME)


def guarded_paths(paths: LibvgpuPaths) -> GuardedPaths:
    """What no hostPath may reach while libvgpu's limits are to hold: on the host its
    directory, locks, cache root and the host's own preload list; in the container the
    preload list and the library's directory. The DRA prepare and the legacy webhook
    check the same paths."""
    return GuardedPaths(
        host=(paths.host_dir, paths.lock_dir, paths.cache_root, paths.container_preload_path),
        container=(paths.container_preload_path, posixpath.dirname(paths.container_library_path)),
    )
