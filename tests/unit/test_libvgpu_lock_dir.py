"""The lock directory is mounted at `/tmp/vgpulock` in every container, wherever it is on
the host: HAMi-core opens `/tmp/vgpulock/lock` by that fixed path
(reference/libvgpu-and-hami-dra.md). Seen on a real cluster: with `--lock-dir
/run/vgpulock` the directory appeared in containers at `/run/vgpulock`, where no
libvgpu build looks."""

from __future__ import annotations

import pytest

from libvgpu.cache_paths import claim_cache_location, legacy_cache_location
from libvgpu.container_edits import DeviceShare, Mount, ShareSet, build_container_edits
from libvgpu.settings import LibvgpuPaths

CLAIM_UID = "6f1d2b9e-7c1a-4d5e-8f90-123456789abc"
POD_UID = "aa1d2b9e-7c1a-4d5e-8f90-123456789abc"
NONCE = "0123456789abcdef0123456789abcdef"
SHARE = DeviceShare("GPU-aaaa", host_index=0, memory_limit_bytes=1 << 30, core_limit_percent=30)


@pytest.mark.parametrize("host_lock_dir", ["/tmp/vgpulock", "/run/vgpulock", "/var/lib/hami/lock"])
@pytest.mark.parametrize("legacy", [False, True])
def test_the_lock_dir_is_mounted_where_hami_core_looks(host_lock_dir: str, legacy: bool) -> None:
    paths = LibvgpuPaths(lock_dir=host_lock_dir)
    cache = (
        legacy_cache_location(paths, POD_UID, "app", NONCE)
        if legacy
        else claim_cache_location(paths, CLAIM_UID, NONCE)
    )
    edits = build_container_edits(ShareSet((SHARE,), cache), paths)

    locks = [m for m in edits.mounts if m.host_path == host_lock_dir]
    assert locks == [Mount(host_lock_dir, "/tmp/vgpulock", read_only=False)]
