"""KubeletDRA wipes ResourceSlices through the API emulator, as a real kubelet does."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client, config

from api.generated import pluginregistration_pb2 as registration_pb2
from api.generated import pluginregistration_pb2_grpc as registration_grpc
from dra_driver.process.grpc_tasks import stop_grpc_server
from simulator.apiserver import APIServer
from simulator.standins.kubelet_dra import KubeletDRA, KubeletDRASettings

NODE = "node-k1"
DRIVER = "probe.example.com"


class Registration(registration_grpc.RegistrationServicer):
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint

    async def GetInfo(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        return registration_pb2.PluginInfo(
            type="DRAPlugin",
            name=DRIVER,
            endpoint=str(self.endpoint),
            supported_versions=["v1.DRAPlugin"],
        )

    async def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC method name)
        return registration_pb2.RegistrationStatusResponse()


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="kdrai", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def api_client(root: Path) -> AsyncIterator[client.ApiClient]:
    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(root / "kubeconfig")
        api = config.new_client_from_config(config_file=str(kubeconfig))
        yield api
        api.close()


async def create_slice(api: client.ResourceV1Api, node: str, driver: str, name: str) -> None:
    body = client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1ResourceSliceSpec(
            driver=driver,
            node_name=node,
            pool=client.V1ResourcePool(name=node, generation=1, resource_slice_count=1),
            devices=[],
        ),
    )
    await asyncio.to_thread(api.create_resource_slice, body)


async def slice_names(api: client.ResourceV1Api) -> list[str]:
    listed = await asyncio.to_thread(api.list_resource_slice)
    return sorted(item.metadata.name for item in listed.items)


async def test_start_and_deregistration_wipe_the_right_slices(
    root: Path, api_client: client.ApiClient
) -> None:
    resources = client.ResourceV1Api(api_client)
    for node, driver, name in [
        (NODE, DRIVER, "k1-probe"),
        (NODE, "other.example.com", "k1-other"),
        ("node-k2", DRIVER, "k2-probe"),
    ]:
        await create_slice(resources, node, driver, name)
    settings = KubeletDRASettings(
        node_name=NODE,
        registry_dir=root / "plugins_registry",
        slice_wipe_delay=0.0,
        health_retry_interval=3600.0,
    )
    settings.registry_dir.mkdir()
    server = grpc.aio.server()
    registration_grpc.add_RegistrationServicer_to_server(Registration(root / "dra.sock"), server)
    reg_socket = settings.registry_dir / f"{DRIVER}-reg.sock"
    server.add_insecure_port(f"unix://{reg_socket}")

    async with KubeletDRA(settings, api_client) as kubelet:
        after_start = await slice_names(resources)
        await create_slice(resources, NODE, DRIVER, "k1-probe-again")
        await create_slice(resources, NODE, "other.example.com", "k1-other-again")
        await server.start()
        try:
            await kubelet.wait_registered(DRIVER)
        finally:
            await stop_grpc_server(server)
            reg_socket.unlink(missing_ok=True)
        kubelet.rescan()
        await kubelet.wait_slice_wipe(f"spec.nodeName={NODE},spec.driver={DRIVER}")
        after_leave = await slice_names(resources)

    assert after_start == ["k2-probe"]
    assert after_leave == ["k1-other-again", "k2-probe"]
