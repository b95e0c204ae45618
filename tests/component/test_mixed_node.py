"""Mixed mode on the node: the kubelet DRA plugin and the device plugin, over their real
sockets against the API emulator, refuse a share that would over-commit a GPU the other
path also serves (and take it without mixed mode); the kubelet plugin refuses to start
in mixed mode when kube-scheduler would allocate its devices."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from dataclasses import replace

import pytest
from deviceplugin_rig import NODE as DP_NODE
from deviceplugin_rig import RESOURCE, UUID_A, GpuNode, bounded, node_rig
from prometheus_client import CollectorRegistry
from test_kubelet_plugin import DRIVER, NODE, Node, node, result

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    VGPU_DEVICES_ALLOCATED,
    VGPU_NODE,
    ContainerDevice,
    encode_pod_devices,
)
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import object_path
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices
from simulator.standins.kubelet_deviceplugin import AdmissionRejectedError, ContainerRequest

__all__ = ["node"]

GPU_0 = "GPU-00000000-0000-0000-0000-00000000000a"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
CONTROLLER_TAINT = Taint(f"{DRIVER}/allocation", "controller")


def legacy_pod(name: str, node_name: str, devices: list[list[ContainerDevice]]) -> dict:
    """A pod as HAMi's extender and kubelet leave it: bound, its devices allocated."""
    return {
        "metadata": {
            "name": name,
            "annotations": {
                VGPU_NODE: node_name,
                VGPU_DEVICES_ALLOCATED: encode_pod_devices(devices),
                BIND_PHASE: "success",
            },
        },
        "spec": {"nodeName": node_name, "containers": [{"name": "main", "image": "cuda"}]},
    }


def mixed_plugin(node: Node) -> KubeletPlugin:
    settings = replace(
        node.settings,
        mixed_mode=True,
        slices=replace(node.settings.slices, allocation_taint=CONTROLLER_TAINT),
    )
    return KubeletPlugin(
        settings, node.client, MockBackend(settings.mock_gpus), CollectorRegistry()
    )


async def legacy_pod_on_gpu_0(node: Node) -> None:
    devices = [[ContainerDevice(GPU_0, "NVIDIA", 12000, 30)]]
    await node.client.create("/api/v1/namespaces/default/pods", legacy_pod("legacy", NODE, devices))


async def test_mixed_prepare_refuses_a_claim_the_legacy_pods_leave_no_room_for(node: Node):
    await legacy_pod_on_gpu_0(node)
    async with mixed_plugin(node):
        await node.kubelet.wait_registered(DRIVER)
        crowded = await node.claim("crowded", [result("gpu-0", "5Gi", "20")])
        roomy = await node.claim("roomy", [result("gpu-1", "5Gi", "20")])
        response = await node.kubelet.prepare(DRIVER, [crowded, roomy])

    assert response.claims[crowded.uid].error == (
        f"status.allocation: GPU gpu-0 ({GPU_0}) would be over-committed in mixed mode: "
        "memory 17120 MiB of 16384 MiB; held by pod default/legacy (12000 MiB, 30 cores, "
        "1 share); asked by claim default/crowded (5120 MiB, 20 cores, 1 share). Legacy pods "
        "and DRA claims share this GPU, and the allocators must not hand out more than it offers"
    )
    assert not (node.cdi_dir / f"k8s.vgpu.hami.io-claim_{crowded.uid}.json").exists()
    assert response.claims[roomy.uid].error == ""


async def test_mixed_prepare_counts_the_claims_prepared_before_with_the_pods(node: Node):
    await legacy_pod_on_gpu_0(node)
    async with mixed_plugin(node):
        await node.kubelet.wait_registered(DRIVER)
        first = await node.claim("first", [result("gpu-0", "3Gi")])
        second = await node.claim("second", [result("gpu-0", "2Gi")])
        assert (await node.kubelet.prepare(DRIVER, [first])).claims[first.uid].error == ""
        refused = (await node.kubelet.prepare(DRIVER, [second])).claims[second.uid].error

    assert "memory 17120 MiB of 16384 MiB" in refused
    assert "held by claim default/first (3072 MiB, 0 cores, 1 share); pod default/legacy" in refused


async def test_without_mixed_mode_the_same_claim_is_prepared(node: Node):
    await legacy_pod_on_gpu_0(node)
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        crowded = await node.claim("crowded", [result("gpu-0", "5Gi", "20")])
        response = await node.kubelet.prepare(DRIVER, [crowded])

    assert response.claims[crowded.uid].error == ""


def test_mixed_mode_without_the_controller_is_refused_in_settings(node: Node):
    with pytest.raises(InvalidParameterError) as refused:
        replace(node.settings, mixed_mode=True)
    assert refused.value.field == "--mixed-mode"
    assert "kube-scheduler cannot see legacy usage" in refused.value.reason


async def test_the_command_refuses_to_start_in_mixed_mode_when_kube_scheduler_allocates():
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dra_driver.cli",
        "kubelet-plugin",
        "--node-name",
        "node-x",
        env={**os.environ, "MIXED_MODE": "true"},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await bounded(process.communicate())
    assert process.returncode == 2, stderr.decode()
    starting, message = stderr.decode().split("\n", 1)
    assert " starting " in starting and "component='kubelet-plugin'" in starting
    assert message.startswith(
        "dra-driver kubelet-plugin: --mixed-mode: needs --controller-allocated"
    )
    assert "kube-scheduler cannot see legacy usage" in message
    assert "over-commit GPUs the device plugin also serves" in message


