"""Watch through `kubernetes.watch.Watch`: ordering, bookmarks, resume, 410 and relist, filters."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config, watch
from kubernetes.client import ApiClient, ApiException

from simulator.apiserver import APIServer, APIServerSettings, run_in_thread

SAFETY_TIMEOUT_S = 30


def _client(server: APIServer, directory: Path) -> ApiClient:
    path = server.write_kubeconfig(directory / "config")
    return config.new_client_from_config(config_file=str(path))


def _take(stream: Iterator[dict], count: int, w: watch.Watch) -> list[tuple[str, str]]:
    seen = []
    for event in stream:
        raw = event["raw_object"]
        seen.append((event["type"], raw["metadata"].get("name", "")))
        if len(seen) == count:
            w.stop()
    return seen


def test_watch_from_version_streams_changes_in_order(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    core.patch_namespaced_config_map("a", ns, {"data": {"k": "v"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    core.delete_namespaced_config_map("a", ns)
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=since,
        timeout_seconds=SAFETY_TIMEOUT_S,
    )
    events = []
    for event in stream:
        events.append(
            (
                event["type"],
                event["object"].metadata.name,
                int(event["object"].metadata.resource_version),
            )
        )
        if len(events) == 4:
            w.stop()
    assert [e[:2] for e in events] == [
        ("ADDED", "a"),
        ("MODIFIED", "a"),
        ("ADDED", "b"),
        ("DELETED", "a"),
    ]
    versions = [e[2] for e in events]
    assert versions == sorted(versions) and len(set(versions)) == 4


def test_watch_without_version_sends_current_state_then_follows(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "old"}})
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_config_map, ns, timeout_seconds=SAFETY_TIMEOUT_S):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            core.create_namespaced_config_map(ns, {"metadata": {"name": "new"}})
        else:
            w.stop()
    assert seen == [("ADDED", "old"), ("ADDED", "new")]


def test_resume_from_bookmark_loses_nothing(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    # A change of the type elsewhere: the bookmark, sent shortly before the timeout (3 s - 2 s
    # margin) as on a real server, lets a resume skip it.
    core.create_namespaced_config_map("default", {"metadata": {"name": f"{ns}-elsewhere"}})
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=since,
        allow_watch_bookmarks=True,
        timeout_seconds=3,
    ):
        assert event["type"] == "BOOKMARK"
        assert set(event["raw_object"]) == {"kind", "apiVersion", "metadata"}
        bookmark = event["raw_object"]["metadata"]["resourceVersion"]
        w.stop()
    assert int(bookmark) >= int(since)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "after-bookmark"}})
    resumed = watch.Watch()
    stream = resumed.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=bookmark,
        timeout_seconds=SAFETY_TIMEOUT_S,
    )
    assert _take(stream, 1, resumed) == [("ADDED", "after-bookmark")]


def test_expired_version_gets_410_and_relist_recovers(tmp_path: Path) -> None:
    with (
        run_in_thread(APIServerSettings(watch_history=3)) as small,
        _client(small, tmp_path) as api,
    ):
        core = client.CoreV1Api(api)
        since = core.list_namespaced_config_map("default").metadata.resource_version
        for index in range(6):
            core.create_namespaced_config_map("default", {"metadata": {"name": f"c{index}"}})
        with pytest.raises(ApiException) as expired:
            for _ in watch.Watch().stream(
                core.list_namespaced_config_map, "default", resource_version=since
            ):
                raise AssertionError("an expired watch must not deliver events")
        assert expired.value.status == 410
        assert "Expired" in expired.value.reason
        listed = core.list_namespaced_config_map("default")
        assert len(listed.items) == 6
        core.create_namespaced_config_map("default", {"metadata": {"name": "after-relist"}})
        w = watch.Watch()
        stream = w.stream(
            core.list_namespaced_config_map,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=SAFETY_TIMEOUT_S,
        )
        assert _take(stream, 1, w) == [("ADDED", "after-relist")]


def test_watch_honours_label_selector_including_leaving_it(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map(ns, {"metadata": {"name": "plain"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "tagged", "labels": {"app": "gpu"}}}
    )
    core.patch_namespaced_config_map("plain", ns, {"metadata": {"labels": {"app": "gpu"}}})
    core.patch_namespaced_config_map("tagged", ns, {"metadata": {"labels": {"app": "cpu"}}})
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=since,
        label_selector="app in (gpu)",
        timeout_seconds=SAFETY_TIMEOUT_S,
    )
    assert _take(stream, 3, w) == [("ADDED", "tagged"), ("ADDED", "plain"), ("DELETED", "tagged")]


def test_watch_one_object_by_field_selector_in_one_namespace(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.create_namespaced_config_map("default", {"metadata": {"name": f"{ns}-elsewhere"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "other"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "target"}})
    core.patch_namespaced_config_map("target", ns, {"data": {"a": "b"}})
    w = watch.Watch()
    stream = w.stream(
        core.list_namespaced_config_map,
        ns,
        resource_version=since,
        field_selector="metadata.name=target",
        timeout_seconds=SAFETY_TIMEOUT_S,
    )
    assert _take(stream, 2, w) == [("ADDED", "target"), ("MODIFIED", "target")]


def test_server_side_timeout_ends_the_stream(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    events = list(
        watch.Watch().stream(
            core.list_namespaced_config_map, ns, resource_version=since, timeout_seconds=1
        )
    )
    assert events == []


def test_dropped_watch_is_resumed_by_the_client(server: APIServer, api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    watches_before = server.faults.count(f"/namespaces/{ns}/configmaps\\?.*watch=true", verb="GET")
    core.create_namespaced_config_map(ns, {"metadata": {"name": "before-drop"}})
    w = watch.Watch()
    seen = []
    for event in w.stream(core.list_namespaced_config_map, ns, resource_version=since):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            assert server.faults.drop_watches(f"/namespaces/{ns}/") == 1
            core.create_namespaced_config_map(ns, {"metadata": {"name": "during-drop"}})
        else:
            w.stop()
    assert seen == [("ADDED", "before-drop"), ("ADDED", "during-drop")]
    assert (
        server.faults.count(f"/namespaces/{ns}/configmaps\\?.*watch=true", verb="GET")
        == watches_before + 2
    )


def test_a_watcher_that_falls_behind_is_closed_not_waited_for(tmp_path: Path) -> None:
    settings = APIServerSettings(watcher_backlog=4)
    with run_in_thread(settings) as small, _client(small, tmp_path) as api:
        core = client.CoreV1Api(api)
        since = core.list_namespaced_config_map("default").metadata.resource_version
        stalled = core.list_namespaced_config_map(
            "default",
            watch=True,
            resource_version=since,
            timeout_seconds=SAFETY_TIMEOUT_S,
            _preload_content=False,
        )
        payload = "x" * 65536
        total = 200
        for index in range(total):
            core.create_namespaced_config_map(
                "default", {"metadata": {"name": f"big-{index}"}, "data": {"p": payload}}
            )
        received = [line for line in stalled.read().splitlines() if line]
        stalled.release_conn()
        assert 0 < len(received) < total
        assert len(core.list_namespaced_config_map("default").items) == total


def test_watch_list_sends_initial_state_then_an_end_bookmark(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "existing"}})
    w = watch.Watch()
    seen = []
    for event in w.stream(
        core.list_namespaced_config_map,
        ns,
        send_initial_events=True,
        allow_watch_bookmarks=True,
        resource_version_match="NotOlderThan",
        timeout_seconds=SAFETY_TIMEOUT_S,
    ):
        raw = event["raw_object"]
        seen.append((event["type"], raw["metadata"].get("name", "")))
        if event["type"] == "BOOKMARK":
            assert raw["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
            w.stop()
    assert seen == [("ADDED", "existing"), ("BOOKMARK", "")]


async def test_async_server_serves_the_client_and_closes_open_watches(tmp_path: Path) -> None:
    async with APIServer() as running:
        with _client(running, tmp_path) as api:
            core = client.CoreV1Api(api)
            names = await asyncio.to_thread(
                lambda: [n.metadata.name for n in core.list_namespace().items]
            )
            assert "default" in names
            since = (
                await asyncio.to_thread(core.list_namespaced_config_map, "default")
            ).metadata.resource_version
            await asyncio.to_thread(
                core.create_namespaced_config_map, "default", {"metadata": {"name": "seen"}}
            )
            stream = await asyncio.to_thread(
                core.list_namespaced_config_map,
                "default",
                watch=True,
                resource_version=since,
                _preload_content=False,
            )
            first = await asyncio.to_thread(stream.readline)
            assert b'"ADDED"' in first
            await running.aclose()
            rest = await asyncio.to_thread(stream.read)
            stream.release_conn()
            assert rest == b""
