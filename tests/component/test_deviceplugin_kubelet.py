"""The device plugin and the kubelet stand-in over real unix sockets: registration,
re-registration after a kubelet restart, ListAndWatch replicas and health, the node
register annotation, and the smaller RPCs."""

from __future__ import annotations

import queue
import threading
import types
from typing import Any

import grpc
import pytest
from deviceplugin_rig import NODE, RESOURCE, UUID_A, UUID_B, bounded, node_rig

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.generated import deviceplugin_v1beta1_pb2_grpc as pb2_grpc
from api.hami_annotations import NODE_HANDSHAKE, NODE_NVIDIA_REGISTER, decode_node_devices
from dra_driver.errors import DriverError
from kubeletplugin.gpus import NvmlBackend
from kubeletplugin.xid import XID_CRITICAL_ERROR
from simulator.standins.kubelet_deviceplugin import KubeletDevicePlugin

GIB = 1 << 30


def annotation(node: dict[str, Any], key: str) -> str | None:
    return (node["metadata"].get("annotations") or {}).get(key)


def register_health(node: dict[str, Any]) -> list[bool]:
    value = annotation(node, NODE_NVIDIA_REGISTER) or "null"
    return [d.health for d in decode_node_devices(value)]


async def test_registers_and_lists_split_count_replicas_per_gpu() -> None:
    async with node_rig(split_count=3) as rig, rig.plugin() as plugin:
        endpoint = await bounded(rig.kubelet.wait_registered(RESOURCE))
        devices = await bounded(rig.kubelet.wait_update(RESOURCE))
        counts = (rig.kubelet.capacity(RESOURCE), rig.kubelet.allocatable(RESOURCE))
        assert plugin.registrations == 1

    assert endpoint.endpoint == "nvidia.com-gpu.sock"
    assert endpoint.options.get_preferred_allocation_available
    assert not endpoint.options.pre_start_required
    assert [(d.ID, d.health, d.topology.nodes[0].ID) for d in devices] == [
        (f"{UUID_A}-0", "Healthy", 0),
        (f"{UUID_A}-1", "Healthy", 0),
        (f"{UUID_A}-2", "Healthy", 0),
        (f"{UUID_B}-0", "Healthy", 1),
        (f"{UUID_B}-1", "Healthy", 1),
        (f"{UUID_B}-2", "Healthy", 1),
    ]
    assert counts == (6, 6)
    assert ("GetDevicePluginOptions", pb2.Empty()) in rig.kubelet.calls


async def test_reregisters_after_a_kubelet_restart() -> None:
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.kubelet.aclose()
        async with KubeletDevicePlugin(rig.settings.plugin_dir) as restarted:
            await bounded(plugin.wait_registered(2))
            devices = await bounded(restarted.wait_update(RESOURCE))
            allocatable = restarted.allocatable(RESOURCE)
            socket_back = rig.settings.socket_path.exists()

    assert allocatable == len(devices) == 8
    assert socket_back


async def test_a_removed_plugin_socket_is_served_again_and_registered() -> None:
    async with node_rig() as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        before = rig.kubelet.endpoints[RESOURCE]
        rig.settings.socket_path.unlink()
        await bounded(plugin.wait_registered(2))

        def new_stream_listed() -> bool:
            endpoint = rig.kubelet.endpoints[RESOURCE]
            return endpoint is not before and endpoint.updates > 0

        await bounded(rig.kubelet.wait_for(new_stream_listed))
        assert rig.kubelet.endpoints[RESOURCE].stream_open
        assert rig.kubelet.allocatable(RESOURCE) == 8
        assert rig.settings.socket_path.exists()


