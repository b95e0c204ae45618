"""A claim's layout for CDI: what each container ends up with, merged as a runtime merges it."""

from __future__ import annotations

import pytest

from cdi.resolve import index_devices, resolve_container
from cdi.spec import ClaimDeviceEdits, build_claim_spec
from dra_driver.errors import InvalidParameterError
from kubeletplugin.claim_layout import (
    ContainerUse,
    build_claim_edits,
    plan_views,
    view_cache,
)
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.prepare_plan import DeviceCapacity, base_request, plan_claim
from libvgpu.cache_paths import claim_cache_location
from libvgpu.settings import LibvgpuPaths

GIB = 1 << 30
DRIVER = "vgpu.hami.io"
UID = "11111111-2222-3333-4444-555555555555"
NONCE = "0123456789abcdef0123456789abcdef"
PATHS = LibvgpuPaths()
DEVICES = {
    f"gpu-{i}": DeviceCapacity(
        GpuInfo(uuid=f"GPU-{i}", index=i, minor=i, product_name="A100", memory_bytes=80 * GIB),
        memory_bytes=80 * GIB,
        cores=100,
    )
    for i in range(3)
}
SHARE_IDS = iter(f"7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c{i:02x}" for i in range(256))


def result(request: str, device: str, memory: str, cores: str = "0") -> dict:
    return {
        "request": request,
        "driver": DRIVER,
        "pool": "node-a",
        "device": device,
        "shareID": next(SHARE_IDS),
        "consumedCapacity": {"memory": memory, "cores": cores},
    }


def plan_of(*results: dict):
    claim = {
        "metadata": {"uid": UID, "name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }
    return plan_claim(claim, driver=DRIVER, pool="node-a", devices=DEVICES)


def use(container: str, *requests: str) -> ContainerUse:
    return ContainerUse("ns/p", container, frozenset(requests) if requests else None)


def containers(plan, uses: list[ContainerUse]) -> dict[str, dict[str, str]]:
    """Each container's env after the runtime injects the CDI devices kubelet hands it."""
    views = plan_views(plan, uses)
    cache = claim_cache_location(PATHS, UID, NONCE)
    edits = build_claim_edits(plan, views, cache, PATHS)
    spec = build_claim_spec(
        UID,
        [
            ClaimDeviceEdits(g.device, g.gpu.minor, own, g.share_id)
            for g, own in zip(plan.grants, edits.per_grant, strict=True)
        ],
        common=edits.common,
    )
    registry = index_devices([("spec", spec.to_document())])
    env = {}
    for each in uses:
        ids = [
            device.qualified_id
            for grant, device in zip(plan.grants, spec.devices, strict=True)
            if each.requests is None or base_request(grant.request) in each.requests
        ]
        env[each.container] = resolve_container(ids, registry).env
    return env


def limits(env: dict[str, str]) -> dict[str, str]:
    """The limits that limit: without the pins of ordinals and limits the share leaves free."""
    return {
        k: v
        for k, v in env.items()
        if ("_LIMIT_" in k and v != "0") or k == "NVIDIA_VISIBLE_DEVICES"
    }


def test_each_container_naming_one_request_sees_only_its_gpus_numbered_from_zero():
    plan = plan_of(result("a", "gpu-0", "1Gi", "10"), result("b", "gpu-1", "2Gi", "20"))
    env = containers(plan, [use("only-a", "a"), use("only-b", "b")])
    assert limits(env["only-a"]) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-0",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
        "CUDA_DEVICE_SM_LIMIT_0": "10",
    }
    assert limits(env["only-b"]) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-1",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
        "CUDA_DEVICE_SM_LIMIT_0": "20",
    }
    caches = {env[c]["CUDA_DEVICE_MEMORY_SHARED_CACHE"] for c in ("only-a", "only-b")}
    assert len(caches) == 2


def test_two_requests_on_one_gpu_get_their_own_limit_and_region():
    plan = plan_of(result("a", "gpu-0", "1Gi"), result("b", "gpu-0", "2Gi"))
    env = containers(plan, [use("only-a", "a"), use("only-b", "b")])
    assert env["only-a"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1024m"
    assert env["only-b"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
    assert (
        env["only-a"]["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
        != env["only-b"]["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
    )


def test_containers_naming_the_whole_claim_share_every_gpu_and_one_region():
    plan = plan_of(result("a", "gpu-2", "1Gi"), result("b", "gpu-0", "2Gi"))
    env = containers(plan, [use("x"), use("y")])
    assert env["x"] == env["y"]
    assert limits(env["x"]) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-0,GPU-2",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
        "CUDA_DEVICE_MEMORY_LIMIT_1": "1024m",
    }


def test_a_container_naming_every_request_is_the_whole_claim():
    plan = plan_of(result("a", "gpu-0", "1Gi"), result("b", "gpu-1", "2Gi"))
    env = containers(plan, [use("whole"), use("both", "b", "a")])
    assert env["whole"] == env["both"]


def test_a_request_nobody_names_gets_its_own_view():
    plan = plan_of(result("a", "gpu-0", "1Gi"), result("b", "gpu-1", "2Gi"))
    views = plan_views(plan, [use("only-a", "a")])
    assert [sorted(v.requests) for v in views] == [["a"], ["b"]]
    assert containers(plan, [use("only-b", "b")])["only-b"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"


def test_without_containers_the_claim_is_one_view():
    plan = plan_of(result("a", "gpu-0", "1Gi"), result("b", "gpu-1", "2Gi"))
    (view,) = plan_views(plan, [])
    assert (view.requests, view.grants) == (frozenset({"a", "b"}), (0, 1))


def test_first_available_results_are_named_by_their_parent_request():
    plan = plan_of(result("a/big", "gpu-0", "8Gi"), result("b", "gpu-1", "2Gi"))
    env = containers(plan, [use("only-a", "a"), use("only-b", "b")])
    assert limits(env["only-a"]) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-0",
        "CUDA_DEVICE_MEMORY_LIMIT_0": "8192m",
    }


@pytest.mark.parametrize(
    ("uses", "named"),
    [
        ([use("whole"), use("only-a", "a")], "(request a) and pod ns/p container whole"),
        ([use("ab", "a", "b"), use("bc", "b", "c")], "(requests b, c) and pod ns/p container ab"),
    ],
)
def test_overlapping_but_different_request_sets_are_refused_naming_both(uses, named):
    plan = plan_of(
        result("a", "gpu-0", "1Gi"), result("b", "gpu-1", "2Gi"), result("c", "gpu-2", "3Gi")
    )
    with pytest.raises(InvalidParameterError) as caught:
        plan_views(plan, uses)
    assert caught.value.field == f"pod ns/p container {uses[1].container}"
    assert named in caught.value.reason
    assert "claim ns/c" in caught.value.reason
    assert "name the whole claim in every container" in caught.value.reason


def test_requests_of_other_drivers_do_not_split_the_claim():
    plan = plan_of(result("a", "gpu-0", "1Gi"))
    (view,) = plan_views(plan, [use("gpu", "a"), use("nic", "nic")])
    assert view.requests == frozenset({"a"})


def test_the_first_view_keeps_the_claim_file_and_the_others_sit_beside_it():
    cache = claim_cache_location(PATHS, UID, NONCE)
    assert view_cache(cache, 0) == cache
    other = view_cache(cache, 2)
    assert (other.host_dir, other.file_name) == (cache.host_dir, f"{NONCE}-2.cache")