async def publish_slices(rig: GpuNode) -> None:
    """The kubelet plugin's slices for the same mock GPUs (what it would publish)."""
    node_object = await rig.node()
    gpus = MockBackend(rig.mock_gpus).discover()
    for item in build_resource_slices(
        rig.name, node_object["metadata"]["uid"], gpus, SliceSettings(driver=DRIVER), 1
    ):
        await rig.client.create("/apis/resource.k8s.io/v1/resourceslices", item)


async def dra_claim_on_gpu_0(rig: GpuNode, memory: str) -> None:
    """A claim the controller allocated on the node's gpu-0 (the GPU of UUID_A)."""
    await rig.client.create(
        CLAIMS,
        {
            "metadata": {"name": "dra"},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "nvidia.vgpu.hami.io"}}
                    ]
                }
            },
        },
    )
    allocated = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": DP_NODE,
        "device": "gpu-0",
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": {"memory": memory, "cores": "0", "shares": "1"},
    }
    await rig.client.patch(
        object_path(CLAIMS, "dra") + "/status",
        {
            "status": {
                "allocation": {
                    "devices": {"results": [allocated]},
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": [DP_NODE]}
                                ]
                            }
                        ]
                    },
                }
            }
        },
    )


async def test_mixed_allocate_refuses_a_pod_the_dra_claims_leave_no_room_for() -> None:
    async with node_rig(mixed_mode=True) as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await publish_slices(rig)
        await dra_claim_on_gpu_0(rig, "12Gi")
        await rig.bound_pod("late", [[ContainerDevice(UUID_A, "NVIDIA", 8000, 10)]])
        with pytest.raises(AdmissionRejectedError) as rejected:
            await bounded(rig.kubelet.admit_pod("u-late", RESOURCE, [ContainerRequest("main", 1)]))
        pod, node_after = await rig.pod("late"), await rig.node()
        await plugin.events.wait_idle()
        events = await rig.client.list("/api/v1/namespaces/default/events")

    refusal = (
        f"pod default/late: GPU gpu-0 ({UUID_A}) would be over-committed in mixed mode: "
        "memory 20288 MiB of 16384 MiB; held by claim default/dra (12288 MiB, 0 cores, "
        "1 share); asked by pod default/late (8000 MiB, 10 cores, 1 share)"
    )
    assert refusal in rejected.value.event_message
    assert pod["metadata"]["annotations"][BIND_PHASE] == "failed"
    assert NODE_LOCK not in (node_after["metadata"].get("annotations") or {})
    refused = [e for e in events["items"] if e["reason"] == "VGPUAllocationRefused"]
    assert [e["involvedObject"]["name"] for e in refused] == ["late"]
    assert refusal in refused[0]["message"]


async def test_mixed_allocate_counts_the_other_legacy_pods_of_the_node() -> None:
    async with node_rig(mixed_mode=True) as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await publish_slices(rig)
        await dra_claim_on_gpu_0(rig, "4Gi")
        devices = [[ContainerDevice(UUID_A, "NVIDIA", 9000, 0)]]
        await rig.client.create(
            "/api/v1/namespaces/default/pods", legacy_pod("running", DP_NODE, devices)
        )
        await rig.bound_pod("late", [[ContainerDevice(UUID_A, "NVIDIA", 4000, 0)]])
        with pytest.raises(AdmissionRejectedError) as rejected:
            await bounded(rig.kubelet.admit_pod("u-late", RESOURCE, [ContainerRequest("main", 1)]))

    assert "memory 17096 MiB of 16384 MiB" in rejected.value.event_message
    assert (
        "held by claim default/dra (4096 MiB, 0 cores, 1 share); pod default/running "
        "(9000 MiB, 0 cores, 1 share)"
    ) in rejected.value.event_message


async def test_without_mixed_mode_allocate_serves_the_same_pod() -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await publish_slices(rig)
        await dra_claim_on_gpu_0(rig, "12Gi")
        await rig.bound_pod("late", [[ContainerDevice(UUID_A, "NVIDIA", 8000, 10)]])
        admission = await bounded(
            rig.kubelet.admit_pod("u-late", RESOURCE, [ContainerRequest("main", 1)])
        )
        pod = await rig.pod("late")

    assert admission.responses["main"].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8000m"
    assert pod["metadata"]["annotations"][BIND_PHASE] == "success"


async def test_mixed_allocate_serves_a_pod_that_fits_beside_the_claims() -> None:
    async with node_rig(mixed_mode=True) as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await publish_slices(rig)
        await dra_claim_on_gpu_0(rig, "8Gi")
        await rig.bound_pod("fits", [[ContainerDevice(UUID_A, "NVIDIA", 8192, 10)]])
        admission = await bounded(
            rig.kubelet.admit_pod("u-fits", RESOURCE, [ContainerRequest("main", 1)])
        )
        pod = await rig.pod("fits")

    assert admission.responses["main"].envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"
    assert pod["metadata"]["annotations"][BIND_PHASE] == "success"