async def test_an_unhealthy_gpu_in_the_mock_file_turns_its_replicas_unhealthy() -> None:
    async with node_rig(split_count=2) as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        text = rig.mock_gpus.read_text().replace("productName: Tesla T4", "healthy: false")
        rig.mock_gpus.write_text(text)
        devices = await bounded(rig.kubelet.wait_update(RESOURCE, after=1))
        node = await bounded(rig.wait_node(lambda n: register_health(n) == [True, False]))
        allocatable = rig.kubelet.allocatable(RESOURCE)

    assert {d.ID: d.health for d in devices} == {
        f"{UUID_A}-0": "Healthy",
        f"{UUID_A}-1": "Healthy",
        f"{UUID_B}-0": "Unhealthy",
        f"{UUID_B}-1": "Unhealthy",
    }
    assert allocatable == 2
    registered = decode_node_devices(annotation(node, NODE_NVIDIA_REGISTER) or "")
    assert [(d.id, d.health) for d in registered] == [(UUID_A, True), (UUID_B, False)]


class FakeNvml:
    """pynvml's discovery and event calls for two GPUs; XIDs are pushed by the test."""

    class NVMLError(Exception):
        pass

    class NVMLError_Timeout(NVMLError):  # noqa: N801, N818 (pynvml's name)
        pass

    def __init__(self) -> None:
        self.handles = [types.SimpleNamespace(uuid=UUID_A), types.SimpleNamespace(uuid=UUID_B)]
        self.events: queue.Queue[tuple[int, int]] = queue.Queue()
        self.registered = threading.Event()

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlSystemGetDriverVersion(self) -> str:  # noqa: N802
        return "550.54.15"

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        return 12040

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:  # noqa: N802
        return self.handles[index]

    def nvmlDeviceGetUUID(self, handle: Any) -> str:  # noqa: N802
        return handle.uuid

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:  # noqa: N802
        return types.SimpleNamespace(busId=f"00000000:0{self.handles.index(handle)}:00.0")

    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:  # noqa: N802
        return (8, 0)

    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:  # noqa: N802
        return self.handles.index(handle)

    def nvmlDeviceGetName(self, handle: Any) -> str:  # noqa: N802
        return "NVIDIA A100-SXM4-80GB"

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:  # noqa: N802
        return types.SimpleNamespace(total=80 * GIB)

    def nvmlEventSetCreate(self) -> str:  # noqa: N802
        return "events"

    def nvmlEventSetFree(self, events: str) -> None: ...  # noqa: N802

    def nvmlDeviceRegisterEvents(self, handle: Any, kind: int, events: str) -> None:  # noqa: N802
        if handle is self.handles[-1]:
            self.registered.set()

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:  # noqa: N802
        try:
            index, xid = self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise self.NVMLError_Timeout() from None
        return types.SimpleNamespace(
            device=self.handles[index], eventType=XID_CRITICAL_ERROR, eventData=xid
        )


async def test_a_critical_xid_turns_the_gpus_replicas_unhealthy() -> None:
    nvml = FakeNvml()
    async with node_rig(split_count=2, mock_gpus=None) as rig, rig.plugin(NvmlBackend(nvml)):
        await bounded(rig.kubelet.wait_update(RESOURCE))
        nvml.events.put((0, 13))  # an application fault: ignored
        nvml.events.put((0, 79))  # fallen off the bus
        devices = await bounded(rig.kubelet.wait_update(RESOURCE, after=1))

    assert {d.ID: d.health for d in devices} == {
        f"{UUID_A}-0": "Unhealthy",
        f"{UUID_A}-1": "Unhealthy",
        f"{UUID_B}-0": "Healthy",
        f"{UUID_B}-1": "Healthy",
    }


