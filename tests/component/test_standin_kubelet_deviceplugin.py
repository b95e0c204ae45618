"""KubeletDevicePlugin against a tiny device plugin over real unix sockets (fixtures replayed)."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from wire_fixtures import load_fixture

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.generated import deviceplugin_v1beta1_pb2_grpc as pb2_grpc
from dra_driver.objects.node_predicates import is_extended_resource_name
from dra_driver.process.grpc_tasks import stop_grpc_server
from simulator.standins.kubelet_deviceplugin import (
    AdmissionRejectedError,
    ContainerRequest,
    KubeletDevicePlugin,
)

RESOURCE = "nvidia.com/gpu"


def fixture(name: str) -> Any:
    return load_fixture(f"device-plugin/{name}")


def as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def outcome(prefix: str) -> dict[str, Any]:
    return next(o for o in fixture("outcomes.json") if o["scenario"].startswith(prefix))


class ProbeDevicePlugin(pb2_grpc.DevicePluginServicer):
    """The plugin side: serves its socket first, then registers, like the capture probe."""

    def __init__(self, directory: Path, options: dict[str, Any], devices: list[str]) -> None:
        self.directory = directory
        self.options = options
        self.devices = [d for d in fixture("list-and-watch.response.json")["devices"]]
        self.devices = [d for d in self.devices if d["ID"] in devices]
        self.preferred: Callable[[list[str], int], list[str]] = lambda free, size: free[-size:]
        self.allocate: Callable[[list[str]], dict[str, Any]] = lambda ids: {
            "container_responses": [{}]
        }
        self.allocate_abort: str | None = None
        self.log: list[tuple[str, dict[str, Any]]] = []
        self._release = asyncio.Event()
        self._server: grpc.aio.Server | None = None

    async def start(self, register: dict[str, Any] | None = None) -> None:
        server = grpc.aio.server()
        pb2_grpc.add_DevicePluginServicer_to_server(self, server)
        server.add_insecure_port(f"unix://{self.directory / 'probe-gpu.sock'}")
        await server.start()
        self._server = server
        request = register or {**fixture("register.request.json"), "options": self.options}
        async with grpc.aio.insecure_channel(f"unix://{self.directory / 'kubelet.sock'}") as ch:
            await pb2_grpc.RegistrationStub(ch).Register(
                json_format.ParseDict(request, pb2.RegisterRequest())
            )
        self.log.append(("Register returned", {}))

    async def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            await stop_grpc_server(self._server)

    def rpcs(self) -> list[str]:
        return [name for name, _ in self.log]

    async def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        self.log.append(("GetDevicePluginOptions", as_dict(request)))
        return json_format.ParseDict(self.options, pb2.DevicePluginOptions())

    async def ListAndWatch(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802 (gRPC method name)
        self.log.append(("ListAndWatch", as_dict(request)))
        yield json_format.ParseDict({"devices": self.devices}, pb2.ListAndWatchResponse())
        await self._release.wait()

    async def GetPreferredAllocation(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        self.log.append(("GetPreferredAllocation", as_dict(request)))
        ask = request.container_requests[0]
        chosen = self.preferred(list(ask.available_deviceIDs), ask.allocation_size)
        return pb2.PreferredAllocationResponse(
            container_responses=[pb2.ContainerPreferredAllocationResponse(deviceIDs=chosen)]
        )

    async def Allocate(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        self.log.append(("Allocate", as_dict(request)))
        if self.allocate_abort is not None:
            await context.abort(grpc.StatusCode.INTERNAL, self.allocate_abort)
        ids = list(request.container_requests[0].devices_ids)
        return json_format.ParseDict(self.allocate(ids), pb2.AllocateResponse())

    async def PreStartContainer(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        self.log.append(("PreStartContainer", as_dict(request)))
        return pb2.PreStartContainerResponse()


FULL_OPTIONS = fixture("get-device-plugin-options.response.json")
ALL_DEVICES = ["GPU-aaaa-0", "GPU-aaaa-1", "GPU-aaaa-2", "GPU-aaaa-3"]


@pytest.fixture
def directory() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kdp", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_registration_asks_options_before_answering_then_watches(directory: Path) -> None:
    plugin = ProbeDevicePlugin(directory, FULL_OPTIONS, ALL_DEVICES)
    async with KubeletDevicePlugin(directory) as kubelet:
        try:
            await plugin.start()
            endpoint = await kubelet.wait_registered(RESOURCE)
            devices = await kubelet.wait_update(RESOURCE)
            counts = (kubelet.capacity(RESOURCE), kubelet.allocatable(RESOURCE))
        finally:
            await plugin.stop()

    assert plugin.rpcs().index("GetDevicePluginOptions") < plugin.rpcs().index("Register returned")
    assert "ListAndWatch" in plugin.rpcs()
    assert plugin.log[0] == (
        "GetDevicePluginOptions",
        fixture("get-device-plugin-options.request.json"),
    )
    assert as_dict(endpoint.options) == fixture("get-device-plugin-options.response.json")
    assert endpoint.endpoint == "probe-gpu.sock"
    assert {"devices": [as_dict(d) for d in devices]} == fixture("list-and-watch.response.json")
    assert counts == (4, 4)


async def test_one_container_pod_replays_preferred_allocate_prestart(directory: Path) -> None:
    plugin = ProbeDevicePlugin(directory, FULL_OPTIONS, ALL_DEVICES)
    plugin.preferred = lambda free, size: ["GPU-aaaa-3", "GPU-aaaa-2"]
    plugin.allocate = lambda ids: fixture("allocate.response.json")
    async with KubeletDevicePlugin(directory) as kubelet:
        try:
            await plugin.start()
            await kubelet.wait_update(RESOURCE)
            admission = await kubelet.admit_pod("pod-1", RESOURCE, [ContainerRequest("cuda", 2)])
            await kubelet.start_container("pod-1", RESOURCE, "cuda")
        finally:
            await plugin.stop()

    preferred_request = dict(plugin.log)["GetPreferredAllocation"]
    captured = fixture("get-preferred-allocation.request.json")
    assert preferred_request.keys() == captured.keys()
    ask, captured_ask = (
        preferred_request["container_requests"][0],
        captured["container_requests"][0],
    )
    assert ask.keys() == captured_ask.keys()
    assert sorted(ask["available_deviceIDs"]) == sorted(captured_ask["available_deviceIDs"])
    assert ask["allocation_size"] == captured_ask["allocation_size"]
    assert dict(plugin.log)["Allocate"] == fixture("allocate.request.json")
    assert dict(plugin.log)["PreStartContainer"] == fixture("pre-start-container.request.json")
    assert admission.devices == {"cuda": ["GPU-aaaa-3", "GPU-aaaa-2"]}
    assert {"container_responses": [as_dict(admission.responses["cuda"])]} == fixture(
        "allocate.response.json"
    )


async def test_multi_container_pod_replays_the_captured_sequence(directory: Path) -> None:
    captured = fixture("allocate.multi-container.sequence.json")["calls_in_order"]
    answers = {
        tuple(c["request"]["container_requests"][0]["devices_ids"]): c["response"]
        for c in captured
        if c["rpc"] == "Allocate"
    }
    plugin = ProbeDevicePlugin(directory, FULL_OPTIONS, ["GPU-aaaa-0", "GPU-aaaa-1"])
    plugin.allocate = lambda ids: answers[tuple(ids)]
    containers = [
        ContainerRequest("a", 1),
        ContainerRequest("b", 1),
        ContainerRequest("nogpu", 0),
        ContainerRequest("init", 1, init=True),
    ]
    async with KubeletDevicePlugin(directory) as kubelet:
        try:
            await plugin.start()
            await kubelet.wait_update(RESOURCE)
            admission = await kubelet.admit_pod("pod-2", RESOURCE, containers)
            await kubelet.start_container("pod-2", RESOURCE, "init")
        finally:
            await plugin.stop()

    during_admission = [
        entry for entry in plugin.log if entry[0] in {"GetPreferredAllocation", "Allocate"}
    ]
    assert during_admission == [
        (c["rpc"], c["request"]) for c in captured if c["rpc"] != "PreStartContainer"
    ]
    assert plugin.log[-1] == ("PreStartContainer", captured[-1]["request"])
    assert admission.devices == {"init": ["GPU-aaaa-1"], "a": ["GPU-aaaa-1"], "b": ["GPU-aaaa-0"]}


async def test_empty_options_mean_only_allocate(directory: Path) -> None:
    scenario = outcome("plugin registers with options {}")
    registered = next(
        c["request"] for c in scenario["calls"] if c["rpc"] == "Registration.Register"
    )
    plugin = ProbeDevicePlugin(directory, {}, ALL_DEVICES)
    async with KubeletDevicePlugin(directory) as kubelet:
        try:
            await plugin.start(registered)
            await kubelet.wait_update(RESOURCE)
            await kubelet.admit_pod("pod-3", RESOURCE, [ContainerRequest("cuda", 2)])
            await kubelet.start_container("pod-3", RESOURCE, "cuda")
        finally:
            await plugin.stop()

    assert "GetDevicePluginOptions" in plugin.rpcs()
    assert [
        r for r in plugin.rpcs() if r not in {"GetDevicePluginOptions", "Register returned"}
    ] == [
        "ListAndWatch",
        "Allocate",
    ]


async def test_allocate_failure_rejects_the_pod_once(directory: Path) -> None:
    scenario = outcome("Allocate returns gRPC INTERNAL")
    captured = fixture("allocate.error.json")
    plugin = ProbeDevicePlugin(directory, {}, ALL_DEVICES)
    plugin.allocate_abort = captured["plugin_returned_grpc_status"]["details"]
    async with KubeletDevicePlugin(directory) as kubelet:
        try:
            await plugin.start()
            await kubelet.wait_update(RESOURCE)
            with pytest.raises(AdmissionRejectedError) as raised:
                await kubelet.admit_pod("pod-4", RESOURCE, [ContainerRequest("cuda", 1)])
            plugin.allocate_abort = None
            second = await kubelet.admit_pod("pod-5", RESOURCE, [ContainerRequest("cuda", 4)])
        finally:
            await plugin.stop()

    kubelet_event = next(e for e in scenario["events"] if e["reportingComponent"] == "kubelet")
    assert raised.value.pod_message == scenario["pod.status"]["message"]
    assert kubelet.events[0] == (
        kubelet_event["type"],
        kubelet_event["reason"],
        kubelet_event["message"],
    )
    assert scenario["pod.status"]["reason"] == "UnexpectedAdmissionError"
    assert plugin.rpcs().count("Allocate") == 2
    assert "pod-4" not in kubelet.pods
    assert len(second.devices["cuda"]) == 4


@pytest.mark.parametrize(
    "prefix", ["Register with version v1alpha1", "Register with resource_name"]
)
async def test_register_errors_carry_kubelets_texts(directory: Path, prefix: str) -> None:
    scenario = outcome(prefix)
    plugin = ProbeDevicePlugin(directory, {}, ALL_DEVICES)
    async with KubeletDevicePlugin(directory) as kubelet:
        try:
            with pytest.raises(grpc.aio.AioRpcError) as raised:
                await plugin.start(scenario["request"])
        finally:
            await plugin.stop()

    assert raised.value.code().name == scenario["kubelet_grpc_error"]["code"]
    assert raised.value.details() == scenario["kubelet_grpc_error"]["details"]
    assert kubelet.endpoints == {}


async def test_a_stopped_plugin_leaves_capacity_but_no_allocatable(directory: Path) -> None:
    plugin = ProbeDevicePlugin(directory, {}, ALL_DEVICES)
    async with KubeletDevicePlugin(directory) as kubelet:
        await plugin.start()
        await kubelet.wait_update(RESOURCE)
        await plugin.stop()
        await kubelet.wait_stream_closed(RESOURCE)
        capacity, allocatable = kubelet.capacity(RESOURCE), kubelet.allocatable(RESOURCE)

    assert (capacity, allocatable) == (4, 0)


async def test_a_restarted_kubelet_removes_plugin_sockets_but_keeps_its_checkpoint(
    directory: Path,
) -> None:
    (directory / "kubelet_internal_checkpoint").write_text("{}")
    plugin = ProbeDevicePlugin(directory, {}, ALL_DEVICES)
    first = KubeletDevicePlugin(directory)
    await first.start()
    try:
        await plugin.start()
        await first.wait_update(RESOURCE)
        await first.aclose()
        async with KubeletDevicePlugin(directory) as second:
            remaining = sorted(os.listdir(directory))
            allocatable = second.allocatable(RESOURCE)
    finally:
        await plugin.stop()

    assert remaining == ["kubelet.sock", "kubelet_internal_checkpoint"]
    assert allocatable == 0


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("nvidia.com/gpu", True),
        ("nvidia.com/gpumem", True),
        ("gpu", False),
        ("kubernetes.io/gpu", False),
        ("requests.nvidia.com/gpu", False),
        ("Nvidia.com/gpu", False),
    ],
)
def test_extended_resource_names(name: str, valid: bool) -> None:
    assert is_extended_resource_name(name) is valid
