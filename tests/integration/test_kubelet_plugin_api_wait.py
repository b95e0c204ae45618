"""`dra-driver kubelet-plugin` started while the API server is away: its sockets serve
(the liveness probe passes, so kubelet does not restart it into CrashLoopBackOff), its
/readyz says what it waits for, and it publishes its slices once the server answers."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from api_outage import WAIT_S, WAITING_LOG, Pauses, free_port, http_get
from plugin_settings_rig import mock_node_settings

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from dra_driver.process.healthcheck import check_sockets
from kubeletplugin.plugin import PluginSettings
from kubeletplugin.publisher import RESOURCE_SLICES
from kubeletplugin.service import serve_kubelet_plugin
from simulator.apiserver import APIServer

NODE = "node-a"
MOCK_GPUS = "gpus:\n  - {uuid: GPU-a, index: 0, minor: 0, memory: 16Gi}\n"


@pytest.fixture
def settings() -> Iterator[PluginSettings]:
    # unix socket paths must stay short: a short temp root
    root = Path(tempfile.mkdtemp(prefix="vgpu-", dir="/tmp"))
    try:
        yield mock_node_settings(root, MOCK_GPUS, NODE)
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def test_started_while_the_api_server_answers_503_it_serves_its_sockets_then_publishes(
    settings: PluginSettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    seen: dict[str, object] = {}
    async with APIServer() as api:
        kubeconfig = api.write_kubeconfig(tmp_path / "k")
        client = await KubeClient.from_kubeconfig(kubeconfig)
        await client.create("/api/v1/nodes", {"metadata": {"name": NODE}})
        slices = Informer(client, RESOURCE_SLICES)
        watching = asyncio.create_task(slices.run(), name="slices")
        await slices.synced.wait()
        api.faults.fail("", status=503, times=10**6)

        async def look_then_recover(pause: int) -> None:
            if pause == 2:
                seen["readyz"] = await http_get(f"http://127.0.0.1:{port}/readyz")
                seen["liveness"] = await check_sockets(
                    [settings.dra_socket, settings.registration_socket]
                )
                api.faults.reset()

        pauses = Pauses(look_then_recover)
        stop = asyncio.Event()
        running = asyncio.create_task(
            serve_kubelet_plugin(
                settings,
                kubeconfig,
                stop,
                ("127.0.0.1", port),
                api_wait=pauses.api_wait("kubelet-plugin"),
            ),
            name="kubelet plugin",
        )
        try:
            async with asyncio.timeout(WAIT_S):
                await slices.wait_for(lambda store: len(store) == 1)
        finally:
            stop.set()
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
            try:
                async with asyncio.timeout(WAIT_S):
                    await running
            finally:
                await client.aclose()
    assert len(pauses.delays) == 2
    status, reason = seen["readyz"]  # type: ignore[misc]
    assert status == 503 and str(reason).startswith("waiting for the API server: 503")
    assert seen["liveness"] == []
    waits = [r for r in caplog.records if r.getMessage() == WAITING_LOG]
    assert [r.__dict__["component"] for r in waits] == ["kubelet-plugin"] * 2
