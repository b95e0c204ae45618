"""A kubelet stand-in for the device plugin API v1beta1 (wire fixtures device-plugin/).

It serves `v1beta1.Registration/Register` on `<dir>/kubelet.sock` and, as observed on a
real kubelet v1.36: dials the plugin and calls GetDevicePluginOptions before Register
returns (even when the request carries options), then keeps ListAndWatch open; at pod
admission it makes one Allocate call per container that asks for the resource, each with
exactly one ContainerAllocateRequest, preceded by GetPreferredAllocation when the plugin
offers it (not for an app container that reuses its init container's devices); calls
PreStartContainer when a container starts if the plugin asked for it; rejects the pod at
once, without retry, when Allocate fails; marks every device unhealthy when the plugin's
stream ends; and removes the plugin sockets of its directory when it (re)starts, so
plugins must notice and register again.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.generated import deviceplugin_v1beta1_pb2_grpc as pb2_grpc
from dra_driver.errors import DriverError
from dra_driver.objects.node_predicates import is_extended_resource_name
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls, stop_grpc_server
from simulator.standins.kubelet_dra import finish_call, go_rpc_error

KUBELET_SOCKET = "kubelet.sock"
CHECKPOINT_FILE = "kubelet_internal_checkpoint"
API_VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
ADMISSION_ERROR_REASON = "UnexpectedAdmissionError"


class AdmissionRejectedError(DriverError):
    """Allocate failed: the pod is rejected for good (phase Failed), never retried."""

    def __init__(self, event_message: str) -> None:
        super().__init__(event_message)
        self.event_message = event_message
        self.pod_message = f"Pod was rejected: {event_message}"


@dataclass(frozen=True)
class ContainerRequest:
    """One container's demand for the resource; kubelet handles init containers first."""

    name: str
    count: int
    init: bool = False


@dataclass
class PluginEndpoint:
    """What kubelet keeps about one registered resource."""

    resource_name: str
    endpoint: str
    options: pb2.DevicePluginOptions
    channel: grpc.aio.Channel
    stub: pb2_grpc.DevicePluginStub
    devices: dict[str, pb2.Device] = field(default_factory=dict)
    updates: int = 0
    stream_open: bool = False
    watch_task: asyncio.Task[None] | None = None


@dataclass
class PodAdmission:
    """The devices and Allocate answers of an admitted pod, per container."""

    uid: str
    devices: dict[str, list[str]]
    responses: dict[str, pb2.ContainerAllocateResponse]


