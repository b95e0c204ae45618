"""Deletion semantics: finalizers, preconditions, owner-reference GC, namespaces, pod grace."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from cluster_waits import watch_until
from kubernetes import client, watch
from kubernetes.client import ApiClient, ApiException

SAFETY_TIMEOUT_S = 30
FINALIZER = "gpushare.example.com/claim"


@pytest.fixture
def core(api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def _events_until(
    list_fn: Callable[..., Any],
    since: str,
    done: Callable[[list[tuple[str, str]]], bool],
    *args: Any,
    **kwargs: Any,
) -> list[tuple[str, str]]:
    w = watch.Watch()
    seen: list[tuple[str, str]] = []
    for event in w.stream(
        list_fn, *args, resource_version=since, timeout_seconds=SAFETY_TIMEOUT_S, **kwargs
    ):
        seen.append((event["type"], event["raw_object"]["metadata"]["name"]))
        if done(seen):
            w.stop()
    return seen


def _deleted(*names: str) -> Callable[[list[tuple[str, str]]], bool]:
    return lambda seen: {n for t, n in seen if t == "DELETED"} >= set(names)


def _owner_ref(owner: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
    }


def test_finalizers_hold_deletion_until_removed(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "held", "finalizers": [FINALIZER]}})
    pending = core.delete_namespaced_config_map("held", ns)
    assert pending["metadata"]["deletionTimestamp"]
    still = core.read_namespaced_config_map("held", ns)
    assert still.metadata.deletion_timestamp is not None
    with pytest.raises(ApiException) as added:
        core.patch_namespaced_config_map(
            "held", ns, {"metadata": {"finalizers": ["other.example.com/f"]}}
        )
    assert added.value.status == 422
    since = still.metadata.resource_version
    core.patch_namespaced_config_map("held", ns, [{"op": "remove", "path": "/metadata/finalizers"}])
    assert _events_until(core.list_namespaced_config_map, since, _deleted("held"), ns) == [
        ("DELETED", "held")
    ]
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map("held", ns)
    assert gone.value.status == 404


def test_delete_preconditions_conflict(core: client.CoreV1Api, ns: str) -> None:
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "pre"}})
    core.patch_namespaced_config_map("pre", ns, {"data": {"a": "b"}})
    for preconditions in (
        {"resourceVersion": created.metadata.resource_version},
        {"uid": "00000000-0000-0000-0000-000000000000"},
    ):
        with pytest.raises(ApiException) as error:
            core.delete_namespaced_config_map("pre", ns, body={"preconditions": preconditions})
        status = json.loads(error.value.body)
        assert (status["code"], status["reason"]) == (409, "Conflict")
        assert status["message"].startswith('Operation cannot be fulfilled on ConfigMap "pre": ')
        assert "does not match the" in status["message"]
    core.delete_namespaced_config_map(
        "pre", ns, body={"preconditions": {"uid": created.metadata.uid}}
    )


def test_background_gc_deletes_dependents(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    other = core.create_namespaced_config_map(ns, {"metadata": {"name": "other-owner"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "child", "ownerReferences": [_owner_ref(owner)]}}
    )
    core.create_namespaced_config_map(
        ns,
        {
            "metadata": {
                "name": "grandchild",
                "ownerReferences": [
                    {
                        **_owner_ref(owner),
                        "name": "child",
                        "uid": core.read_namespaced_config_map("child", ns).metadata.uid,
                    }
                ],
            }
        },
    )
    core.create_namespaced_config_map(
        ns,
        {"metadata": {"name": "shared", "ownerReferences": [_owner_ref(owner), _owner_ref(other)]}},
    )
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    core.delete_namespaced_config_map("owner", ns)
    seen = _events_until(
        core.list_namespaced_config_map, since, _deleted("owner", "child", "grandchild"), ns
    )
    assert ("DELETED", "child") in seen
    # The collector drops the gone owner from a dependent that has another, in its own time.
    shared = watch_until(
        core.list_namespaced_config_map,
        lambda _, cm: (
            [r["name"] for r in cm["metadata"].get("ownerReferences") or []] == ["other-owner"]
        ),
        ns,
        field_selector="metadata.name=shared",
    )
    assert shared["metadata"]["name"] == "shared"


def test_orphan_policy_keeps_dependents_without_the_reference(
    core: client.CoreV1Api, ns: str
) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "kept", "ownerReferences": [_owner_ref(owner)]}}
    )
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    held = core.delete_namespaced_config_map("owner", ns, propagation_policy="Orphan")
    assert held["metadata"]["finalizers"] == ["orphan"]
    assert held["metadata"]["deletionTimestamp"]
    _events_until(core.list_namespaced_config_map, since, _deleted("owner"), ns)
    kept = core.read_namespaced_config_map("kept", ns)
    assert kept.metadata.owner_references is None


def test_foreground_policy_deletes_dependents_first(core: client.CoreV1Api, ns: str) -> None:
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dep", "ownerReferences": [_owner_ref(owner)]}}
    )
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    waiting = core.delete_namespaced_config_map("owner", ns, propagation_policy="Foreground")
    assert "foregroundDeletion" in waiting["metadata"]["finalizers"]
    seen = _events_until(core.list_namespaced_config_map, since, _deleted("owner"), ns)
    deletions = [name for kind, name in seen if kind == "DELETED"]
    assert deletions == ["dep", "owner"]


def test_deleting_a_namespace_removes_its_content(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_config_map(ns, {"metadata": {"name": "plain"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "held", "finalizers": [FINALIZER]}})
    since = core.list_namespace().metadata.resource_version
    terminating = core.delete_namespace(ns)
    assert terminating["status"]["phase"] == "Terminating"
    with pytest.raises(ApiException) as refused:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "late"}})
    assert refused.value.status == 403
    assert core.read_namespace(ns).status.phase == "Terminating"
    core.patch_namespaced_config_map(
        "held", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": [FINALIZER]}}
    )
    _events_until(core.list_namespace, since, _deleted(ns), field_selector=f"metadata.name={ns}")
    assert core.list_namespaced_config_map(ns).items == []


def test_bound_pods_terminate_gracefully(core: client.CoreV1Api, ns: str) -> None:
    pod = {"metadata": {"name": "runner"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    core.create_namespaced_pod(ns, pod)
    core.create_namespaced_pod_binding(
        "runner",
        ns,
        {"metadata": {"name": "runner"}, "target": {"name": "node-a"}},
        _preload_content=False,
    )
    terminating = core.delete_namespaced_pod("runner", ns)
    assert terminating.metadata.deletion_timestamp is not None
    assert terminating.metadata.deletion_grace_period_seconds == 30
    assert core.read_namespaced_pod("runner", ns).metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("runner", ns, grace_period_seconds=0)
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_pod("runner", ns)
    assert gone.value.status == 404
    core.create_namespaced_pod(ns, {**pod, "metadata": {"name": "unbound"}})
    core.delete_namespaced_pod("unbound", ns)
    assert core.list_namespaced_pod(ns).items == []
