"""`dra-driver controller` started while the API server is away: it waits (with a bounded
backoff, saying so in its log and on /readyz) and goes on once the server answers, rather
than exit into CrashLoopBackOff; a cluster that lacks what it needs still stops it."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from api_outage import WAIT_S, WAITING_LOG, Pauses, free_port, http_get, until_set
from controller_cluster import FAST

from controller.service import ApiUnsupportedError, ServiceSettings, run_controller
from dra_driver.kube.backoff import BackoffSettings
from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer, APIServerSettings
from simulator.apiserver.registry import RESOURCES, Registry

RESOURCE_V1 = r"^/apis/resource\.k8s\.io/v1$"


def settings(metrics_port: int) -> ServiceSettings:
    return ServiceSettings(controller=FAST, metrics_address=("127.0.0.1", metrics_port))


async def test_a_controller_started_while_the_api_server_answers_503_waits_then_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    port = free_port()
    readyz = f"http://127.0.0.1:{port}/readyz"
    answers: list[tuple[int, str]] = []
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "k"))
        server.faults.fail(RESOURCE_V1, verb="GET", status=503, times=10**6)

        async def look_then_recover(pause: int) -> None:
            answers.append(await http_get(readyz))
            if pause == 3:
                server.faults.reset()

        pauses = Pauses(look_then_recover)
        synced, stop = asyncio.Event(), asyncio.Event()
        running = asyncio.create_task(
            run_controller(
                client,
                settings(port),
                stop,
                after_sync=synced.set,
                api_wait=pauses.api_wait("controller"),
            ),
            name="controller",
        )
        try:
            await until_set(synced, running)
            ready = await http_get(readyz)
        finally:
            stop.set()
            await running
            await client.aclose()
    assert len(answers) == 3
    for status, reason in answers:
        assert status == 503 and reason.startswith("waiting for the API server: 503")
    assert ready == (200, "ok")
    first, ceiling = BackoffSettings().first_delay_s, BackoffSettings().max_delay_s
    assert first <= pauses.delays[0] and all(d <= ceiling for d in pauses.delays)
    assert pauses.delays == sorted(pauses.delays)
    waits = [r for r in caplog.records if r.getMessage() == WAITING_LOG]
    assert [r.__dict__["retry_in_s"] for r in waits] == [round(d, 3) for d in pauses.delays]
    assert all("503" in r.__dict__["error"] for r in waits)
    assert [r.__dict__["attempt"] for r in waits] == [1, 2, 3]


async def test_a_controller_started_with_no_api_server_listening_waits_until_one_appears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with APIServer() as gone:
        kubeconfig = gone.write_kubeconfig(tmp_path / "k")
        api_port = urlsplit(gone.url).port
    assert api_port is not None
    appeared = APIServer(APIServerSettings(port=api_port))

    async def appear(pause: int) -> None:
        if pause == 2:
            await appeared.start()

    pauses = Pauses(appear)
    client = await KubeClient.from_kubeconfig(kubeconfig)
    synced, stop = asyncio.Event(), asyncio.Event()
    running = asyncio.create_task(
        run_controller(
            client,
            settings(free_port()),
            stop,
            after_sync=synced.set,
            api_wait=pauses.api_wait("controller"),
        ),
        name="controller",
    )
    try:
        await until_set(synced, running)
    finally:
        stop.set()
        await running
        await client.aclose()
        await appeared.aclose()
    assert len(pauses.delays) == 2
    waits = [r for r in caplog.records if r.getMessage() == WAITING_LOG]
    assert len(waits) == 2 and all("ConnectionError" in r.__dict__["error"] for r in waits)


async def test_a_stop_during_the_wait_ends_the_controller(tmp_path: Path) -> None:
    stop = asyncio.Event()

    async def stopped_while_paused(pause: int) -> None:
        stop.set()
        await asyncio.Event().wait()

    pauses = Pauses(stopped_while_paused)
    async with APIServer() as server:
        server.faults.fail(RESOURCE_V1, verb="GET", status=503, times=10**6)
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "k"))
        try:
            async with asyncio.timeout(WAIT_S):
                await run_controller(
                    client, settings(free_port()), stop, api_wait=pauses.api_wait("controller")
                )
        finally:
            await client.aclose()
    assert len(pauses.delays) == 1


async def test_a_cluster_without_resource_v1_still_stops_the_controller_at_once(
    tmp_path: Path,
) -> None:
    async def never(pause: int) -> None:
        raise AssertionError("a permanent refusal must not be waited out")

    registry = Registry(tuple(r for r in RESOURCES if r.group != "resource.k8s.io"))
    async with APIServer(registry=registry) as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "k"))
        try:
            with pytest.raises(ApiUnsupportedError, match=r"does not serve resource.k8s.io/v1"):
                await run_controller(
                    client,
                    settings(free_port()),
                    asyncio.Event(),
                    api_wait=Pauses(never).api_wait("controller"),
                )
        finally:
            await client.aclose()
