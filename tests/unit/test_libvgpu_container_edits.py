"""Env vars and mounts for a share set, encoded the way libvgpu parses them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.errors import InvalidParameterError
from libvgpu.cache_paths import claim_cache_location, legacy_cache_location
from libvgpu.container_edits import (
    ContainerEdits,
    CorePolicy,
    DeviceShare,
    EnvVar,
    Mount,
    ShareSet,
    build_container_edits,
    encode_memory_limit,
)
from libvgpu.settings import LibvgpuPaths

PATHS = LibvgpuPaths()
CLAIM_UID = "6f1d2b9e-7c1a-4d5e-8f90-123456789abc"
POD_UID = "aa1d2b9e-7c1a-4d5e-8f90-123456789abc"
NONCE = "0123456789abcdef0123456789abcdef"
MIB = 1 << 20
GIB = 1 << 30


def env_of(edits: ContainerEdits) -> dict[str, str]:
    return {variable.name: variable.value for variable in edits.env}


def two_devices() -> tuple[DeviceShare, ...]:
    # Given out of order: in-container ordinals must follow the host (PCI) order.
    return (
        DeviceShare("GPU-bbbb", host_index=3, memory_limit_bytes=2 * GIB, core_limit_percent=25),
        DeviceShare("GPU-aaaa", host_index=1, memory_limit_bytes=6000 * MIB, core_limit_percent=60),
    )


def test_dra_share_set_env_and_mounts():
    cache = claim_cache_location(PATHS, CLAIM_UID, NONCE)
    edits = build_container_edits(
        ShareSet(two_devices(), cache, policy=CorePolicy.FORCE, priority=0), PATHS
    )

    claim_dir = f"/usr/local/vgpu/claims/{CLAIM_UID}"
    assert edits.env == (
        EnvVar("NVIDIA_VISIBLE_DEVICES", "GPU-aaaa,GPU-bbbb"),
        EnvVar("CUDA_DEVICE_ORDER", "PCI_BUS_ID"),
        EnvVar("CUDA_DEVICE_MEMORY_SHARED_CACHE", f"{claim_dir}/{NONCE}.cache"),
        EnvVar("CUDA_REDIRECT", "/usr/local/vgpu/libvgpu.so"),
        EnvVar("CUDA_DISABLE_CONTROL", "false"),
        EnvVar("CUDA_DEVICE_MEMORY_LIMIT", "0"),
        EnvVar("CUDA_DEVICE_SM_LIMIT", "0"),
        EnvVar("CUDA_DEVICE_MEMORY_LIMIT_0", "6000m"),
        EnvVar("CUDA_DEVICE_SM_LIMIT_0", "60"),
        EnvVar("CUDA_DEVICE_MEMORY_LIMIT_1", "2048m"),
        EnvVar("CUDA_DEVICE_SM_LIMIT_1", "25"),
        *(
            EnvVar(f"CUDA_DEVICE_{kind}_LIMIT_{ordinal}", "0")
            for ordinal in range(2, 16)
            for kind in ("MEMORY", "SM")
        ),
        EnvVar("GPU_CORE_UTILIZATION_POLICY", "force"),
        EnvVar("CUDA_TASK_PRIORITY", "0"),
    )
    assert edits.mounts == (
        Mount(claim_dir, claim_dir, read_only=False),
        Mount("/usr/local/vgpu/libvgpu.so", "/usr/local/vgpu/libvgpu.so", read_only=True),
        Mount("/usr/local/vgpu/ld.so.preload", "/etc/ld.so.preload", read_only=True),
        Mount("/tmp/vgpulock", "/tmp/vgpulock", read_only=False),
    )


def test_legacy_share_set_mounts_the_container_dir_before_the_library_inside_it():
    cache = legacy_cache_location(PATHS, POD_UID, "trainer", NONCE)
    edits = build_container_edits(ShareSet(two_devices()[:1], cache), PATHS)

    assert env_of(edits)["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == f"/usr/local/vgpu/{NONCE}.cache"
    assert edits.mounts[0] == Mount(
        f"/usr/local/vgpu/containers/{POD_UID}_trainer", "/usr/local/vgpu", read_only=False
    )
    assert edits.mounts[1].container_path == "/usr/local/vgpu/libvgpu.so"


def test_disable_control_drops_only_the_preload_mount():
    cache = claim_cache_location(PATHS, CLAIM_UID, NONCE)
    with_control = build_container_edits(ShareSet(two_devices(), cache), PATHS)
    without = build_container_edits(ShareSet(two_devices(), cache, disable_control=True), PATHS)

    assert [m for m in with_control.mounts if m.container_path != "/etc/ld.so.preload"] == list(
        without.mounts
    )
    assert "/etc/ld.so.preload" not in {m.container_path for m in without.mounts}
    assert env_of(with_control)["CUDA_DISABLE_CONTROL"] == "false"
    assert env_of(without) == {**env_of(with_control), "CUDA_DISABLE_CONTROL": "true"}


@pytest.mark.parametrize("legacy", [False, True], ids=["claim", "legacy container"])
def test_cuda_redirect_is_pinned_to_the_mounted_library(legacy: bool):
    """libvgpu dlopens the library CUDA_REDIRECT names for its dlsym override: pinned to
    the path the library is mounted at, whatever the container's own env says."""
    paths = LibvgpuPaths(container_library_path="/opt/hami/libvgpu.so")
    cache = (
        legacy_cache_location(paths, POD_UID, "trainer", NONCE)
        if legacy
        else claim_cache_location(paths, CLAIM_UID, NONCE)
    )
    edits = build_container_edits(ShareSet(two_devices(), cache), paths)

    assert env_of(edits)["CUDA_REDIRECT"] == "/opt/hami/libvgpu.so"
    library = [m for m in edits.mounts if m.host_path == paths.host_library_path]
    assert [m.container_path for m in library] == ["/opt/hami/libvgpu.so"]


