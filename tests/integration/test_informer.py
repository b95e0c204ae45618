"""The informer and raw client against the API emulator over loopback HTTP."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from dra_driver.kube.informer import Informer, InformerSettings
from dra_driver.kube.rest import (
    ConflictError,
    KubeClient,
    NotFoundError,
    TransientApiError,
    object_path,
)
from simulator.apiserver import APIServer, APIServerSettings

CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def configmap(name: str, value: str = "1", labels=None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": labels or {}},
        "data": {"v": value},
    }


@pytest.fixture
async def cluster(tmp_path: Path):
    async with APIServer(APIServerSettings(watch_history=5)) as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield server, client
        finally:
            await client.aclose()


async def run_informer(informer: Informer):
    task = asyncio.create_task(informer.run(), name="informer")
    await informer.synced.wait()
    return task


async def stop(task: asyncio.Task) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_client_errors_are_typed(cluster):
    _, client = cluster
    with pytest.raises(NotFoundError):
        await client.get(object_path(CONFIGMAPS, "missing"))
    created = await client.create(CONFIGMAPS, configmap("a"))
    with pytest.raises(ConflictError):
        await client.create(CONFIGMAPS, configmap("a"))
    stale = {**created, "data": {"v": "2"}}
    await client.replace(object_path(CONFIGMAPS, "a"), stale)
    with pytest.raises(ConflictError):
        await client.replace(object_path(CONFIGMAPS, "a"), stale)


async def test_server_errors_are_transient(cluster):
    server, client = cluster
    server.faults.fail("/configmaps", verb="GET", status=503, times=1)
    with pytest.raises(TransientApiError):
        await client.list(CONFIGMAPS)
    assert (await client.list(CONFIGMAPS))["items"] == []


async def test_informer_follows_adds_updates_deletes_with_selector(cluster):
    _, client = cluster
    events: list[tuple[str, str]] = []
    await client.create(CONFIGMAPS, configmap("before", labels={"app": "x"}))
    informer = Informer(
        client,
        CONFIGMAPS,
        label_selector="app=x",
        handlers=[lambda kind, obj: events.append((kind, obj["metadata"]["name"]))],
    )
    task = await run_informer(informer)
    try:
        assert events == [("ADDED", "before")]
        await client.create(CONFIGMAPS, configmap("after", labels={"app": "x"}))
        await client.create(CONFIGMAPS, configmap("other", labels={"app": "y"}))
        await client.patch(object_path(CONFIGMAPS, "before"), {"data": {"v": "2"}})
        await client.delete(object_path(CONFIGMAPS, "after"))
        await informer.wait_for(lambda store: "default/after" not in store and len(events) == 4)
        assert events == [
            ("ADDED", "before"),
            ("ADDED", "after"),
            ("MODIFIED", "before"),
            ("DELETED", "after"),
        ]
        assert informer.store["default/before"]["data"] == {"v": "2"}
    finally:
        await stop(task)


async def test_informer_relists_after_dropped_watch_and_expired_version(cluster):
    server, client = cluster
    events: list[tuple[str, str]] = []
    informer = Informer(
        client,
        CONFIGMAPS,
        handlers=[lambda kind, obj: events.append((kind, obj["metadata"]["name"]))],
        settings=InformerSettings(retry_delay_s=0.01),
    )
    await client.create(CONFIGMAPS, configmap("keep"))
    await client.create(CONFIGMAPS, configmap("gone"))
    task = await run_informer(informer)
    try:
        server.faults.fail("/configmaps", verb="GET", status=503, times=1)
        server.faults.drop_watches("/configmaps")
        await client.delete(object_path(CONFIGMAPS, "gone"))
        for number in range(8):
            await client.create(CONFIGMAPS, configmap(f"new-{number}"))
        await informer.wait_for(lambda store: len(store) == 9)
        assert "default/gone" not in informer.store
        assert ("DELETED", "gone") in events
    finally:
        await stop(task)


async def test_informer_waits_out_an_api_server_that_answers_503_and_says_when_it_retries(
    cluster, caplog: pytest.LogCaptureFixture
):
    server, client = cluster
    caplog.set_level(logging.WARNING, logger="dra_driver.kube.informer")
    await client.create(CONFIGMAPS, configmap("there"))
    rule = server.faults.fail("/configmaps", verb="GET", status=503, times=6)
    settings = InformerSettings(retry_delay_s=0.01, max_retry_delay_s=0.04, jitter=0)
    informer = Informer(client, CONFIGMAPS, settings=settings)
    task = await run_informer(informer)
    try:
        assert rule.hits == 6 and list(informer.store) == ["default/there"]
    finally:
        await stop(task)
    retries = [r for r in caplog.records if r.getMessage() == "watch interrupted, retrying"]
    assert [r.__dict__["retry_in_s"] for r in retries] == [0.01, 0.02, 0.04, 0.04, 0.04, 0.04]
    assert all("503" in r.__dict__["error"] for r in retries)
