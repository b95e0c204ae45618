"""Allocate through the kubelet stand-in over real unix sockets, for pods the API
emulator holds as HAMi's extender leaves them: the pod the node lock names is
served, its device list is popped container by container, the libvgpu edits equal
the CDI path's for the same share, and every failure names its cause, marks the
pod failed and frees the node."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

import pytest
from deviceplugin_rig import NODE, RESOURCE, UUID_A, UUID_B, GpuNode, bounded, node_rig

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    ContainerDevice,
)
from api.quantity import MIB
from kubeletplugin.claim_layout import build_claim_edits, plan_views
from kubeletplugin.deviceplugin.plugin import DevicePlugin
from kubeletplugin.gpus import MockBackend
from kubeletplugin.prepare_plan import ClaimPlan, DeviceGrant
from libvgpu.cache_paths import legacy_cache_location
from libvgpu.container_edits import CorePolicy
from simulator.standins.kubelet_deviceplugin import AdmissionRejectedError, ContainerRequest


def device(uuid: str, memory: int, cores: int = 0) -> ContainerDevice:
    return ContainerDevice(uuid, "NVIDIA", memory, cores)


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


async def admit(rig: GpuNode, uid: str, *containers: ContainerRequest) -> Any:
    return await bounded(rig.kubelet.admit_pod(uid, RESOURCE, list(containers)))


def cdi_path_edits(
    rig: GpuNode, response: pb2.ContainerAllocateResponse, pod_uid: str, container: str, grants
) -> tuple[dict[str, str], list[tuple[str, str, bool]]]:
    """What the DRA path's CDI spec would carry for the same share, in the same cache dir."""
    nonce = posixpath.basename(response.envs["CUDA_DEVICE_MEMORY_SHARED_CACHE"]).split(".")[0]
    cache = legacy_cache_location(rig.settings.libvgpu, pod_uid, container, nonce)
    gpus = {gpu.uuid: gpu for gpu in MockBackend(rig.mock_gpus).discover()}
    plan = ClaimPlan(
        uid=pod_uid,
        namespace="default",
        name="same-share",
        grants=tuple(
            DeviceGrant("gpu", NODE, f"gpu-{gpus[uuid].index}", "", gpus[uuid], mib * MIB, cores)
            for uuid, mib, cores in grants
        ),
        policy=CorePolicy.DEFAULT,
    )
    layout = build_claim_edits(plan, plan_views(plan, ()), cache, rig.settings.libvgpu)
    env = {v.name: v.value for v in layout.common.env}
    for edits in layout.per_grant:
        env.update({v.name: v.value for v in edits.env})
    return env, [(m.host_path, m.container_path, m.read_only) for m in layout.common.mounts]


async def refusals(rig: GpuNode, plugin: DevicePlugin) -> list[dict[str, Any]]:
    """The device plugin's VGPUAllocationRefused events, once written (Node events
    live in `default`, as for every cluster-scoped object)."""
    await plugin.events.wait_idle()
    events = await rig.client.list("/api/v1/namespaces/default/events")
    return [e for e in events["items"] if e["reason"] == "VGPUAllocationRefused"]


def mounts_of(response: pb2.ContainerAllocateResponse) -> list[tuple[str, str, bool]]:
    return [(m.host_path, m.container_path, m.read_only) for m in response.mounts]


async def test_allocate_serves_the_locked_pod_with_the_cdi_paths_edits() -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        pod = await rig.bound_pod("one", [[device(UUID_B, 3000, 30), device(UUID_A, 2000, 0)]])
        admission = await admit(rig, "kubelet-uid", ContainerRequest("main", 2))
        after = await rig.pod("one")
        node = await rig.node()
        uid = pod["metadata"]["uid"]
        response = admission.responses["main"]
        env, mounts = cdi_path_edits(
            rig, response, uid, "main", [(UUID_B, 3000, 30), (UUID_A, 2000, 0)]
        )
        cache_dir_made = Path(rig.root, "vgpu", "containers", f"{uid}_main").is_dir()

    assert dict(response.envs) == env
    assert mounts_of(response) == mounts
    assert response.envs["NVIDIA_VISIBLE_DEVICES"] == f"{UUID_A},{UUID_B}"
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2000m"
    assert response.envs["CUDA_DEVICE_MEMORY_LIMIT_1"] == "3000m"
    assert response.envs["CUDA_DEVICE_SM_LIMIT_1"] == "30"
    assert response.envs["CUDA_DEVICE_SM_LIMIT_0"] == "0"
    assert (f"{rig.root}/vgpu/ld.so.preload", "/etc/ld.so.preload", True) in mounts
    assert cache_dir_made
    assert annotations(after)[VGPU_DEVICES_TO_ALLOCATE] == ";"
    assert annotations(after)[VGPU_DEVICES_ALLOCATED] == annotations(pod)[VGPU_DEVICES_ALLOCATED]
    assert annotations(after)[BIND_PHASE] == "success"
    assert NODE_LOCK not in annotations(node)
    assert sorted(admission.devices["main"]) == sorted([f"{UUID_A}-0", f"{UUID_B}-0"])