class KubeletDevicePlugin:
    """Drives device plugins the way kubelet's device manager does."""

    def __init__(self, directory: Path, call_timeout: float | None = None) -> None:
        self.directory = directory
        # Deadline of GetDevicePluginOptions/GetPreferredAllocation/Allocate/PreStart, seconds.
        self.call_timeout = call_timeout
        self.endpoints: dict[str, PluginEndpoint] = {}
        # (rpc, request) of every call made to a plugin, in order.
        self.calls: list[tuple[str, object]] = []
        # (type, reason, message) of the events kubelet would write.
        self.events: list[tuple[str, str, str]] = []
        self.pods: dict[str, PodAdmission] = {}
        self._in_use: dict[str, set[str]] = {}
        self._changed = asyncio.Condition()
        self._server: grpc.aio.Server | None = None

    @property
    def socket_path(self) -> Path:
        return self.directory / KUBELET_SOCKET

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._remove_plugin_sockets()
        server = grpc.aio.server()
        pb2_grpc.add_RegistrationServicer_to_server(_Registration(self), server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        await server.start()
        self._server = server

    async def aclose(self) -> None:
        if self._server is not None:
            await stop_grpc_server(self._server)
            self._server = None
        for endpoint in list(self.endpoints.values()):
            await self._close(endpoint)
        self.endpoints.clear()
        await settle_cancelled_grpc_calls()

    async def __aenter__(self) -> KubeletDevicePlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _remove_plugin_sockets(self) -> None:
        """kubelet empties its device-plugins directory, keeping only its checkpoint."""
        for entry in os.scandir(self.directory):
            if entry.name != CHECKPOINT_FILE and not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def wait_registered(self, resource: str) -> PluginEndpoint:
        await self.wait_for(lambda: resource in self.endpoints)
        return self.endpoints[resource]

    async def wait_update(self, resource: str, after: int = 0) -> list[pb2.Device]:
        """The device list once more than `after` ListAndWatch updates have arrived."""

        def arrived() -> bool:
            endpoint = self.endpoints.get(resource)
            return endpoint is not None and endpoint.updates > after

        await self.wait_for(arrived)
        return list(self.endpoints[resource].devices.values())

    async def wait_stream_closed(self, resource: str) -> None:
        await self.wait_for(lambda: not self.endpoints[resource].stream_open)

    def capacity(self, resource: str) -> int:
        endpoint = self.endpoints.get(resource)
        return len(endpoint.devices) if endpoint else 0

    def allocatable(self, resource: str) -> int:
        endpoint = self.endpoints.get(resource)
        if endpoint is None:
            return 0
        return sum(d.health == HEALTHY for d in endpoint.devices.values())

    async def admit_pod(
        self, pod_uid: str, resource: str, containers: Sequence[ContainerRequest]
    ) -> PodAdmission:
        """Allocate for every container that asks for the resource, init containers first."""
        endpoint = self.endpoints[resource]
        in_use = self._in_use.setdefault(resource, set())
        admission = PodAdmission(pod_uid, {}, {})
        reusable: list[str] = []
        ordered = [c for c in containers if c.init] + [c for c in containers if not c.init]
        try:
            for container in ordered:
                if container.count <= 0:
                    continue
                chosen = reusable[: container.count]
                if len(chosen) < container.count:
                    chosen += await self._choose(
                        endpoint, in_use | set(chosen), container.count - len(chosen)
                    )
                if not container.init:
                    reusable = [d for d in reusable if d not in chosen]
                request = pb2.AllocateRequest(
                    container_requests=[pb2.ContainerAllocateRequest(devices_ids=chosen)]
                )
                try:
                    response = await self._call(endpoint.stub.Allocate, request, "Allocate")
                except grpc.aio.AioRpcError as error:
                    raise self._reject(go_rpc_error(error.code(), error.details() or "")) from error
                if not response.container_responses:
                    raise self._reject("no containers return in allocation response")
                admission.devices[container.name] = chosen
                admission.responses[container.name] = response.container_responses[0]
                in_use.update(chosen)
                if container.init:
                    reusable = list(dict.fromkeys([*reusable, *chosen]))
        except AdmissionRejectedError:
            in_use.difference_update(d for ids in admission.devices.values() for d in ids)
            raise
        self.pods[pod_uid] = admission
        return admission

    def _reject(self, cause: str) -> AdmissionRejectedError:
        message = f"Allocate failed due to {cause}, which is unexpected"
        self.events.append(("Warning", ADMISSION_ERROR_REASON, message))
        return AdmissionRejectedError(message)

    async def start_container(self, pod_uid: str, resource: str, container: str) -> None:
        """PreStartContainer, when the plugin asked for it, right before the container runs."""
        endpoint = self.endpoints[resource]
        devices = self.pods[pod_uid].devices.get(container)
        if devices and endpoint.options.pre_start_required:
            request = pb2.PreStartContainerRequest(devices_ids=devices)
            await self._call(endpoint.stub.PreStartContainer, request, "PreStartContainer")

    def remove_pod(self, pod_uid: str, resource: str) -> None:
        """Frees the pod's devices; the v1beta1 API has no call for this."""
        admission = self.pods.pop(pod_uid, None)
        if admission is not None:
            in_use = self._in_use.get(resource, set())
            in_use.difference_update(d for ids in admission.devices.values() for d in ids)

    async def _choose(self, endpoint: PluginEndpoint, taken: set[str], size: int) -> list[str]:
        free = sorted(
            device_id
            for device_id, device in endpoint.devices.items()
            if device.health == HEALTHY and device_id not in taken
        )
        if not endpoint.options.get_preferred_allocation_available:
            return free[:size]
        request = pb2.PreferredAllocationRequest(
            container_requests=[
                pb2.ContainerPreferredAllocationRequest(
                    available_deviceIDs=free, allocation_size=size
                )
            ]
        )
        response = await self._call(
            endpoint.stub.GetPreferredAllocation, request, "GetPreferredAllocation"
        )
        preferred = [d for d in response.container_responses[0].deviceIDs if d in free]
        return (preferred + [d for d in free if d not in preferred])[:size]

    async def _call(self, method: Callable[..., object], request: object, name: str) -> object:
        self.calls.append((name, request))
        return await method(request, timeout=self.call_timeout)  # type: ignore[misc]

    async def register(self, request: pb2.RegisterRequest) -> str:
        """Validate and connect; an empty string means success, else kubelet's error text."""
        if request.version != API_VERSION:
            return (
                f'requested API version "{request.version}" is not supported by kubelet. '
                f'Supported version is ["{API_VERSION}"]'
            )
        if not is_extended_resource_name(request.resource_name):
            return f'the ResourceName "{request.resource_name}" is invalid'
        channel = grpc.aio.insecure_channel(f"unix://{self.directory / request.endpoint}")
        stub = pb2_grpc.DevicePluginStub(channel)
        try:
            options = await self._call(
                stub.GetDevicePluginOptions, pb2.Empty(), "GetDevicePluginOptions"
            )
        except grpc.aio.AioRpcError as error:
            await channel.close()
            return f"failed to get device plugin options: {go_rpc_error(error.code(), '')}"
        endpoint = PluginEndpoint(
            request.resource_name,
            request.endpoint,
            options,
            channel,
            stub,  # type: ignore[arg-type]
        )
        previous = self.endpoints.get(request.resource_name)
        if previous is not None:
            # Outside the condition's lock: the stream task takes it on its way out.
            await self._close(previous)
        async with self._changed:
            self.endpoints[request.resource_name] = endpoint
            endpoint.watch_task = asyncio.create_task(
                self._list_and_watch(endpoint), name=f"kubelet-dp-{request.resource_name}"
            )
            self._changed.notify_all()
        return ""

    async def _list_and_watch(self, endpoint: PluginEndpoint) -> None:
        stream = endpoint.stub.ListAndWatch(pb2.Empty())
        self.calls.append(("ListAndWatch", pb2.Empty()))
        endpoint.stream_open = True
        try:
            async for update in stream:
                async with self._changed:
                    endpoint.devices = {d.ID: d for d in update.devices}
                    endpoint.updates += 1
                    self._changed.notify_all()
        except grpc.aio.AioRpcError:
            pass
        finally:
            await finish_call(stream)
            async with self._changed:
                endpoint.stream_open = False
                endpoint.devices = {i: _marked_unhealthy(d) for i, d in endpoint.devices.items()}
                self._changed.notify_all()

    async def _close(self, endpoint: PluginEndpoint) -> None:
        if endpoint.watch_task is not None:
            endpoint.watch_task.cancel()
            await asyncio.gather(endpoint.watch_task, return_exceptions=True)
        await endpoint.channel.close()


def _marked_unhealthy(device: pb2.Device) -> pb2.Device:
    """A copy: device lists already handed out keep what the plugin last said."""
    copy = pb2.Device()
    copy.CopyFrom(device)
    copy.health = UNHEALTHY
    return copy


class _Registration(pb2_grpc.RegistrationServicer):
    def __init__(self, kubelet: KubeletDevicePlugin) -> None:
        self.kubelet = kubelet

    async def Register(  # noqa: N802 (gRPC method name)
        self, request: pb2.RegisterRequest, context: grpc.aio.ServicerContext
    ) -> pb2.Empty:
        error = await self.kubelet.register(request)
        if error:
            await context.abort(grpc.StatusCode.UNKNOWN, error)
        return pb2.Empty()
