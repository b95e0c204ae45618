"""Pods and Nodes (issue 9, group 2), as on a real kube-apiserver v1.36 (reference §9):
metadata in a pods/status or nodes/status write is applied (only resourceclaims/status
ignores it), and the eviction subresource answers 201."""

from __future__ import annotations

from typing import Any

from api_refusals import send
from cluster_waits import watch_until
from kubernetes import client
from kubernetes.client import ApiClient

DRIVER = "gpu.example.com"


def _pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}


def test_labels_in_a_pod_status_patch_are_applied(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("labelled"))
    patched = core.patch_namespaced_pod_status(
        "labelled",
        ns,
        {
            "metadata": {"labels": {"phase": "up"}, "annotations": {"a": "b"}},
            "status": {"phase": "Running"},
        },
    )
    assert patched.metadata.labels == {"phase": "up"}
    assert patched.metadata.annotations == {"a": "b"}
    assert core.read_namespaced_pod("labelled", ns).metadata.labels == {"phase": "up"}


def test_labels_in_a_node_status_patch_are_applied(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    core.create_node({"metadata": {"name": "status-labelled"}})
    patched = core.patch_node_status(
        "status-labelled",
        {"metadata": {"labels": {"gpu": "yes"}}, "status": {"capacity": {"cpu": "4"}}},
    )
    assert patched.metadata.labels == {"gpu": "yes"}
    assert patched.status.capacity == {"cpu": "4"}


def test_claim_status_writes_ignore_metadata(api: ApiClient, ns: str) -> None:
    resource = client.ResourceV1Api(api)
    claim = {
        "metadata": {"name": "quiet"},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
        },
    }
    resource.create_namespaced_resource_claim(ns, claim)
    patched = resource.patch_namespaced_resource_claim_status(
        "quiet", ns, {"metadata": {"labels": {"ignored": "yes"}}, "status": {}}
    )
    assert patched.metadata.labels is None


def test_evicting_an_unbound_pod_deletes_it_at_once(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("evicted"))
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "evicted"}}
    code, status = send(api, "POST", f"/api/v1/namespaces/{ns}/pods/evicted/eviction", eviction)
    assert (code, status["kind"], status["status"]) == (201, "Status", "Success")
    code, missing = send(api, "GET", f"/api/v1/namespaces/{ns}/pods/evicted")
    assert (code, missing["reason"]) == (404, "NotFound")
    listed = {r.name: r for r in core.get_api_resources().resources}
    eviction_kind = listed["pods/eviction"]
    assert (eviction_kind.group, eviction_kind.kind, eviction_kind.verbs) == (
        "policy",
        "Eviction",
        ["create"],
    )


def test_evicting_a_bound_pod_terminates_it_gracefully(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("running"))
    binding = {"metadata": {"name": "running"}, "target": {"name": "node-a"}}
    core.create_namespaced_pod_binding("running", ns, binding, _preload_content=False)
    since = core.list_namespaced_pod(ns).metadata.resource_version
    core.create_namespaced_pod_eviction(
        "running", ns, {"metadata": {"name": "running", "namespace": ns}}
    )
    terminating = watch_until(
        core.list_namespaced_pod,
        lambda kind, pod: kind == "MODIFIED" and bool(pod["metadata"].get("deletionTimestamp")),
        ns,
        resource_version=since,
        field_selector="metadata.name=running",
    )
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