async def test_init_and_app_containers_are_served_in_order_and_the_lock_held_until_the_last():
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod(
            "multi",
            [[device(UUID_A, 1000)], [device(UUID_A, 4000, 50)], [], [device(UUID_B, 2000)]],
            init_containers=[{"name": "init", "image": "cuda"}],
            containers=[
                {"name": "a", "image": "cuda"},
                {"name": "nogpu", "image": "busybox"},
                {
                    "name": "b",
                    "image": "cuda",
                    "env": [
                        {"name": "CUDA_DISABLE_CONTROL", "value": "true"},
                        {"name": "CUDA_TASK_PRIORITY", "value": "0"},
                    ],
                },
            ],
        )
        seen: list[tuple[str, str | None, bool]] = []

        async def snapshot() -> None:
            pod, node = await rig.pod("multi"), await rig.node()
            seen.append(
                (
                    annotations(pod)[VGPU_DEVICES_TO_ALLOCATE],
                    annotations(pod).get(BIND_PHASE),
                    NODE_LOCK in annotations(node),
                )
            )

        first = await admit(rig, "u-init", ContainerRequest("init", 1, init=True))
        await snapshot()
        second = await admit(rig, "u-a", ContainerRequest("a", 1))
        await snapshot()
        third = await admit(rig, "u-b", ContainerRequest("b", 1))
        await snapshot()

    a_dev = f"{UUID_A},NVIDIA"
    b_dev = f"{UUID_B},NVIDIA"
    assert seen == [
        (f";{a_dev},4000,50:;;{b_dev},2000,0:;", "allocating", True),
        (f";;;{b_dev},2000,0:;", "allocating", True),
        (";;;;", "success", False),
    ]
    init_env = first.responses["init"].envs
    assert init_env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "1000m"
    assert second.responses["a"].envs["CUDA_DEVICE_SM_LIMIT_0"] == "50"
    b_response = third.responses["b"]
    assert b_response.envs["NVIDIA_VISIBLE_DEVICES"] == UUID_B
    assert b_response.envs["CUDA_TASK_PRIORITY"] == "0"
    assert "/etc/ld.so.preload" not in [m.container_path for m in b_response.mounts]
    assert "/etc/ld.so.preload" in [m.container_path for m in second.responses["a"].mounts]


async def test_a_device_count_other_than_kubelets_fails_clearly_and_frees_the_node() -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("two", [[device(UUID_A, 1000), device(UUID_B, 1000)]])
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-two", ContainerRequest("main", 1))
        pod, node = await rig.pod("two"), await rig.node()

    assert rejected.value.event_message == (
        "Allocate failed due to rpc error: code = FailedPrecondition desc = pod default/two "
        "container main: hami.io/vgpu-devices-to-allocate assigns 2 device(s) but kubelet "
        "asked for 1, which is unexpected"
    )
    assert annotations(pod)[BIND_PHASE] == "failed"
    assert NODE_LOCK not in annotations(node)


async def test_only_the_pod_the_lock_names_is_served() -> None:
    """A second pod annotated for this node (HAMi#3076's self-annotated pod) is never
    picked: with no lock Allocate refuses; with the lock on the other pod, that one is
    served and the first is left untouched."""
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("sneaky", [[device(UUID_A, 8000)]], lock=False)
        with pytest.raises(AdmissionRejectedError) as unlocked:
            await admit(rig, "u-1", ContainerRequest("main", 1))
        await rig.bound_pod("rightful", [[device(UUID_B, 1000)]])
        served = await admit(rig, "u-2", ContainerRequest("main", 1))
        sneaky, rightful = await rig.pod("sneaky"), await rig.pod("rightful")

    assert "node node-dp has no hami.io/mutex.lock" in unlocked.value.event_message
    assert served.responses["main"].envs["NVIDIA_VISIBLE_DEVICES"] == UUID_B
    assert annotations(sneaky)[BIND_PHASE] == "allocating"
    assert annotations(sneaky)[VGPU_DEVICES_TO_ALLOCATE] == f"{UUID_A},NVIDIA,8000,0:;"
    assert annotations(rightful)[BIND_PHASE] == "success"