async def test_register_annotation_is_hamis_json_and_written_only_on_change() -> None:
    async with node_rig(split_count=5, memory_scaling=1.5) as rig:
        plugin = rig.plugin()
        await plugin.refresh_devices()
        first = await plugin.sync_register_annotation()
        node = await rig.node()
        patches = rig.server.faults.count(f"/nodes/{NODE}$", verb="PATCH")
        second = await plugin.sync_register_annotation()
        unchanged = await rig.node()
        patches_after = rig.server.faults.count(f"/nodes/{NODE}$", verb="PATCH")
        await rig.client.patch(
            f"/api/v1/nodes/{NODE}",
            {"metadata": {"annotations": {NODE_NVIDIA_REGISTER: None}}},
        )
        third = await plugin.sync_register_annotation()

    assert (first, second, third) == (True, False, True)
    assert patches_after == patches
    assert unchanged["metadata"]["resourceVersion"] == node["metadata"]["resourceVersion"]
    assert annotation(node, NODE_NVIDIA_REGISTER) == (
        f'[{{"id":"{UUID_A}","count":5,"devmem":24576,"devcore":100,'
        '"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true},'
        f'{{"id":"{UUID_B}","index":1,"count":5,"devmem":23040,"devcore":100,'
        '"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true}]'
    )
    assert annotation(node, NODE_HANDSHAKE) is None


async def test_the_handshake_is_left_to_the_scheduler() -> None:
    """Current HAMi: the plugin answers a Requesting handshake by staying registered
    (kubelet reports allocatable replicas), never by writing the annotation."""
    requesting = "Requesting_2026-11-30 08:00:00"
    async with node_rig() as rig:
        await rig.client.patch(
            f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {NODE_HANDSHAKE: requesting}}}
        )
        async with rig.plugin() as plugin:
            await bounded(rig.kubelet.wait_update(RESOURCE))
            await plugin.sync_register_annotation()
            node = await rig.node()
            allocatable = rig.kubelet.allocatable(RESOURCE)

    assert annotation(node, NODE_HANDSHAKE) == requesting
    assert annotation(node, NODE_NVIDIA_REGISTER)
    assert allocatable == 8


async def test_options_and_pre_start_answer_over_the_socket() -> None:
    async with node_rig() as rig, rig.plugin():
        await bounded(rig.kubelet.wait_registered(RESOURCE))
        async with grpc.aio.insecure_channel(f"unix://{rig.settings.socket_path}") as channel:
            stub = pb2_grpc.DevicePluginStub(channel)
            options = await stub.GetDevicePluginOptions(pb2.Empty())
            started = await stub.PreStartContainer(
                pb2.PreStartContainerRequest(devices_ids=[f"{UUID_A}-0"])
            )

    assert options == pb2.DevicePluginOptions(get_preferred_allocation_available=True)
    assert started == pb2.PreStartContainerResponse()


async def test_a_plugin_started_before_kubelet_registers_once_it_appears() -> None:
    async with node_rig() as rig:
        await rig.kubelet.aclose()
        rig.settings.kubelet_socket.unlink(missing_ok=True)
        async with rig.plugin() as plugin:
            assert plugin.registrations == 0
            async with KubeletDevicePlugin(rig.settings.plugin_dir) as kubelet:
                await bounded(plugin.wait_registered(1))
                devices = await bounded(kubelet.wait_update(RESOURCE))

    assert len(devices) == 8


async def test_a_broken_mock_file_keeps_the_last_devices_until_it_is_fixed() -> None:
    async with node_rig(split_count=1) as rig, rig.plugin() as plugin:
        await bounded(rig.kubelet.wait_update(RESOURCE))
        good = rig.mock_gpus.read_text()
        rig.mock_gpus.write_text("gpus: [{uuid: 1, index: -4}]\n")
        with pytest.raises(DriverError):
            await plugin.refresh_devices()
        still = [d.ID for d in rig.kubelet.endpoints[RESOURCE].devices.values()]
        rig.mock_gpus.write_text(
            good.split("  - {uuid: GPU-00000000-0000-0000-0000-00000000000b")[0]
        )
        devices = await bounded(rig.kubelet.wait_update(RESOURCE, after=1))

    assert still == [f"{UUID_A}-0", f"{UUID_B}-0"]
    assert [d.ID for d in devices] == [f"{UUID_A}-0"]
