"""Generic REST behaviour (issue 9, group 4), as on a real kube-apiserver v1.36
(reference §9): delete answers, propagation policies, dryRun, empty maps, strategic-merge
list order, precondition and terminating-namespace refusals, garbage collection of
dangling owners and namespace finalizers."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from api_refusals import refusal, send
from cluster_waits import watch_until
from kubernetes import client
from kubernetes.client import ApiClient


def _cms(ns: str, name: str = "") -> str:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    return f"{path}/{name}" if name else path


def _deleted(name: str) -> Any:
    return lambda kind, obj: kind == "DELETED" and obj["metadata"]["name"] == name


def test_delete_collection_answers_the_deleted_items(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "plain", "labels": {"g": "x"}}})
    held = {"name": "held", "labels": {"g": "x"}, "finalizers": ["example.com/hold"]}
    core.create_namespaced_config_map(ns, {"metadata": held})
    code, deleted = send(api, "DELETE", _cms(ns) + "?labelSelector=g%3Dx")
    assert (code, deleted["kind"]) == (200, "ConfigMapList")
    by_name = {c["metadata"]["name"]: c for c in deleted["items"]}
    assert set(by_name) == {"plain", "held"}
    assert by_name["held"]["metadata"]["deletionTimestamp"]


def test_an_immediate_delete_answers_a_success_status(api: ApiClient, ns: str) -> None:
    created = client.CoreV1Api(api).create_namespaced_config_map(ns, {"metadata": {"name": "d"}})
    code, status = send(api, "DELETE", _cms(ns, "d"))
    assert (code, status["kind"], status["status"]) == (200, "Status", "Success")
    assert status["details"] == {"name": "d", "kind": "configmaps", "uid": created.metadata.uid}


def test_deleting_an_unbound_pod_answers_the_pod_marked_deleted(api: ApiClient, ns: str) -> None:
    pod = {"metadata": {"name": "unbound"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    client.CoreV1Api(api).create_namespaced_pod(ns, pod)
    code, answered = send(api, "DELETE", f"/api/v1/namespaces/{ns}/pods/unbound")
    assert (code, answered["kind"]) == (200, "Pod")
    assert answered["metadata"]["deletionTimestamp"]
    assert answered["metadata"]["deletionGracePeriodSeconds"] == 0
    assert send(api, "GET", f"/api/v1/namespaces/{ns}/pods/unbound")[0] == 404


def test_orphan_keeps_the_owner_until_the_dependents_are_released(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": owner.metadata.uid,
    }
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dep", "ownerReferences": [reference]}}
    )
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    code, answered = send(api, "DELETE", _cms(ns, "owner") + "?propagationPolicy=Orphan")
    assert (code, answered["kind"]) == (200, "ConfigMap")
    assert answered["metadata"]["finalizers"] == ["orphan"]
    watch_until(core.list_namespaced_config_map, _deleted("owner"), ns, resource_version=since)
    assert core.read_namespaced_config_map("dep", ns).metadata.owner_references is None


def test_an_unknown_propagation_policy_is_invalid(api: ApiClient, ns: str) -> None:
    client.CoreV1Api(api).create_namespaced_config_map(ns, {"metadata": {"name": "kept"}})
    code, status = send(api, "DELETE", _cms(ns, "kept") + "?propagationPolicy=Sideways")
    assert (code, status["reason"]) == (422, "Invalid")
    assert 'propagationPolicy: Unsupported value: "Sideways"' in status["message"]
    assert send(api, "GET", _cms(ns, "kept"))[0] == 200


def test_dry_run_answers_but_stores_nothing(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    code, created = send(api, "POST", _cms(ns) + "?dryRun=All", {"metadata": {"name": "dry"}})
    assert (code, created["metadata"]["name"]) == (201, "dry")
    assert send(api, "GET", _cms(ns, "dry"))[0] == 404
    stored = core.create_namespaced_config_map(
        ns, {"metadata": {"name": "wet"}, "data": {"a": "1"}}
    )
    body = {"metadata": {"name": "wet"}, "data": {"a": "2"}}
    code, replaced = send(api, "PUT", _cms(ns, "wet") + "?dryRun=All", body)
    assert (code, replaced["data"]) == (200, {"a": "2"})
    patched = core.patch_namespaced_config_map("wet", ns, {"data": {"a": "3"}}, dry_run="All")
    assert patched.data == {"a": "3"}
    code, _ = send(api, "DELETE", _cms(ns, "wet") + "?dryRun=All")
    assert code == 200
    now = core.read_namespaced_config_map("wet", ns)
    assert now.data == {"a": "1"}
    assert now.metadata.resource_version == stored.metadata.resource_version
    code, status = send(api, "POST", _cms(ns) + "?dryRun=Some", {"metadata": {"name": "dry"}})
    assert (code, status["reason"]) == (422, "Invalid")
    assert "dryRun: Unsupported value" in status["message"]


def test_empty_maps_are_omitted(api: ApiClient, ns: str) -> None:
    body = {"metadata": {"name": "bare", "labels": {}, "annotations": {}}, "data": {}}
    code, created = send(api, "POST", _cms(ns), body)
    assert code == 201
    assert "labels" not in created["metadata"] and "annotations" not in created["metadata"]
    assert "data" not in created


def test_strategic_merge_puts_new_list_items_first(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "fin", "finalizers": ["a.io/a"]}})
    patched = core.patch_namespaced_config_map("fin", ns, {"metadata": {"finalizers": ["b.io/b"]}})
    assert patched.metadata.finalizers == ["b.io/b", "a.io/a"]
    pod = {"metadata": {"name": "cond"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    core.create_namespaced_pod(ns, pod)
    ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    core.patch_namespaced_pod_status("cond", ns, ready)
    scheduled = {"status": {"conditions": [{"type": "PodScheduled", "status": "True"}]}}
    both = core.patch_namespaced_pod_status("cond", ns, scheduled)
    assert [c.type for c in both.status.conditions] == ["PodScheduled", "Ready"]
    core.patch_namespaced_config_map(
        "fin", ns, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a.io/a", "b.io/b"]}}
    )


def test_a_failed_delete_precondition_names_both_versions(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "pre"}})
    current = core.patch_namespaced_config_map("pre", ns, {"data": {"a": "b"}})
    old, new = created.metadata.resource_version, current.metadata.resource_version
    status = refusal(
        core.delete_namespaced_config_map,
        "pre",
        ns,
        body={"preconditions": {"resourceVersion": old}},
    )
    assert (status["code"], status["reason"]) == (409, "Conflict")
    assert status["message"] == (
        f'Operation cannot be fulfilled on ConfigMap "pre": the ResourceVersion in the '
        f"precondition ({old}) does not match the ResourceVersion in record ({new}). "
        "The object might have been modified"
    )


def test_creating_in_a_terminating_namespace_names_the_cause(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "h", "finalizers": ["x.io/h"]}})
    core.delete_namespace(ns)
    status = refusal(core.create_namespaced_config_map, ns, {"metadata": {"name": "late"}})
    assert (status["code"], status["reason"]) == (403, "Forbidden")
    assert [c["reason"] for c in status["details"]["causes"]] == ["NamespaceTerminating"]
    core.patch_namespaced_config_map("h", ns, [{"op": "remove", "path": "/metadata/finalizers"}])


def test_an_object_whose_owner_never_existed_is_collected(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    since = core.list_namespaced_config_map(ns).metadata.resource_version
    ghost = {"apiVersion": "v1", "kind": "ConfigMap", "name": "ghost", "uid": str(uuid.uuid4())}
    core.create_namespaced_config_map(
        ns, {"metadata": {"name": "dangling", "ownerReferences": [ghost]}}
    )
    watch_until(core.list_namespaced_config_map, _deleted("dangling"), ns, resource_version=since)


@pytest.fixture
def finalized_ns(api: ApiClient) -> str:
    name = f"f-{uuid.uuid4().hex[:8]}"
    body: dict[str, Any] = {
        "metadata": {"name": name},
        "spec": {"finalizers": ["example.com/cleanup"]},
    }
    client.CoreV1Api(api).create_namespace(body)
    return name


def test_a_namespace_with_its_own_finalizer_waits_for_finalize(
    api: ApiClient, finalized_ns: str
) -> None:
    core = client.CoreV1Api(api)
    name = finalized_ns
    since = core.list_namespace().metadata.resource_version
    core.delete_namespace(name)
    emptied = watch_until(
        core.list_namespace,
        lambda kind, ns: (
            kind == "MODIFIED"
            and (ns.get("spec") or {}).get("finalizers") == ["example.com/cleanup"]
        ),
        resource_version=since,
        field_selector=f"metadata.name={name}",
    )
    assert emptied["status"]["phase"] == "Terminating"
    code, finalized = send(
        api, "PUT", f"/api/v1/namespaces/{name}/finalize", {"metadata": {"name": name}, "spec": {}}
    )
    assert code == 200 and not (finalized.get("spec") or {}).get("finalizers")
    watch_until(
        core.list_namespace,
        lambda kind, _: kind == "DELETED",
        resource_version=since,
        field_selector=f"metadata.name={name}",
    )


APPLY = "application/apply-patch+yaml"


def _apply(api: ApiClient, ns: str, manager: str, data: str, force: bool = False) -> Any:
    query = f"?fieldManager={manager}" if manager else ""
    if force:
        query += "&force=true"
    config = f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n{data}"
    return send(api, "PATCH", _cms(ns, "applied") + query, config, content_type=APPLY)


def test_server_side_apply_tracks_field_managers(api: ApiClient, ns: str) -> None:
    code, status = _apply(api, ns, "", "  a: '1'\n")
    assert (code, status["reason"]) == (422, "Invalid")
    assert "fieldManager: Required value" in status["message"]
    code, created = _apply(api, ns, "probe", "  a: '1'\n")
    assert (code, created["data"]) == (201, {"a": "1"})
    assert [m["manager"] for m in created["metadata"]["managedFields"]] == ["probe"]
    code, status = _apply(api, ns, "other", "  a: '2'\n")
    assert (code, status["reason"]) == (409, "Conflict")
    assert status["message"] == 'Apply failed with 1 conflict: conflict with "probe": .data.a'
    code, same_value = _apply(api, ns, "other", "  a: '1'\n")
    assert (code, same_value["data"]) == (200, {"a": "1"})
    code, forced = _apply(api, ns, "other", "  a: '2'\n", force=True)
    assert (code, forced["data"]) == (200, {"a": "2"})
    code, probe_again = _apply(api, ns, "probe", "  b: '3'\n")
    assert (code, probe_again["data"]) == (200, {"a": "2", "b": "3"})
    code, dropped = _apply(api, ns, "other", "  c: '4'\n")
    assert (code, dropped["data"]) == (200, {"b": "3", "c": "4"})