def test_unset_limits_and_priority_are_pinned_to_libvgpu_defaults():
    """A limit the share leaves free is pinned to libvgpu's "none of its own", so a
    container's env cannot set one of those names and win (CDI env replaces its own)."""
    cache = claim_cache_location(PATHS, CLAIM_UID, NONCE)
    device = DeviceShare("GPU-aaaa", 0, memory_limit_bytes=None, core_limit_percent=None)
    env = env_of(build_container_edits(ShareSet((device,), cache), PATHS))

    limit_names = {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_SM_LIMIT"} | {
        f"CUDA_DEVICE_{kind}_LIMIT_{i}" for i in range(16) for kind in ("MEMORY", "SM")
    }
    assert {name: env[name] for name in limit_names} == dict.fromkeys(limit_names, "0")
    assert env["CUDA_TASK_PRIORITY"] == "1"
    assert env["GPU_CORE_UTILIZATION_POLICY"] == "default"


def test_ordinals_past_the_devices_are_pinned_and_real_ones_keep_their_limits():
    cache = claim_cache_location(PATHS, CLAIM_UID, NONCE)
    env = env_of(build_container_edits(ShareSet(two_devices(), cache), PATHS))

    assert [env[f"CUDA_DEVICE_MEMORY_LIMIT_{i}"] for i in range(3)] == ["6000m", "2048m", "0"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_15"] == env["CUDA_DEVICE_SM_LIMIT_15"] == "0"


def test_paths_come_from_settings():
    paths = LibvgpuPaths(
        host_dir="/opt/hami",
        container_library_path="/hami/libvgpu.so",
        lock_dir="/run/vgpulock",
        cache_root="/var/lib/vgpu",
    )
    cache = claim_cache_location(paths, CLAIM_UID, NONCE)
    edits = build_container_edits(ShareSet(two_devices(), cache), paths)

    assert [(m.host_path, m.container_path) for m in edits.mounts] == [
        (f"/var/lib/vgpu/claims/{CLAIM_UID}", f"/var/lib/vgpu/claims/{CLAIM_UID}"),
        ("/opt/hami/libvgpu.so", "/hami/libvgpu.so"),
        ("/opt/hami/ld.so.preload", "/etc/ld.so.preload"),
        ("/run/vgpulock", "/tmp/vgpulock"),
    ]


@pytest.mark.parametrize(
    ("devices", "field"),
    [
        ((), "devices"),
        ((DeviceShare("GPU-a", 0, GIB, 10), DeviceShare("GPU-a", 1, GIB, 10)), "devices"),
        ((DeviceShare("GPU-a", 0, GIB, 10), DeviceShare("GPU-b", 0, GIB, 10)), "devices"),
        ((DeviceShare("GPU-a", 0, MIB - 1, 10),), "memory"),
        ((DeviceShare("GPU-a", 0, GIB, 101),), "cores"),
        ((DeviceShare("GPU-a", 0, GIB, -1),), "cores"),
        (tuple(DeviceShare(f"GPU-{i}", i, GIB, 10) for i in range(17)), "devices"),
    ],
)
def test_invalid_share_sets_are_refused_with_the_field(devices, field):
    cache = claim_cache_location(PATHS, CLAIM_UID, NONCE)
    with pytest.raises(InvalidParameterError) as raised:
        build_container_edits(ShareSet(devices, cache), PATHS)
    assert raised.value.field == field


@given(st.integers(min_value=MIB, max_value=1 << 50))
def test_memory_limit_is_whole_mebibytes_with_a_lower_case_m(limit):
    encoded = encode_memory_limit(limit)
    assert encoded.endswith("m")
    mebibytes = int(encoded[:-1])
    # What libvgpu computes: strtoul of the digits times 2^20 for the last char.
    assert limit - MIB < mebibytes * MIB <= limit


@given(st.permutations(range(6)))
def test_ordinals_follow_host_order_whatever_the_input_order(order):
    cache = claim_cache_location(PATHS, CLAIM_UID, NONCE)
    devices = tuple(DeviceShare(f"GPU-{i}", i, (i + 1) * GIB, 10 + i) for i in order)
    env = env_of(build_container_edits(ShareSet(devices, cache), PATHS))
    assert env["NVIDIA_VISIBLE_DEVICES"] == ",".join(f"GPU-{i}" for i in range(6))
    for ordinal in range(6):
        assert env[f"CUDA_DEVICE_MEMORY_LIMIT_{ordinal}"] == f"{(ordinal + 1) * 1024}m"
        assert env[f"CUDA_DEVICE_SM_LIMIT_{ordinal}"] == str(10 + ordinal)
