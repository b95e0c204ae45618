"""Label and field selectors and limit/continue pagination, through the official client."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client import ApiClient, ApiException

from simulator.apiserver import APIServerSettings, run_in_thread


@pytest.fixture
def labelled(api: ApiClient, ns: str) -> str:
    core = client.CoreV1Api(api)
    for name, labels in {
        "gpu-a": {"tier": "gpu", "zone": "a"},
        "gpu-b": {"tier": "gpu", "zone": "b"},
        "cpu-a": {"tier": "cpu", "zone": "a"},
        "bare": {},
    }.items():
        core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
    return ns


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("tier=gpu", ["gpu-a", "gpu-b"]),
        ("tier==gpu,zone=a", ["gpu-a"]),
        ("tier!=gpu", ["bare", "cpu-a"]),
        ("zone in (a, c)", ["cpu-a", "gpu-a"]),
        ("tier notin (gpu)", ["bare", "cpu-a"]),
        ("zone", ["cpu-a", "gpu-a", "gpu-b"]),
        ("!zone", ["bare"]),
        ("tier=gpu,zone notin (a)", ["gpu-b"]),
    ],
)
def test_label_selectors(api: ApiClient, labelled: str, selector: str, expected: list[str]) -> None:
    items = (
        client.CoreV1Api(api).list_namespaced_config_map(labelled, label_selector=selector).items
    )
    assert sorted(i.metadata.name for i in items) == expected


def test_malformed_label_selector_is_bad_request(api: ApiClient, ns: str) -> None:
    with pytest.raises(ApiException) as error:
        client.CoreV1Api(api).list_namespaced_config_map(ns, label_selector="a in (b")
    assert error.value.status == 400


def test_field_selectors_on_pods(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for name in ("p1", "p2", "p3"):
        core.create_namespaced_pod(
            ns, {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        )
    core.create_namespaced_pod_binding(
        "p1", ns, {"metadata": {"name": "p1"}, "target": {"name": "node-a"}}, _preload_content=False
    )
    core.patch_namespaced_pod_status("p2", ns, {"status": {"phase": "Running"}})
    on_node = core.list_namespaced_pod(ns, field_selector="spec.nodeName=node-a").items
    assert [p.metadata.name for p in on_node] == ["p1"]
    unscheduled = core.list_namespaced_pod(ns, field_selector="spec.nodeName=").items
    assert sorted(p.metadata.name for p in unscheduled) == ["p2", "p3"]
    pending = core.list_namespaced_pod(
        ns, field_selector="status.phase!=Running,metadata.name!=p3"
    ).items
    assert [p.metadata.name for p in pending] == ["p1"]
    everywhere = core.list_pod_for_all_namespaces(
        field_selector=f"metadata.namespace={ns},metadata.name=p3"
    ).items
    assert [p.metadata.name for p in everywhere] == ["p3"]


def test_unknown_field_selector_is_bad_request(api: ApiClient, ns: str) -> None:
    with pytest.raises(ApiException) as error:
        client.CoreV1Api(api).list_namespaced_pod(ns, field_selector="spec.hostname=x")
    status = json.loads(error.value.body)
    assert (status["code"], status["reason"]) == (400, "BadRequest")
    assert "field label not supported: spec.hostname" in status["message"]


def test_pagination_walks_every_object_once(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    names = [f"cm-{index:02d}" for index in range(7)]
    for name in names:
        core.create_namespaced_config_map(ns, {"metadata": {"name": name}})
    seen: list[str] = []
    token = None
    pages = 0
    while True:
        page = core.list_namespaced_config_map(ns, limit=3, _continue=token)
        pages += 1
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            assert page.metadata.remaining_item_count is None
            break
        assert page.metadata.remaining_item_count == len(names) - len(seen)
    assert seen == names
    assert pages == 3


def test_expired_continue_token_is_gone(tmp_path: Path) -> None:
    with run_in_thread(APIServerSettings(watch_history=2)) as small:
        path = small.write_kubeconfig(tmp_path / "config")
        with config.new_client_from_config(config_file=str(path)) as api:
            core = client.CoreV1Api(api)
            for index in range(3):
                core.create_namespaced_config_map("default", {"metadata": {"name": f"c{index}"}})
            first = core.list_namespaced_config_map("default", limit=1)
            for index in range(3, 6):
                core.create_namespaced_config_map("default", {"metadata": {"name": f"c{index}"}})
            with pytest.raises(ApiException) as error:
                core.list_namespaced_config_map(
                    "default", limit=1, _continue=first.metadata._continue
                )
            status = json.loads(error.value.body)
            assert (status["code"], status["reason"]) == (410, "Expired")
            with pytest.raises(ApiException) as garbage:
                core.list_namespaced_config_map("default", limit=1, _continue="not-a-token")
            assert garbage.value.status == 400