async def test_a_refusal_with_no_pod_to_serve_is_told_on_the_node_once() -> None:
    """Without a lock there is no pod to tell: the Warning goes on the node, and the
    same refusal again bumps that event's count instead of adding one."""
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        for uid in ("u-1", "u-2"):
            with pytest.raises(AdmissionRejectedError) as rejected:
                await admit(rig, uid, ContainerRequest("main", 1))
            await plugin.events.wait_idle()
        (event,) = await refusals(rig, plugin)
        node = await rig.node()

    assert event["type"] == "Warning"
    assert event["message"] == (
        "node node-dp has no hami.io/mutex.lock: no pod is being bound to it by the scheduler "
        "extender, so there is no pod to allocate for"
    )
    assert f"desc = {event['message']}, which is unexpected" in rejected.value.event_message
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": node["metadata"]["uid"],
    }
    assert event["count"] == 2
    assert event["reportingComponent"] == "vgpu-device-plugin"


async def test_a_lock_taken_over_by_a_pod_still_binding_is_not_served_to_another() -> None:
    """HAMi#3096: pod A was bound, its lock expired and pod B took it over; A's Allocate
    then arrives. B is not bound here yet, so it cannot be the pod kubelet admits:
    refused, told on the node (the pod being admitted is unknown), and B keeps its lock
    and its phase."""
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("b-binding", [[device(UUID_A, 9000)]], bound=False)
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-a", ContainerRequest("main", 1))
        pod, node = await rig.pod("b-binding"), await rig.node()
        (event,) = await refusals(rig, plugin)

    assert "pod default/b-binding holds the lock of node node-dp but is not bound to it" in (
        rejected.value.event_message
    )
    assert event["message"].startswith(
        "pod default/b-binding holds the lock of node node-dp but is not bound to it"
    )
    assert f"desc = {event['message']}, which is unexpected" in rejected.value.event_message
    assert event["involvedObject"]["kind"] == "Node"
    assert annotations(pod)[BIND_PHASE] == "allocating"
    assert annotations(pod)[VGPU_DEVICES_TO_ALLOCATE] == f"{UUID_A},NVIDIA,9000,0:;"
    assert annotations(node)[NODE_LOCK].endswith(",default,b-binding")


@pytest.mark.parametrize(
    ("to_allocate", "message"),
    [
        (
            "GPU-x,NVIDIA,lots,0:;",
            "annotation hami.io/vgpu-devices-to-allocate: device 'GPU-x' memory 'lots' "
            "is not an integer",
        ),
        (";;", "hami.io/vgpu-devices-to-allocate has no container left to allocate"),
        (
            ";GPU-00000000-0000-0000-0000-00000000000a,NVIDIA,10,0:;",
            "entry 1 names no container (the pod has 1, init containers first)",
        ),
        ("GPU-elsewhere,NVIDIA,10,0:;", "GPU GPU-elsewhere is not on this node"),
        (f"{UUID_A},NVIDIA,0,0:;", f"gives GPU {UUID_A} 0 MiB of memory"),
    ],
)
async def test_a_malformed_device_list_fails_allocate_with_its_reason(
    to_allocate: str, message: str
) -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("bad", [[device(UUID_A, 10)]])
        await rig.client.patch(
            "/api/v1/namespaces/default/pods/bad",
            {
                "metadata": {
                    "annotations": {
                        VGPU_DEVICES_TO_ALLOCATE: to_allocate,
                        VGPU_DEVICES_ALLOCATED: to_allocate,
                    }
                }
            },
        )
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-bad", ContainerRequest("main", 1))
        pod, node = await rig.pod("bad"), await rig.node()
        still_serving = rig.settings.socket_path.exists()

    assert message in rejected.value.event_message
    assert "pod default/bad" in rejected.value.event_message
    assert annotations(pod)[BIND_PHASE] == "failed"
    assert NODE_LOCK not in annotations(node)
    assert still_serving


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        ("yesterday", "node node-dp: unreadable lock 'yesterday'"),
        ("2026-11-30T08:00:00Z", "names no pod (old bare-time format)"),
        ("2026-11-30T08:00:00Z,default,ghost", "pod default/ghost, named by the lock"),
    ],
)
async def test_a_lock_naming_no_servable_pod_refuses(lock: str, message: str) -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.client.patch(
            f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {NODE_LOCK: lock}}}
        )
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-x", ContainerRequest("main", 1))
        node = await rig.node()

    assert message in rejected.value.event_message
    assert annotations(node)[NODE_LOCK] == lock


