"""Allocate for pods whose HAMi annotations someone other than the scheduler wrote
(HAMi#3041): the node lock names the pod, yet its bind phase, node or device lists
are not what /bind leaves. Each forgery is refused through the kubelet stand-in over
real sockets, the refusal (kubelet's event on the pod, and the device plugin's own
VGPUAllocationRefused Warning there) names the field and why, and no libvgpu edits or
cache dir are handed out."""

from __future__ import annotations

from typing import Any

import pytest
from deviceplugin_rig import RESOURCE, UUID_A, UUID_B, GpuNode, bounded, node_rig

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    ContainerDevice,
    encode_pod_devices,
)
from kubeletplugin.deviceplugin.plugin import DevicePlugin
from simulator.standins.kubelet_deviceplugin import AdmissionRejectedError, ContainerRequest

SCHEDULED = [[ContainerDevice(UUID_A, "NVIDIA", 1000, 10)]]


def entry(uuid: str, memory: int, cores: int = 0) -> str:
    return encode_pod_devices([[ContainerDevice(uuid, "NVIDIA", memory, cores)]])


async def refusal_events(rig: GpuNode, plugin: DevicePlugin) -> list[dict[str, Any]]:
    """The device plugin's own refusal events in the API server, once written."""
    await plugin.events.wait_idle()
    events = await rig.client.list("/api/v1/namespaces/default/events")
    return [e for e in events["items"] if e["reason"] == "VGPUAllocationRefused"]


async def forge(rig: GpuNode, plugin: DevicePlugin, annotations: dict[str, str]) -> dict[str, Any]:
    """The scheduler's pod and lock, then annotations overwritten by another writer; the
    refusal kubelet records, the device plugin's refusal events, the pod and the node
    afterwards, and the cache dirs made."""
    pod = await rig.bound_pod("forged", SCHEDULED)
    await rig.client.patch(
        "/api/v1/namespaces/default/pods/forged", {"metadata": {"annotations": annotations}}
    )
    with pytest.raises(AdmissionRejectedError) as rejected:
        await bounded(rig.kubelet.admit_pod("u-forged", RESOURCE, [ContainerRequest("main", 1)]))
    return {
        "message": rejected.value.event_message,
        "events": list(rig.kubelet.events),
        "refusals": [
            (e["type"], e["involvedObject"]["kind"], e["involvedObject"]["uid"], e["message"])
            for e in await refusal_events(rig, plugin)
        ],
        "uid": pod["metadata"]["uid"],
        "pod": (await rig.pod("forged"))["metadata"]["annotations"],
        "node": (await rig.node())["metadata"].get("annotations") or {},
        "cache_dirs": list((rig.root / "vgpu").glob("containers/*")),
    }


FORGERIES = {
    "to-allocate beyond the allocated entry": (
        {VGPU_DEVICES_TO_ALLOCATE: entry(UUID_A, 16000, 100)},
        "hami.io/vgpu-devices-to-allocate entry 0 "
        f"'{UUID_A},NVIDIA,16000,100:;' is not the scheduler's allocation "
        f"(hami.io/vgpu-devices-allocated entry '{UUID_A},NVIDIA,1000,10:;')",
    ),
    "to-allocate naming another GPU": (
        {VGPU_DEVICES_TO_ALLOCATE: entry(UUID_B, 1000, 10)},
        "is not the scheduler's allocation",
    ),
    "both lists beyond the registered memory": (
        {
            VGPU_DEVICES_TO_ALLOCATE: entry(UUID_A, 20000),
            VGPU_DEVICES_ALLOCATED: entry(UUID_A, 20000),
        },
        f"container main: hami.io/vgpu-devices-to-allocate gives GPU {UUID_A} 20000 MiB of "
        "memory, more than the 16384 MiB this node registered",
    ),
    "both lists beyond the registered cores": (
        {
            VGPU_DEVICES_TO_ALLOCATE: entry(UUID_A, 1000, 250),
            VGPU_DEVICES_ALLOCATED: entry(UUID_A, 1000, 250),
        },
        f"gives GPU {UUID_A} 250 cores, more than the 100 this node registered",
    ),
    "both lists naming a GPU not on this node": (
        {
            VGPU_DEVICES_TO_ALLOCATE: entry("GPU-elsewhere", 1000),
            VGPU_DEVICES_ALLOCATED: entry("GPU-elsewhere", 1000),
        },
        "container main: GPU GPU-elsewhere is not on this node",
    ),
}


@pytest.mark.parametrize("case", FORGERIES, ids=list(FORGERIES))
async def test_forged_device_lists_are_refused_and_fail_the_pod(case: str) -> None:
    annotations, message = FORGERIES[case]
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        seen = await forge(rig, plugin, annotations)

    assert "pod default/forged" in seen["message"]
    assert message in seen["message"]
    assert seen["events"] == [("Warning", "UnexpectedAdmissionError", seen["message"])]
    ((kind, about, uid, refusal),) = seen["refusals"]
    assert (kind, about, uid) == ("Warning", "Pod", seen["uid"])
    assert refusal.startswith("pod default/forged") and message in refusal
    assert f"desc = {refusal}, which is unexpected" in seen["message"]
    assert seen["pod"][BIND_PHASE] == "failed"
    assert NODE_LOCK not in seen["node"]
    assert seen["cache_dirs"] == []


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {BIND_PHASE: "success"},
            "pod default/forged is not being allocated: hami.io/bind-phase is 'success', "
            "expected 'allocating'",
        ),
        (
            {VGPU_NODE: "node-other"},
            "pod default/forged holds the lock of node node-dp but hami.io/vgpu-node is "
            "'node-other'",
        ),
    ],
    ids=["bind phase not allocating", "vgpu-node of another node"],
)
async def test_a_pod_not_in_the_schedulers_state_is_refused(
    annotations: dict[str, str], message: str
) -> None:
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        seen = await forge(rig, plugin, annotations)

    assert message in seen["message"]
    assert seen["events"] == [("Warning", "UnexpectedAdmissionError", seen["message"])]
    ((kind, about, uid, refusal),) = seen["refusals"]
    assert (kind, about, uid) == ("Warning", "Pod", seen["uid"])
    assert refusal.startswith("pod default/forged") and message in refusal
    assert f"desc = {refusal}, which is unexpected" in seen["message"]
    assert seen["pod"][VGPU_DEVICES_TO_ALLOCATE] == encode_pod_devices(SCHEDULED)
    assert NODE_LOCK not in seen["node"]
    assert seen["cache_dirs"] == []
