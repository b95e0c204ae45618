"""A kubelet stand-in for the DRA plugin side: the caller a driver cannot run in tests.

It behaves like kubelet v1.36 as observed against a real one (reference
kubernetes-dra.md §3, wire fixtures dra-kubelet-plugin/): registration through
`<registry>/<name>` sockets (GetInfo, then NotifyRegistrationStatus), v1 chosen over
v1beta1, NodePrepareResources / NodeUnprepareResources with a 45 s deadline, the
NodeWatchResources health stream opened on every registered plugin (retried every 5 s
when unimplemented), and the ResourceSlice wipes: all of the node's slices at start,
and a driver's slices 30 s after its registration socket disappears unless it comes
back first. It never replays NodePrepareResources after its own restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import grpc
from kubernetes import client as k8s

from api.generated import dra_health_v1alpha1_pb2 as health_pb2
from api.generated import dra_health_v1alpha1_pb2_grpc as health_grpc
from api.generated import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from api.generated import pluginregistration_pb2 as registration_pb2
from api.generated import pluginregistration_pb2_grpc as registration_grpc
from dra_driver.errors import DriverError
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls

DRA_PLUGIN_TYPE = "DRAPlugin"
# kubelet's preference order, independent of the order the plugin lists them in.
DRA_SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
PREPARE_FAILED_REASON = "FailedPrepareDynamicResources"


class PluginNotRegisteredError(DriverError):
    """kubelet has no registered plugin for the driver (the text kubelet shows)."""

    def __init__(self, driver: str) -> None:
        super().__init__(f"DRA driver {driver} is not registered")
        self.driver = driver


def go_rpc_error(code: grpc.StatusCode, details: str) -> str:
    """The text Go's grpc status error prints, which kubelet embeds in its messages."""
    spelled = {grpc.StatusCode.OK: "OK", grpc.StatusCode.CANCELLED: "Canceled"}
    name = spelled.get(code) or code.name.title().replace("_", "")
    return f"rpc error: code = {name} desc = {details}"


async def finish_call(call: grpc.aio.Call) -> None:
    """Cancel a call and wait for its final status, so grpc's task for it can end."""
    call.cancel()
    with contextlib.suppress(grpc.aio.AioRpcError):
        await asyncio.shield(call.code())


class PluginCallError(DriverError):
    """A DRA call failed at the gRPC level; kubelet ignores the whole response then."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method} failed: {go_rpc_error(code, details)}")
        self.method = method
        self.code = code
        self.details = details


class ClaimRef(NamedTuple):
    """The claim triplet kubelet sends; Unprepare gets nothing more."""

    namespace: str
    uid: str
    name: str


@dataclass(frozen=True)
class KubeletDRASettings:
    """Knobs of the stand-in; defaults are kubelet's."""

    node_name: str
    # Directory watched for registration sockets (kubelet: <root>/plugins_registry).
    registry_dir: Path
    # Deadline of each NodePrepare/NodeUnprepare call, seconds (kubelet: 45).
    call_timeout: float = 45.0
    # Delay between a plugin's socket vanishing and the wipe of its slices, seconds.
    slice_wipe_delay: float = 30.0
    # Wait before reopening a failed or unimplemented health stream, seconds.
    health_retry_interval: float = 5.0
    # How often the registry directory is rescanned, seconds (kubelet uses inotify).
    scan_interval: float = 0.05
    # Deadline of GetInfo / NotifyRegistrationStatus, seconds.
    registration_timeout: float = 10.0


@dataclass
class RegisteredPlugin:
    """What kubelet keeps about one registered DRA plugin."""

    driver: str
    endpoint: str
    chosen_service: str
    socket_path: Path
    channel: grpc.aio.Channel
    health: health_pb2.NodeWatchResourcesResponse | None = None
    # Status code of every health stream that ended (OK when the plugin closed it).
    health_errors: list[grpc.StatusCode] = field(default_factory=list)
    health_task: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class Rejection:
    """A registration kubelet refused, with the error it sent to the plugin."""

    socket_path: Path
    driver: str
    error: str


