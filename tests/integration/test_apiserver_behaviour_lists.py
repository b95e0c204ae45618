"""Watch and list (issue 9, group 3), as on a real kube-apiserver v1.36 (reference §9):
bookmarks only shortly before the timeout and only after changes of the type, 410 and 504
for versions out of range, consistent-snapshot pagination and its parameter rules."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest
from api_refusals import refusal, send
from kubernetes import client, config, watch
from kubernetes.client import ApiClient

from simulator.apiserver import APIServerSettings, run_in_thread


def _events(stream: Iterator[dict]) -> list[tuple[str, str]]:
    return [(e["type"], e["raw_object"]["metadata"].get("name", "")) for e in stream]


@pytest.fixture(scope="module")
def short_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiClient]:
    """A server whose watch history holds 3 events per type, so compaction is quick to reach,
    and whose watches send their bookmark 0.5 s before the timeout, so 1 s watches get one."""
    settings = APIServerSettings(watch_history=3, bookmark_before_timeout_s=0.5)
    with run_in_thread(settings) as server:
        path = server.write_kubeconfig(tmp_path_factory.mktemp("short") / "config")
        with config.new_client_from_config(config_file=str(path)) as api_client:
            yield api_client


def test_no_bookmark_at_start_one_shortly_before_the_timeout(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    # The stream is open (headers received) before the change is made: a bookmark sent at
    # the start would come first; the real one comes 2 s before the end, after the change.
    stream = core.list_namespaced_config_map(
        ns,
        watch=True,
        resource_version=since,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
        _preload_content=False,
    )
    core.create_namespaced_config_map(ns, {"metadata": {"name": "changed"}})
    events = [json.loads(line) for line in stream.read().splitlines() if line]
    stream.release_conn()
    seen = [(e["type"], e["object"]["metadata"].get("name", "")) for e in events]
    assert seen == [("ADDED", "changed"), ("BOOKMARK", "")]


def test_a_type_without_changes_gets_no_bookmark(short_history: ApiClient) -> None:
    core = client.CoreV1Api(short_history)
    since = core.list_namespaced_resource_quota("default").metadata.resource_version
    seen = _events(
        watch.Watch().stream(
            core.list_namespaced_resource_quota,
            "default",
            resource_version=since,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
        )
    )
    assert seen == []


def test_a_watch_list_ends_its_initial_events_with_one_bookmark_only(
    short_history: ApiClient,
) -> None:
    core = client.CoreV1Api(short_history)
    core.create_namespace({"metadata": {"name": "watch-list"}})
    core.create_namespaced_config_map("watch-list", {"metadata": {"name": "existing"}})
    seen = _events(
        watch.Watch().stream(
            core.list_namespaced_config_map,
            "watch-list",
            send_initial_events=True,
            allow_watch_bookmarks=True,
            resource_version_match="NotOlderThan",
            timeout_seconds=1,
        )
    )
    assert seen == [("ADDED", "existing"), ("BOOKMARK", "")]


def test_versions_out_of_the_history_get_410_and_future_ones_504(
    short_history: ApiClient,
) -> None:
    core = client.CoreV1Api(short_history)
    first = core.create_namespaced_config_map("default", {"metadata": {"name": "h-0"}})
    for index in range(1, 6):
        core.create_namespaced_config_map("default", {"metadata": {"name": f"h-{index}"}})
    old = first.metadata.resource_version
    response = core.list_namespaced_config_map(
        "default", watch=True, resource_version=old, timeout_seconds=5, _preload_content=False
    )
    [event] = [json.loads(line) for line in response.read().splitlines() if line]
    response.release_conn()
    assert event["type"] == "ERROR" and event["object"]["code"] == 410
    assert re.fullmatch(rf"too old resource version: {old} \(\d+\)", event["object"]["message"])
    status = refusal(
        core.list_namespaced_config_map,
        "default",
        resource_version=old,
        resource_version_match="Exact",
    )
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"] == "The resourceVersion for the provided list is too old."
    current = int(core.list_namespaced_config_map("default").metadata.resource_version)
    status = refusal(
        core.list_namespaced_config_map, "default", resource_version=str(current + 1000)
    )
    assert (status["code"], status["reason"]) == (504, "Timeout")
    assert status["message"].startswith(f"Timeout: Too large resource version: {current + 1000}")
    status = refusal(
        core.list_namespaced_config_map,
        "default",
        watch=True,
        resource_version=str(current + 1000),
        _preload_content=False,
    )
    assert (status["code"], status["reason"]) == (504, "Timeout")


def test_pages_of_a_list_show_one_snapshot(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for name in ("p1", "p2", "p3", "p4"):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": {"walk": ns}}})
    first = core.list_namespaced_config_map(ns, limit=2)
    assert [c.metadata.name for c in first.items] == ["p1", "p2"]
    assert first.metadata.remaining_item_count == 2
    core.create_namespaced_config_map(ns, {"metadata": {"name": "p5", "labels": {"walk": ns}}})
    core.delete_namespaced_config_map("p3", ns)
    second = core.list_namespaced_config_map(ns, limit=2, _continue=first.metadata._continue)
    assert [c.metadata.name for c in second.items] == ["p3", "p4"]
    assert second.metadata.resource_version == first.metadata.resource_version
    assert second.metadata._continue is None
    selected = core.list_namespaced_config_map(ns, limit=1, label_selector=f"walk={ns}")
    assert selected.metadata._continue and selected.metadata.remaining_item_count is None


def test_continue_with_a_resource_version_is_refused(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for name in ("c1", "c2"):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    first = core.list_namespaced_config_map(ns, limit=1)
    status = refusal(
        core.list_namespaced_config_map,
        ns,
        limit=1,
        _continue=first.metadata._continue,
        resource_version=first.metadata.resource_version,
    )
    assert (status["code"], status["reason"]) == (400, "BadRequest")
    assert status["message"] == "specifying resource version is not allowed when using continue"


def test_a_limit_at_resource_version_zero_is_ignored(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for name in ("z1", "z2", "z3"):
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    listed = core.list_namespaced_config_map(ns, limit=1, resource_version="0")
    assert [c.metadata.name for c in listed.items] == ["z1", "z2", "z3"]
    assert listed.metadata._continue is None


def test_slices_select_only_on_node_name_and_driver(api: ApiClient) -> None:
    code, status = send(
        api, "GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.pool.name%3Dx"
    )
    assert (code, status["reason"]) == (400, "BadRequest")
    assert status["message"] == (
        "field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: spec.pool.name"
    )
    code, listed = send(
        api, "GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.driver%3Dx"
    )
    assert code == 200 and listed["kind"] == "ResourceSliceList"
