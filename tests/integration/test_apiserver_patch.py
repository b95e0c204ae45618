"""Optimistic concurrency and the three patch formats, through the official client."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client import ApiClient, ApiException

from simulator.apiserver import APIServer

MERGE = "application/merge-patch+json"


def _pod(name: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": {"keep": "yes"}, "finalizers": ["a.example.com/f"]},
        "spec": {
            "containers": [
                {"name": "one", "image": "img:1", "env": [{"name": "A", "value": "1"}]},
                {"name": "two", "image": "img:1"},
            ]
        },
    }


def test_two_writers_on_one_version_exactly_one_wins(
    server: APIServer, api: ApiClient, ns: str, tmp_path: Path
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "race"}, "data": {"n": "0"}})
    both_read = threading.Barrier(2)
    outcomes: dict[str, object] = {}

    def writer(label: str) -> None:
        with config.new_client_from_config(config_file=str(path)) as own:
            own_core = client.CoreV1Api(own)
            current = own_core.read_namespaced_config_map("race", ns)
            both_read.wait(timeout=30)
            current.data = {"n": label}
            try:
                own_core.replace_namespaced_config_map("race", ns, current)
                outcomes[label] = "won"
            except ApiException as error:
                outcomes[label] = json.loads(error.body)

    path = server.write_kubeconfig(tmp_path / "config")
    threads = [threading.Thread(target=writer, args=(label,)) for label in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    winners = [label for label, outcome in outcomes.items() if outcome == "won"]
    assert len(winners) == 1
    (loser,) = (outcome for outcome in outcomes.values() if outcome != "won")
    assert loser["code"] == 409 and loser["reason"] == "Conflict"
    assert "the object has been modified" in loser["message"]
    assert core.read_namespaced_config_map("race", ns).data == {"n": winners[0]}


def test_patch_with_stale_resource_version_conflicts(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "cas"}})
    core.patch_namespaced_config_map("cas", ns, {"data": {"x": "1"}})
    stale = {"metadata": {"resourceVersion": created.metadata.resource_version}, "data": {"x": "2"}}
    with pytest.raises(ApiException) as error:
        core.patch_namespaced_config_map("cas", ns, stale, _content_type=MERGE)
    assert error.value.status == 409
    fresh = core.read_namespaced_config_map("cas", ns)
    current = {"metadata": {"resourceVersion": fresh.metadata.resource_version}, "data": {"x": "3"}}
    assert core.patch_namespaced_config_map("cas", ns, current, _content_type=MERGE).data == {
        "x": "3"
    }


def test_strategic_merge_merges_lists_by_key(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("smp"))
    patched = core.patch_namespaced_pod(
        "smp",
        ns,
        {
            "metadata": {
                "labels": {"new": "1"},
                "finalizers": ["b.example.com/f", "a.example.com/f"],
            },
            "spec": {"containers": [{"name": "one", "image": "img:2"}]},
        },
    )
    assert patched.metadata.labels == {"keep": "yes", "new": "1"}
    assert patched.metadata.finalizers == ["b.example.com/f", "a.example.com/f"]
    assert [(c.name, c.image) for c in patched.spec.containers] == [
        ("one", "img:2"),
        ("two", "img:1"),
    ]
    assert [e.name for e in patched.spec.containers[0].env] == ["A"]
    removed = core.patch_namespaced_pod(
        "smp",
        ns,
        {
            "metadata": {
                "labels": {"keep": None},
                "$deleteFromPrimitiveList/finalizers": ["a.example.com/f"],
            }
        },
    )
    assert removed.metadata.labels == {"new": "1"}
    assert removed.metadata.finalizers == ["b.example.com/f"]


def test_strategic_merge_on_status_conditions_and_claim_reservations(
    api: ApiClient, ns: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("cond"))
    core.patch_namespaced_pod_status(
        "cond", ns, {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )
    both = core.patch_namespaced_pod_status(
        "cond",
        ns,
        {
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True"},
                    {"type": "Initialized", "status": "True"},
                ]
            }
        },
    )
    assert [(c.type, c.status) for c in both.status.conditions] == [
        ("Initialized", "True"),
        ("Ready", "True"),
    ]
    resource = client.ResourceV1Api(api)
    claim = {
        "metadata": {"name": "c"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]
            }
        },
    }
    resource.create_namespaced_resource_claim(ns, claim)
    allocation = {
        "devices": {
            "results": [
                {"request": "gpu", "driver": "gpu.example.com", "pool": "node-a", "device": "gpu-0"}
            ]
        }
    }
    resource.patch_namespaced_resource_claim_status("c", ns, {"status": {"allocation": allocation}})
    # Real pods: kube-controller-manager drops reservations of pods that do not exist.
    uids = [core.create_namespaced_pod(ns, _pod(name)).metadata.uid for name in ("u1", "u2")]
    for name, uid in zip(("u1", "u2"), uids, strict=True):
        resource.patch_namespaced_resource_claim_status(
            "c", ns, {"status": {"reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}}
        )
    claim_now = resource.read_namespaced_resource_claim("c", ns)
    assert [r.uid for r in claim_now.status.reserved_for] == [uids[1], uids[0]]
    dropped = resource.patch_namespaced_resource_claim_status(
        "c", ns, {"status": {"reservedFor": [{"uid": uids[0], "$patch": "delete"}]}}
    )
    assert [r.uid for r in dropped.status.reserved_for] == [uids[1]]


def test_merge_patch_replaces_lists_and_null_deletes(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("merge"))
    patched = core.patch_namespaced_pod(
        "merge",
        ns,
        {
            "metadata": {
                "labels": {"keep": None, "b": "2"},
                "finalizers": ["solo.example.com/f"],
            },
        },
        _content_type=MERGE,
    )
    assert patched.metadata.labels == {"b": "2"}
    assert patched.metadata.finalizers == ["solo.example.com/f"]


def test_json_patch_applies_operations_and_honours_test(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "jp"}, "data": {"a": "1"}})
    patched = core.patch_namespaced_config_map(
        "jp",
        ns,
        [
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "add", "path": "/data/b", "value": "2"},
            {"op": "replace", "path": "/data/a", "value": "3"},
            {"op": "copy", "from": "/data/b", "path": "/data/c"},
            {"op": "move", "from": "/data/c", "path": "/data/d"},
            {"op": "add", "path": "/metadata/labels", "value": {"x/y": "z"}},
        ],
    )
    assert patched.data == {"a": "3", "b": "2", "d": "2"}
    assert patched.metadata.labels == {"x/y": "z"}
    removed = core.patch_namespaced_config_map(
        "jp", ns, [{"op": "remove", "path": "/metadata/labels/x~1y"}]
    )
    assert removed.metadata.labels is None
    with pytest.raises(ApiException) as failed:
        core.patch_namespaced_config_map(
            "jp",
            ns,
            [{"op": "test", "path": "/data/a", "value": "1"}, {"op": "remove", "path": "/data/a"}],
        )
    assert failed.value.status == 422
    assert "test failed" in json.loads(failed.value.body)["message"]
    assert core.read_namespaced_config_map("jp", ns).data["a"] == "3"