class KubeletDRA:
    """Drives DRA plugins the way kubelet does; awaitable conditions replace sleeps."""

    def __init__(self, settings: KubeletDRASettings, api_client: k8s.ApiClient | None) -> None:
        self.settings = settings
        self._api = k8s.ResourceV1Api(api_client) if api_client is not None else None
        self.plugins: dict[str, RegisteredPlugin] = {}
        self.rejections: list[Rejection] = []
        # Field selectors of every slice wipe, in order (performed only with an API client).
        self.slice_wipes: list[str] = []
        # Claim UID -> CDI device IDs kubelet would pass to the runtime in CreateContainer.
        self.cdi_ids: dict[str, list[str]] = {}
        # (reason, message) of the events kubelet would write.
        self.events: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str]] = []
        self._sockets: dict[Path, tuple[int, int]] = {}
        self._socket_driver: dict[Path, str] = {}
        self._pending_wipes: dict[str, asyncio.Task[None]] = {}
        self._changed = asyncio.Condition()
        self._rescan = asyncio.Event()
        self._stopping = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._wipe_slices(f"spec.nodeName={self.settings.node_name}")
        self._watcher = asyncio.create_task(self._watch_registry(), name="kubelet-dra-registry")

    async def aclose(self, *, settle: bool = True) -> None:
        """Stop; `settle=False` leaves grpc's call tasks of the closed channels to the
        caller's one `settle_cancelled_grpc_calls`: each settle may collect the whole
        heap, once per stand-in when a caller closes a thousand of them."""
        self._stopping.set()
        if self._watcher is not None:
            await self._watcher
        for task in self._pending_wipes.values():
            task.cancel()
        await asyncio.gather(*self._pending_wipes.values(), return_exceptions=True)
        self._pending_wipes.clear()
        for plugin in list(self.plugins.values()):
            await self._drop(plugin)
        self.plugins.clear()
        if settle:
            await settle_cancelled_grpc_calls()

    async def __aenter__(self) -> KubeletDRA:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def rescan(self) -> None:
        """Look at the registry directory now instead of at the next interval."""
        self._rescan.set()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def wait_registered(self, driver: str) -> RegisteredPlugin:
        await self.wait_for(lambda: driver in self.plugins)
        return self.plugins[driver]

    async def wait_deregistered(self, driver: str) -> None:
        await self.wait_for(lambda: driver not in self.plugins)

    async def wait_rejected(self, count: int = 1) -> list[Rejection]:
        await self.wait_for(lambda: len(self.rejections) >= count)
        return self.rejections

    async def wait_health(
        self,
        driver: str,
        predicate: Callable[[health_pb2.NodeWatchResourcesResponse], bool] = lambda _: True,
    ) -> health_pb2.NodeWatchResourcesResponse:
        def ready() -> bool:
            plugin = self.plugins.get(driver)
            return plugin is not None and plugin.health is not None and predicate(plugin.health)

        await self.wait_for(ready)
        return self.plugins[driver].health  # type: ignore[return-value]

    async def wait_health_errors(self, driver: str, count: int) -> list[grpc.StatusCode]:
        def enough() -> bool:
            plugin = self.plugins.get(driver)
            return plugin is not None and len(plugin.health_errors) >= count

        await self.wait_for(enough)
        return self.plugins[driver].health_errors

    async def wait_slice_wipe(self, field_selector: str) -> None:
        await self.wait_for(lambda: field_selector in self.slice_wipes)

    def wipe_pending(self, driver: str) -> bool:
        return driver in self._pending_wipes

    async def prepare(self, driver: str, claims: Sequence[ClaimRef]) -> Any:
        """NodePrepareResources; returns the plugin's response message as it came."""
        plugin = self._plugin(driver)
        pb2, stub = self._dra_stub(plugin)
        request = pb2.NodePrepareResourcesRequest(claims=[pb2.Claim(**c._asdict()) for c in claims])
        response = await self._call(stub.NodePrepareResources, request, "NodePrepareResources")
        for claim in claims:
            result = response.claims.get(claim.uid)
            if result is None:
                message = f"NodePrepareResources returned no result for ResourceClaim {claim.name}"
                self.events.append((PREPARE_FAILED_REASON, message))
            elif result.error:
                message = (
                    f"NodePrepareResources failed for ResourceClaim {claim.name}: {result.error}"
                )
                self.events.append((PREPARE_FAILED_REASON, message))
            else:
                self.cdi_ids[claim.uid] = [i for d in result.devices for i in d.cdi_device_ids]
        return response

    async def unprepare(self, driver: str, claims: Sequence[ClaimRef]) -> Any:
        """NodeUnprepareResources; returns the plugin's response message as it came."""
        plugin = self._plugin(driver)
        pb2, stub = self._dra_stub(plugin)
        request = pb2.NodeUnprepareResourcesRequest(
            claims=[pb2.Claim(**c._asdict()) for c in claims]
        )
        response = await self._call(stub.NodeUnprepareResources, request, "NodeUnprepareResources")
        for claim in claims:
            result = response.claims.get(claim.uid)
            if result is not None and not result.error:
                self.cdi_ids.pop(claim.uid, None)
        return response

    def _plugin(self, driver: str) -> RegisteredPlugin:
        plugin = self.plugins.get(driver)
        if plugin is None:
            raise PluginNotRegisteredError(driver)
        return plugin

    @staticmethod
    def _dra_stub(plugin: RegisteredPlugin) -> tuple[Any, Any]:
        if plugin.chosen_service == "v1.DRAPlugin":
            return dra_v1_pb2, dra_v1_pb2_grpc.DRAPluginStub(plugin.channel)
        return dra_v1beta1_pb2, dra_v1beta1_pb2_grpc.DRAPluginStub(plugin.channel)

    async def _call(self, method: Any, request: Any, name: str) -> Any:
        self.calls.append((name, type(request).DESCRIPTOR.full_name))
        try:
            return await method(request, timeout=self.settings.call_timeout)
        except grpc.aio.AioRpcError as error:
            raise PluginCallError(name, error.code(), error.details() or "") from error

    async def _watch_registry(self) -> None:
        while not self._stopping.is_set():
            await self._scan()
            self._rescan.clear()
            waiters = [
                asyncio.create_task(self._rescan.wait()),
                asyncio.create_task(self._stopping.wait()),
            ]
            await asyncio.wait(
                waiters, timeout=self.settings.scan_interval, return_when=asyncio.FIRST_COMPLETED
            )
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)

    async def _scan(self) -> None:
        present = dict(self._registration_sockets())
        for path, identity in list(self._sockets.items()):
            if present.get(path) != identity:
                del self._sockets[path]
                await self._socket_removed(path)
        for path, identity in present.items():
            if path not in self._sockets and await self._register(path):
                self._sockets[path] = identity

    def _registration_sockets(self) -> Iterable[tuple[Path, tuple[int, int]]]:
        with contextlib.suppress(FileNotFoundError), os.scandir(self.settings.registry_dir) as it:
            for entry in it:
                if entry.name.startswith("."):
                    continue
                with contextlib.suppress(FileNotFoundError):
                    info = entry.stat(follow_symlinks=False)
                    # mtime, not ctime: a plugin's chmod after bind is no new socket
                    # (kubelet ignores chmod events), a socket made again is.
                    if stat.S_ISSOCK(info.st_mode):
                        yield Path(entry.path), (info.st_ino, info.st_mtime_ns)

    async def _register(self, path: Path) -> bool:
        """Run the registration handshake; False means retry at the next scan."""
        timeout = self.settings.registration_timeout
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            stub = registration_grpc.RegistrationStub(channel)
            try:
                info = await stub.GetInfo(registration_pb2.InfoRequest(), timeout=timeout)
            except grpc.aio.AioRpcError:
                return False
            error = self._validate(path, info)
            status = registration_pb2.RegistrationStatus(plugin_registered=not error, error=error)
            with contextlib.suppress(grpc.aio.AioRpcError):
                await stub.NotifyRegistrationStatus(status, timeout=timeout)
        if error:
            async with self._changed:
                self.rejections.append(Rejection(path, info.name, error))
                self._changed.notify_all()
        else:
            await self._add(path, info)
        return True

    def _validate(self, path: Path, info: registration_pb2.PluginInfo) -> str:
        if info.type != DRA_PLUGIN_TYPE:
            return f"no handler registered for plugin type: {info.type} at socket {path}"
        if not info.supported_versions:
            return "empty list of supported gRPC services (aka supported versions)"
        if not any(service in info.supported_versions for service in DRA_SERVICES):
            return (
                f"none of the supported gRPC services {list(info.supported_versions)} "
                f"is one of the services supported by kubelet {list(DRA_SERVICES)}"
            )
        return ""

    async def _add(self, path: Path, info: registration_pb2.PluginInfo) -> None:
        chosen = next(s for s in DRA_SERVICES if s in info.supported_versions)
        wipe = self._pending_wipes.pop(info.name, None)
        if wipe is not None:
            wipe.cancel()
        previous = self.plugins.get(info.name)
        if previous is not None:
            await self._drop(previous)
        plugin = RegisteredPlugin(
            driver=info.name,
            endpoint=info.endpoint,
            chosen_service=chosen,
            socket_path=path,
            # A fresh subchannel per registration, as kubelet dials anew: grpc's
            # global pool would hand back one still backing off from a vanished socket.
            channel=grpc.aio.insecure_channel(
                f"unix://{info.endpoint}", options=[("grpc.use_local_subchannel_pool", 1)]
            ),
        )
        plugin.health_task = asyncio.create_task(
            self._watch_health(plugin), name=f"kubelet-dra-health-{info.name}"
        )
        async with self._changed:
            self.plugins[info.name] = plugin
            self._socket_driver[path] = info.name
            self._changed.notify_all()

    async def _socket_removed(self, path: Path) -> None:
        driver = self._socket_driver.pop(path, None)
        if driver is None:
            return
        plugin = self.plugins.get(driver)
        if plugin is None or plugin.socket_path != path:
            return
        async with self._changed:
            del self.plugins[driver]
            self._pending_wipes[driver] = asyncio.create_task(
                self._wipe_later(driver), name=f"kubelet-dra-wipe-{driver}"
            )
            self._changed.notify_all()
        # Outside the condition's lock: the health task takes it to record its last status.
        await self._drop(plugin)

    async def _wipe_later(self, driver: str) -> None:
        await asyncio.sleep(self.settings.slice_wipe_delay)
        self._pending_wipes.pop(driver, None)
        await self._wipe_slices(f"spec.nodeName={self.settings.node_name},spec.driver={driver}")

    async def _wipe_slices(self, field_selector: str) -> None:
        if self._api is not None:
            await asyncio.to_thread(
                self._api.delete_collection_resource_slice, field_selector=field_selector
            )
        async with self._changed:
            self.slice_wipes.append(field_selector)
            self._changed.notify_all()

    async def _drop(self, plugin: RegisteredPlugin) -> None:
        if plugin.health_task is not None:
            plugin.health_task.cancel()
            await asyncio.gather(plugin.health_task, return_exceptions=True)
        await plugin.channel.close()

    async def _watch_health(self, plugin: RegisteredPlugin) -> None:
        stub = health_grpc.DRAResourceHealthStub(plugin.channel)
        while True:
            stream = stub.NodeWatchResources(health_pb2.NodeWatchResourcesRequest())
            try:
                async for update in stream:
                    async with self._changed:
                        plugin.health = update
                        self._changed.notify_all()
                code = grpc.StatusCode.OK
            except grpc.aio.AioRpcError as error:
                code = error.code()
            finally:
                await finish_call(stream)
            async with self._changed:
                plugin.health_errors.append(code)
                self._changed.notify_all()
            await asyncio.sleep(self.settings.health_retry_interval)
