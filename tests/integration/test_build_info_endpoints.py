"""Every `/metrics` a component serves carries `vgpu_build_info{version,commit,python} 1`,
once: the kubelet plugin's, the controller's, the legacy scheduler's and the monitor's,
each scraped over real HTTP from the code the command runs.

The components that wait for the API server are scraped while they wait (the API server
answers 503; the injected pause is where the test looks): their endpoint serves from the
start, so the release is visible even on a node whose plugin cannot reach the API yet.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from api_outage import WAIT_S, Pauses, free_port, http_get
from controller_cluster import FAST
from legacy_fixtures import OPEN, base_url
from plugin_settings_rig import mock_node_settings
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from controller.legacy.config import LegacySettings
from controller.legacy.server import LegacyServer, ServeSettings
from controller.service import ServiceSettings, run_controller
from dra_driver.kube.rest import KubeClient
from dra_driver.process.build_info import BUILD_INFO
from dra_driver.version import build_info
from kubeletplugin.plugin import PluginSettings
from kubeletplugin.service import serve_kubelet_plugin
from libvgpu.host_gpus import StaticHostBackend
from libvgpu.monitor import MonitorSettings
from libvgpu.monitor_service import MonitorService
from simulator.apiserver import APIServer

ROOT = Path(__file__).resolve().parents[2]
NODE = "node-a"
MOCK_GPUS = "gpus:\n  - {uuid: GPU-a, index: 0, minor: 0, memory: 16Gi}\n"


def build_info_samples(text: str) -> list[tuple[dict[str, str], float]]:
    return [
        (sample.labels, sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == BUILD_INFO
    ]


def assert_carries_the_build(scrape: tuple[int, str]) -> None:
    status, text = scrape
    assert status == 200
    with (ROOT / "pyproject.toml").open("rb") as pyproject:
        version = tomllib.load(pyproject)["project"]["version"]
    info = build_info()
    labels = {"version": version, "commit": info.commit, "python": info.python}
    assert build_info_samples(text) == [(labels, 1.0)]


@pytest.fixture
def plugin_settings() -> Iterator[PluginSettings]:
    # unix socket paths must stay short: a short temp root
    root = Path(tempfile.mkdtemp(prefix="vgpu-", dir="/tmp"))
    try:
        yield mock_node_settings(root, MOCK_GPUS, NODE)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def scrape_then_stop(url: str, stop: asyncio.Event, seen: list[tuple[int, str]]) -> Pauses:
    """The component's first wait for the API server: scrape, then stop it there."""

    async def during(pause: int) -> None:
        seen.append(await http_get(url))
        stop.set()
        await asyncio.Event().wait()

    return Pauses(during)


async def test_the_kubelet_plugins_metrics(plugin_settings: PluginSettings, tmp_path: Path) -> None:
    port, stop, seen = free_port(), asyncio.Event(), []
    pauses = scrape_then_stop(f"http://127.0.0.1:{port}/metrics", stop, seen)
    async with APIServer() as api:
        api.faults.fail("", status=503, times=10**6)
        async with asyncio.timeout(WAIT_S):
            await serve_kubelet_plugin(
                plugin_settings,
                api.write_kubeconfig(tmp_path / "k"),
                stop,
                ("127.0.0.1", port),
                api_wait=pauses.api_wait("kubelet-plugin"),
            )
    (scrape,) = seen
    assert_carries_the_build(scrape)


async def test_the_controllers_metrics(tmp_path: Path) -> None:
    port, stop, seen = free_port(), asyncio.Event(), []
    pauses = scrape_then_stop(f"http://127.0.0.1:{port}/metrics", stop, seen)
    settings = ServiceSettings(controller=FAST, metrics_address=("127.0.0.1", port))
    async with APIServer() as api:
        api.faults.fail("", status=503, times=10**6)
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "k"))
        try:
            async with asyncio.timeout(WAIT_S):
                await run_controller(client, settings, stop, api_wait=pauses.api_wait("controller"))
        finally:
            await client.aclose()
    (scrape,) = seen
    assert_carries_the_build(scrape)


async def test_the_legacy_schedulers_metrics(tmp_path: Path) -> None:
    seen: list[tuple[int, str]] = []
    async with APIServer() as api:
        api.faults.fail("", status=503, times=10**6)
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "k"))

        async def scrape_then_recover(pause: int) -> None:
            seen.append(await http_get(f"{base_url(scheduler)}/metrics"))
            api.faults.reset()

        scheduler = LegacyServer(
            client,
            replace(LegacySettings(), caller_auth=OPEN),
            ServeSettings(port=0),
            api_wait=Pauses(scrape_then_recover).api_wait("legacy-scheduler"),
        )
        try:
            async with asyncio.timeout(WAIT_S):
                await scheduler.start()
            seen.append(await http_get(f"{base_url(scheduler)}/metrics"))
        finally:
            await scheduler.aclose()
            await client.aclose()
    waiting, serving = seen
    assert_carries_the_build(waiting)
    assert_carries_the_build(serving)


async def test_the_monitors_metrics(tmp_path: Path) -> None:
    settings = MonitorSettings(
        host="127.0.0.1", port=0, cache_root=str(tmp_path / "vgpu"), node_name=NODE
    )
    async with APIServer() as api:
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "k"))
        try:
            async with MonitorService(
                settings, client, StaticHostBackend(), CollectorRegistry()
            ) as service:
                scrape = await http_get(f"http://127.0.0.1:{service.port}/metrics")
        finally:
            await client.aclose()
    assert_carries_the_build(scrape)