async def test_preferred_allocation_points_kubelet_at_the_pods_gpus() -> None:
    async with node_rig(split_count=2) as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("pref", [[device(UUID_B, 1000)]])
        admission = await admit(rig, "u-pref", ContainerRequest("main", 1))
        asked = [call for call in rig.kubelet.calls if call[0] == "GetPreferredAllocation"]

    assert len(asked) == 1
    assert admission.devices["main"] == [f"{UUID_B}-0"]


async def test_an_api_error_writing_the_outcome_fails_the_pod_and_frees_the_node() -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("flaky", [[device(UUID_A, 1000)]])
        assert rig.server is not None
        rig.server.faults.fail("/pods/flaky$", verb="PATCH", status=500, message="etcd away")
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-flaky", ContainerRequest("main", 1))
        pod, node = await rig.pod("flaky"), await rig.node()

    assert "pod default/flaky: 500" in rejected.value.event_message
    assert "etcd away" in rejected.value.event_message
    assert annotations(pod)[BIND_PHASE] == "failed"
    assert annotations(pod)[VGPU_DEVICES_TO_ALLOCATE] == f"{UUID_A},NVIDIA,1000,0:;"
    assert NODE_LOCK not in annotations(node)


@pytest.mark.parametrize(
    ("missing", "what"),
    [
        ("vgpu/libvgpu.so", "libvgpu library"),
        ("vgpu/ld.so.preload", "libvgpu preload list"),
        ("vgpulock", "libvgpu lock directory"),
    ],
)
async def test_a_missing_libvgpu_file_refuses_allocate_naming_it(missing: str, what: str) -> None:
    """On containerd a missing mount source becomes an empty directory: the container
    would start with no limit enforced. Refused like the DRA prepare, with the fix."""
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        target = rig.root / missing
        if target.is_dir():
            target.rmdir()
        else:
            target.unlink()
        await rig.bound_pod("bare", [[device(UUID_A, 1000)]])
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-bare", ContainerRequest("main", 1))
        pod, node = await rig.pod("bare"), await rig.node()
        cache_dirs = list((rig.root / "vgpu").glob("containers/*"))
        (event,) = await refusals(rig, plugin)

    message = rejected.value.event_message
    assert f"pod default/bare: {what} {target} is missing on this node" in message
    assert event["type"] == "Warning"
    assert event["message"].startswith(f"pod default/bare: {what} {target} is missing")
    assert f"desc = {event['message']}, which is unexpected" in message
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "bare",
        "namespace": "default",
        "uid": pod["metadata"]["uid"],
    }
    assert "`dra-driver install-libvgpu`" in message
    assert annotations(pod)[BIND_PHASE] == "failed"
    assert NODE_LOCK not in annotations(node)
    assert cache_dirs == []


async def test_a_preload_list_naming_another_path_refuses_allocate() -> None:
    """A preload list naming the host path (an install for another --vgpu-dir) loads
    nothing in the container, where the library is at /usr/local/vgpu/libvgpu.so."""
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        preload = rig.root / "vgpu" / "ld.so.preload"
        preload.write_text(f"{rig.root}/vgpu/libvgpu.so\n")
        await rig.bound_pod("stray", [[device(UUID_A, 1000)]])
        with pytest.raises(AdmissionRejectedError) as rejected:
            await admit(rig, "u-stray", ContainerRequest("main", 1))
        pod = await rig.pod("stray")

    assert (
        f"libvgpu preload list {preload} names {rig.root}/vgpu/libvgpu.so, not "
        "/usr/local/vgpu/libvgpu.so where containers see libvgpu.so"
    ) in rejected.value.event_message
    assert annotations(pod)[BIND_PHASE] == "failed"


async def test_a_container_without_control_needs_no_preload_list() -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        (rig.root / "vgpu" / "ld.so.preload").unlink()
        env = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
        container = {"name": "main", "image": "cuda", "env": env}
        await rig.bound_pod("free", [[device(UUID_A, 1000)]], containers=[container])
        admission = await admit(rig, "u-free", ContainerRequest("main", 1))

    mounted = [m.container_path for m in admission.responses["main"].mounts]
    assert "/usr/local/vgpu/libvgpu.so" in mounted
    assert "/etc/ld.so.preload" not in mounted
