"""KubeletDRA against a tiny DRA plugin over real unix sockets, replaying captured traffic."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from wire_fixtures import load_fixture

from api.generated import dra_health_v1alpha1_pb2 as health_pb2
from api.generated import dra_health_v1alpha1_pb2_grpc as health_grpc
from api.generated import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from api.generated import pluginregistration_pb2 as registration_pb2
from api.generated import pluginregistration_pb2_grpc as registration_grpc
from dra_driver.process.grpc_tasks import stop_grpc_server
from simulator.standins.kubelet_dra import (
    ClaimRef,
    KubeletDRA,
    KubeletDRASettings,
    PluginCallError,
    PluginNotRegisteredError,
)

DRIVER = "probe.example.com"
NODE = "node-k1"
CLAIM = ClaimRef("dra-probe", "714e3fe9-6fa9-4062-8385-485ff3b0910c", "probe-pod-gpu-kzfb5")


def fixture(name: str) -> Any:
    return load_fixture(f"dra-kubelet-plugin/{name}")


def as_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


class ProbePlugin:
    """The plugin side, answering with the probe's captured responses unless told otherwise."""

    def __init__(self, root: Path, versions: list[str], plugin_type: str = "DRAPlugin") -> None:
        self.reg_socket = root / "plugins_registry" / f"{DRIVER}-reg.sock"
        self.dra_socket = root / "plugins" / DRIVER / "dra.sock"
        self.versions = versions
        self.plugin_type = plugin_type
        self.with_health = True
        self.prepare_answer: dict[str, Any] = fixture("node-prepare-resources.response.json")
        self.prepare_abort: grpc.StatusCode | None = None
        self.prepare_hangs = False
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.health = health_pb2.NodeWatchResourcesResponse(
            devices=[
                health_pb2.DeviceHealth(
                    device=health_pb2.DeviceIdentifier(pool_name=NODE, device_name="dev0"),
                    health=health_pb2.HEALTHY,
                    last_updated_time=1_796_000_000,
                )
            ]
        )
        self._release = asyncio.Event()
        self._server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.reg_socket.parent.mkdir(parents=True, exist_ok=True)
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.aio.server()
        registration_grpc.add_RegistrationServicer_to_server(self._Registration(self), server)
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(self._DRA(self, dra_v1_pb2), server)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(
            self._DRA(self, dra_v1beta1_pb2), server
        )
        if self.with_health:
            health_grpc.add_DRAResourceHealthServicer_to_server(self._Health(self), server)
        server.add_insecure_port(f"unix://{self.dra_socket}")
        server.add_insecure_port(f"unix://{self.reg_socket}")
        await server.start()
        self._server = server

    async def stop(self) -> None:
        self._release.set()
        if self._server is not None:
            await stop_grpc_server(self._server)
        self.reg_socket.unlink(missing_ok=True)

    def rpcs(self) -> list[str]:
        return [name for name, _ in self.calls]

    class _Registration(registration_grpc.RegistrationServicer):
        def __init__(self, plugin: ProbePlugin) -> None:
            self.plugin = plugin

        async def GetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
            self.plugin.calls.append(("GetInfo", as_dict(request)))
            return registration_pb2.PluginInfo(
                type=self.plugin.plugin_type,
                name=DRIVER,
                endpoint=str(self.plugin.dra_socket),
                supported_versions=self.plugin.versions,
            )

        async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
            self.plugin.calls.append(("NotifyRegistrationStatus", as_dict(request)))
            return registration_pb2.RegistrationStatusResponse()

    class _DRA:
        def __init__(self, plugin: ProbePlugin, pb2: Any) -> None:
            self.plugin = plugin
            self.pb2 = pb2
            self.version = pb2.DESCRIPTOR.package.rsplit(".", 1)[-1]

        async def NodePrepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
            self.plugin.calls.append((f"{self.version}.NodePrepareResources", as_dict(request)))
            if self.plugin.prepare_hangs:
                await self.plugin._release.wait()
            if self.plugin.prepare_abort is not None:
                await context.abort(self.plugin.prepare_abort, "probe: injected rpc failure")
            return json_format.ParseDict(
                self.plugin.prepare_answer, self.pb2.NodePrepareResourcesResponse()
            )

        async def NodeUnprepareResources(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
            self.plugin.calls.append((f"{self.version}.NodeUnprepareResources", as_dict(request)))
            return json_format.ParseDict(
                fixture("node-unprepare-resources.response.json"),
                self.pb2.NodeUnprepareResourcesResponse(),
            )

    class _Health(health_grpc.DRAResourceHealthServicer):
        def __init__(self, plugin: ProbePlugin) -> None:
            self.plugin = plugin

        async def NodeWatchResources(self, request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: N802 (gRPC method name)
            self.plugin.calls.append(("NodeWatchResources", as_dict(request)))
            yield self.plugin.health
            await self.plugin._release.wait()


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kdra", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def settings(root: Path, **overrides: Any) -> KubeletDRASettings:
    values: dict[str, Any] = {
        "node_name": NODE,
        "registry_dir": root / "plugins_registry",
        "health_retry_interval": 0.0,
    }
    values.update(overrides)
    return KubeletDRASettings(**values)


async def started(plugin: ProbePlugin) -> ProbePlugin:
    await plugin.start()
    return plugin


async def test_registration_prepare_unprepare_replay_the_captured_calls(root: Path) -> None:
    plugin = await started(ProbePlugin(root, ["v1beta1.DRAPlugin", "v1.DRAPlugin"]))
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            registered = await kubelet.wait_registered(DRIVER)
            response = await kubelet.prepare(DRIVER, [CLAIM])
            prepared_ids = dict(kubelet.cdi_ids)
            unprepared = await kubelet.unprepare(DRIVER, [CLAIM])
    finally:
        await plugin.stop()

    assert registered.chosen_service == "v1.DRAPlugin"
    assert registered.endpoint == str(plugin.dra_socket)
    assert plugin.calls[:2] == [
        ("GetInfo", fixture("get-info.request.json")),
        ("NotifyRegistrationStatus", fixture("notify-registration-status.request.json")),
    ]
    assert ("v1.NodePrepareResources", fixture("node-prepare-resources.request.json")) in (
        plugin.calls
    )
    assert ("v1.NodeUnprepareResources", fixture("node-unprepare-resources.request.json")) in (
        plugin.calls
    )
    assert as_dict(response) == fixture("node-prepare-resources.response.json")
    assert as_dict(unprepared) == fixture("node-unprepare-resources.response.json")
    assert prepared_ids == {CLAIM.uid: ["probe.example.com/gpu=dev0"]}
    assert kubelet.cdi_ids == {}
    assert kubelet.events == []


async def test_a_v1beta1_only_plugin_is_called_with_v1beta1(root: Path) -> None:
    plugin = await started(ProbePlugin(root, ["v1beta1.DRAPlugin"]))
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            registered = await kubelet.wait_registered(DRIVER)
            response = await kubelet.prepare(DRIVER, [CLAIM])
    finally:
        await plugin.stop()

    assert registered.chosen_service == "v1beta1.DRAPlugin"
    assert type(response) is dra_v1beta1_pb2.NodePrepareResourcesResponse
    assert "v1beta1.NodePrepareResources" in plugin.rpcs()
    assert "v1.NodePrepareResources" not in plugin.rpcs()


@pytest.mark.parametrize(
    ("plugin_type", "versions", "error_part"),
    [
        ("DRAPlugin", ["v1alpha3.Node"], "none of the supported gRPC services"),
        ("DRAPlugin", [], "empty list of supported gRPC services"),
        ("CSIPlugin", ["1.0.0"], "no handler registered for plugin type: CSIPlugin"),
    ],
)
async def test_unsupported_plugins_are_told_and_not_registered(
    root: Path, plugin_type: str, versions: list[str], error_part: str
) -> None:
    plugin = await started(ProbePlugin(root, versions, plugin_type))
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            rejections = await kubelet.wait_rejected()
            with pytest.raises(PluginNotRegisteredError, match=f"DRA driver {DRIVER} is not"):
                await kubelet.prepare(DRIVER, [CLAIM])
    finally:
        await plugin.stop()

    status = dict(plugin.calls)["NotifyRegistrationStatus"]
    assert status.get("plugin_registered", False) is False
    assert error_part in status["error"]
    assert rejections[0].error == status["error"]
    assert DRIVER not in kubelet.plugins


async def test_a_per_claim_prepare_error_becomes_the_kubelet_event(root: Path) -> None:
    plugin = ProbePlugin(root, ["v1.DRAPlugin"])
    plugin.prepare_answer = fixture("node-prepare-resources.error-response.json")
    claim = CLAIM._replace(uid="ac8fa857-8784-449e-ac5f-e7cd87425bb8")
    await plugin.start()
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            await kubelet.wait_registered(DRIVER)
            response = await kubelet.prepare(DRIVER, [claim])
    finally:
        await plugin.stop()

    assert response.claims[claim.uid].error == "probe: injected prepare failure"
    assert kubelet.events == [
        (
            "FailedPrepareDynamicResources",
            f"NodePrepareResources failed for ResourceClaim {claim.name}: "
            "probe: injected prepare failure",
        )
    ]
    assert kubelet.cdi_ids == {}


async def test_an_rpc_error_fails_the_whole_call(root: Path) -> None:
    plugin = ProbePlugin(root, ["v1.DRAPlugin"])
    plugin.prepare_abort = grpc.StatusCode.INTERNAL
    await plugin.start()
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            await kubelet.wait_registered(DRIVER)
            with pytest.raises(PluginCallError) as raised:
                await kubelet.prepare(DRIVER, [CLAIM])
    finally:
        await plugin.stop()

    assert raised.value.code is grpc.StatusCode.INTERNAL
    assert "probe: injected rpc failure" in str(raised.value)
    assert kubelet.cdi_ids == {}


async def test_the_call_deadline_is_applied(root: Path) -> None:
    plugin = ProbePlugin(root, ["v1.DRAPlugin"])
    plugin.prepare_hangs = True
    await plugin.start()
    try:
        async with KubeletDRA(settings(root, call_timeout=0.2), api_client=None) as kubelet:
            await kubelet.wait_registered(DRIVER)
            with pytest.raises(PluginCallError) as raised:
                await kubelet.prepare(DRIVER, [CLAIM])
    finally:
        await plugin.stop()

    assert raised.value.code is grpc.StatusCode.DEADLINE_EXCEEDED


async def test_health_stream_is_opened_even_when_not_advertised(root: Path) -> None:
    plugin = await started(ProbePlugin(root, ["v1.DRAPlugin"]))
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            await kubelet.wait_registered(DRIVER)
            update = await kubelet.wait_health(DRIVER)
    finally:
        await plugin.stop()

    assert update == plugin.health
    assert plugin.rpcs()[:3] == ["GetInfo", "NotifyRegistrationStatus", "NodeWatchResources"]


async def test_an_unimplemented_health_service_is_retried(root: Path) -> None:
    plugin = ProbePlugin(root, ["v1.DRAPlugin"])
    plugin.with_health = False
    await plugin.start()
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            await kubelet.wait_registered(DRIVER)
            errors = await kubelet.wait_health_errors(DRIVER, 2)
    finally:
        await plugin.stop()

    assert errors[:2] == [grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNIMPLEMENTED]


async def test_slices_are_wiped_at_start_and_after_the_plugin_leaves(root: Path) -> None:
    plugin = await started(ProbePlugin(root, ["v1.DRAPlugin"]))
    async with KubeletDRA(settings(root, slice_wipe_delay=0.0), api_client=None) as kubelet:
        await kubelet.wait_registered(DRIVER)
        at_start = list(kubelet.slice_wipes)
        await plugin.stop()
        kubelet.rescan()
        await kubelet.wait_deregistered(DRIVER)
        await kubelet.wait_slice_wipe(f"spec.nodeName={NODE},spec.driver={DRIVER}")

    assert at_start == [f"spec.nodeName={NODE}"]
    assert kubelet.slice_wipes == [
        f"spec.nodeName={NODE}",
        f"spec.nodeName={NODE},spec.driver={DRIVER}",
    ]


async def test_registering_again_within_the_delay_cancels_the_wipe(root: Path) -> None:
    plugin = await started(ProbePlugin(root, ["v1.DRAPlugin"]))
    async with KubeletDRA(settings(root, slice_wipe_delay=3600.0), api_client=None) as kubelet:
        await kubelet.wait_registered(DRIVER)
        await plugin.stop()
        kubelet.rescan()
        await kubelet.wait_deregistered(DRIVER)
        pending_after_leave = kubelet.wipe_pending(DRIVER)
        with pytest.raises(PluginNotRegisteredError):
            await kubelet.prepare(DRIVER, [CLAIM])
        plugin = await started(ProbePlugin(root, ["v1.DRAPlugin"]))
        try:
            await kubelet.wait_registered(DRIVER)
            pending_after_return = kubelet.wipe_pending(DRIVER)
        finally:
            await plugin.stop()

    assert pending_after_leave is True
    assert pending_after_return is False
    assert kubelet.slice_wipes == [f"spec.nodeName={NODE}"]


async def test_a_restarted_kubelet_registers_again_but_does_not_prepare_again(root: Path) -> None:
    plugin = await started(ProbePlugin(root, ["v1.DRAPlugin"]))
    try:
        async with KubeletDRA(settings(root), api_client=None) as first:
            await first.wait_registered(DRIVER)
            await first.prepare(DRIVER, [CLAIM])
        async with KubeletDRA(settings(root), api_client=None) as second:
            await second.wait_registered(DRIVER)
            await second.wait_health(DRIVER)
    finally:
        await plugin.stop()

    assert plugin.rpcs().count("GetInfo") == 2
    assert plugin.rpcs().count("v1.NodePrepareResources") == 1
    assert second.slice_wipes == [f"spec.nodeName={NODE}"]
    assert second.cdi_ids == {}


async def test_a_chmod_of_a_registered_socket_keeps_the_plugin_registered(root: Path) -> None:
    """The kubelet plugin chmods its socket after binding it; a scan that saw the socket
    before the chmod once took the chmod for a new socket and cancelled in-flight calls."""
    plugin = await started(ProbePlugin(root, ["v1.DRAPlugin"]))
    sentinel = ProbePlugin(root, ["v1.DRAPlugin"], plugin_type="Sentinel")
    sentinel.reg_socket = root / "plugins_registry" / "sentinel-reg.sock"
    sentinel.dra_socket = root / "plugins" / "sentinel" / "dra.sock"
    try:
        async with KubeletDRA(settings(root), api_client=None) as kubelet:
            before = await kubelet.wait_registered(DRIVER)
            plugin.reg_socket.chmod(0o600)
            await sentinel.start()
            kubelet.rescan()
            # The scan that rejects the sentinel has also looked at the chmodded socket.
            await kubelet.wait_rejected(1)
            after = kubelet.plugins.get(DRIVER)
            wipe_pending = kubelet.wipe_pending(DRIVER)
    finally:
        await sentinel.stop()
        await plugin.stop()

    assert after is before
    assert not wipe_pending
    assert plugin.rpcs().count("GetInfo") == 1
