"""The legacy scheduler (extender + webhook) started while the API server is away: it
answers its liveness probe, says on /readyz why it is not ready, refuses extender and
webhook calls until its caches have listed, and goes on once the API server answers."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import replace
from pathlib import Path

import pytest
from api_outage import WAIT_S, WAITING_LOG, Pauses, http_get, http_post
from legacy_fixtures import OPEN, base_url

from controller.legacy.config import LegacySettings
from controller.legacy.server import LegacyServer, ServeSettings, serve_legacy
from dra_driver.kube.rest import KubeClient
from dra_driver.process.runtime import finished_before_stop
from simulator.apiserver import APIServer

SETTINGS = replace(LegacySettings(), caller_auth=OPEN)
FILTER_ARGS = {"Pod": {"metadata": {"name": "p", "namespace": "default"}}, "NodeNames": ["a"]}


async def test_started_while_the_api_server_answers_503_it_lives_waits_then_serves(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    seen: dict[str, tuple[int, str]] = {}
    async with APIServer() as api:
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "k"))
        api.faults.fail("", status=503, times=10**6)

        async def look_then_recover(pause: int) -> None:
            if pause == 2:
                base = base_url(scheduler)
                seen["healthz"] = await http_get(f"{base}/healthz")
                seen["readyz"] = await http_get(f"{base}/readyz")
                seen["filter"] = await http_post(f"{base}/filter", FILTER_ARGS)
                seen["webhook"] = await http_post(f"{base}/webhook", {})
                api.faults.reset()

        pauses = Pauses(look_then_recover)
        scheduler = LegacyServer(
            client, SETTINGS, ServeSettings(port=0), api_wait=pauses.api_wait("legacy-scheduler")
        )
        try:
            async with asyncio.timeout(WAIT_S):
                await scheduler.start()
            ready = await http_get(f"{base_url(scheduler)}/readyz")
        finally:
            await scheduler.aclose()
            await client.aclose()
    assert len(pauses.delays) == 2
    assert seen["healthz"] == (200, "ok")
    status, reason = seen["readyz"]
    assert status == 503 and reason.startswith("waiting for the API server: 503")
    for call in ("filter", "webhook"):
        status, body = seen[call]
        assert status == 503 and "waiting for the API server" in body
    assert ready == (200, "ok")
    waits = [r for r in caplog.records if r.getMessage() == WAITING_LOG]
    assert [r.__dict__["component"] for r in waits] == ["legacy-scheduler"] * 2


async def test_a_stop_during_the_wait_ends_the_legacy_scheduler(tmp_path: Path) -> None:
    stop = asyncio.Event()

    async def stopped_while_paused(pause: int) -> None:
        stop.set()
        await asyncio.Event().wait()

    pauses = Pauses(stopped_while_paused)
    async with APIServer() as api:
        api.faults.fail("", status=503, times=10**6)
        kubeconfig = api.write_kubeconfig(tmp_path / "k")
        async with asyncio.timeout(WAIT_S):
            await serve_legacy(
                SETTINGS,
                ServeSettings(port=0),
                kubeconfig,
                stop,
                api_wait=pauses.api_wait("legacy-scheduler"),
            )
    assert len(pauses.delays) == 1


async def test_a_stop_while_the_caches_list_leaves_nothing_running(tmp_path: Path) -> None:
    """The API server answered, then one list keeps failing: stopping then ends the
    start, and no cache task outlives it."""
    stop = asyncio.Event()
    async with APIServer() as api:
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "k"))
        api.faults.fail("^/api/v1/pods", verb="GET", status=503, times=10**6)
        scheduler = LegacyServer(client, SETTINGS, ServeSettings(port=0))
        starting = asyncio.create_task(finished_before_stop(stop, scheduler.start()))
        try:
            async with asyncio.timeout(WAIT_S):
                await scheduler.state.nodes.synced.wait()
            stop.set()
            assert await starting is False
            assert not scheduler.state.ready
        finally:
            await scheduler.aclose()
            await client.aclose()
