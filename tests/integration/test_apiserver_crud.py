"""The emulator through the official client: discovery, CRUD, metadata, errors, binding, kubectl."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, ApiException


def _pod(name: str, **metadata: object) -> dict[str, object]:
    return {
        "metadata": {"name": name, **metadata},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def _status(error: ApiException) -> dict[str, object]:
    return json.loads(error.body)


def test_discovery_lists_every_served_group_and_version(api: ApiClient) -> None:
    groups = {g.name: g for g in client.ApisApi(api).get_api_versions().groups}
    assert set(groups) == {
        "events.k8s.io",
        "coordination.k8s.io",
        "resource.k8s.io",
        # The kinds deploy/ holds, so its overlays can be applied (test_deploy_overlays).
        "apps",
        "batch",
        "policy",
        "rbac.authorization.k8s.io",
        "admissionregistration.k8s.io",
        # PriorityClass, which the Priority admission plugin resolves (§10).
        "scheduling.k8s.io",
    }
    assert groups["resource.k8s.io"].preferred_version.group_version == "resource.k8s.io/v1"
    assert client.CoreApi(api).get_api_versions().versions == ["v1"]
    version = client.VersionApi(api).get_code()
    assert (version.major, version.minor) == ("1", "36")
    resources = client.ResourceV1Api(api).get_api_resources()
    names = {r.name for r in resources.resources}
    assert {"resourceclaims", "resourceclaims/status", "resourceslices", "deviceclasses"} <= names
    core = {r.name: r for r in client.CoreV1Api(api).get_api_resources().resources}
    assert core["pods/binding"].kind == "Binding"
    assert core["namespaces"].namespaced is False


def test_start_creates_the_system_namespaces(api: ApiClient) -> None:
    names = {n.metadata.name for n in client.CoreV1Api(api).list_namespace().items}
    assert {"default", "kube-system"} <= names


def test_create_stamps_server_metadata(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    first = core.create_namespaced_config_map(
        ns, {"metadata": {"generateName": "cfg-"}, "data": {"a": "1"}}
    )
    second = core.create_namespaced_config_map(ns, {"metadata": {"generateName": "cfg-"}})
    assert first.metadata.name.startswith("cfg-") and len(first.metadata.name) == len("cfg-") + 5
    assert first.metadata.name != second.metadata.name
    assert first.metadata.uid != second.metadata.uid
    assert int(second.metadata.resource_version) > int(first.metadata.resource_version)
    assert first.metadata.creation_timestamp is not None
    listed = core.list_namespaced_config_map(ns)
    assert int(listed.metadata.resource_version) >= int(second.metadata.resource_version)


def test_generation_moves_only_on_spec_changes(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    pod = core.create_namespaced_pod(ns, _pod("gen"))
    assert pod.metadata.generation == 1
    labelled = core.patch_namespaced_pod("gen", ns, {"metadata": {"labels": {"a": "b"}}})
    assert labelled.metadata.generation == 1
    changed = core.patch_namespaced_pod(
        "gen", ns, {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    )
    assert changed.metadata.generation == 2


def test_replace_and_delete_round_trip(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    created = core.create_namespaced_config_map(
        ns, {"metadata": {"name": "cm"}, "data": {"a": "1"}}
    )
    created.data = {"a": "2"}
    replaced = core.replace_namespaced_config_map("cm", ns, created)
    assert replaced.data == {"a": "2"}
    assert replaced.metadata.uid == created.metadata.uid
    assert core.read_namespaced_config_map("cm", ns).data == {"a": "2"}
    core.delete_namespaced_config_map("cm", ns)
    with pytest.raises(ApiException) as missing:
        core.read_namespaced_config_map("cm", ns)
    assert missing.value.status == 404


def test_delete_collection_honours_selectors(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    for name, tier in (("a", "gpu"), ("b", "gpu"), ("c", "cpu")):
        core.create_namespaced_config_map(
            ns, {"metadata": {"name": name, "labels": {"tier": tier}}}
        )
    response = core.delete_collection_namespaced_config_map(
        ns, label_selector="tier=gpu", _preload_content=False
    )
    deleted = json.loads(response.data)
    assert (response.status, deleted["kind"]) == (200, "ConfigMapList")
    assert [c["metadata"]["name"] for c in deleted["items"]] == ["a", "b"]
    assert [c.metadata.name for c in core.list_namespaced_config_map(ns).items] == ["c"]


def test_status_subresource_is_separate_from_the_main_resource(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("sep"))
    via_main = core.patch_namespaced_pod(
        "sep", ns, {"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}}
    )
    assert via_main.status.phase == "Pending"
    assert via_main.metadata.labels == {"x": "y"}
    via_status = core.patch_namespaced_pod_status(
        "sep", ns, {"metadata": {"labels": {"x": "z"}}, "status": {"phase": "Running"}}
    )
    assert via_status.status.phase == "Running"
    assert via_status.metadata.labels == {"x": "z"}
    assert core.read_namespaced_pod_status("sep", ns).status.phase == "Running"


def test_create_in_missing_namespace_is_not_found(api: ApiClient) -> None:
    with pytest.raises(ApiException) as error:
        client.CoreV1Api(api).create_namespaced_config_map("nowhere", {"metadata": {"name": "x"}})
    status = _status(error.value)
    assert status["code"] == 404
    assert status["reason"] == "NotFound"
    assert status["message"] == 'namespaces "nowhere" not found'


def test_error_shapes_are_status_objects(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    with pytest.raises(ApiException) as exists:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "dup"}})
    assert _status(exists.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'configmaps "dup" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "dup", "kind": "configmaps"},
        "code": 409,
    }
    with pytest.raises(ApiException) as missing:
        client.ResourceV1Api(api).read_namespaced_resource_claim("none", ns)
    assert _status(missing.value)["details"] == {
        "name": "none",
        "group": "resource.k8s.io",
        "kind": "resourceclaims",
    }
    assert _status(missing.value)["message"] == 'resourceclaims.resource.k8s.io "none" not found'


def test_invalid_names_are_refused_with_causes(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as bad_cm:
        core.create_namespaced_config_map(ns, {"metadata": {"name": "Not_Valid"}})
    status = _status(bad_cm.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert status["message"].startswith(
        'ConfigMap "Not_Valid" is invalid: metadata.name: Invalid value'
    )
    assert status["details"]["kind"] == "ConfigMap"
    assert status["details"]["causes"][0]["field"] == "metadata.name"
    assert status["details"]["causes"][0]["reason"] == "FieldValueInvalid"
    with pytest.raises(ApiException) as dotted_ns:
        core.create_namespace({"metadata": {"name": "a.b"}})
    assert "RFC 1123 label" in _status(dotted_ns.value)["message"]
    core.create_namespaced_config_map(ns, {"metadata": {"name": "a.b"}})


def test_unsupported_method_and_media_type(api: ApiClient, ns: str) -> None:
    client.CoreV1Api(api).create_namespaced_config_map(ns, {"metadata": {"name": "m"}})
    method = api.call_api(*api.param_serialize("PUT", f"/api/v1/namespaces/{ns}/configmaps"))
    method.read()
    assert method.status == 405
    assert json.loads(method.data)["reason"] == "MethodNotAllowed"
    response = api.call_api(
        *api.param_serialize(
            "PATCH",
            f"/api/v1/namespaces/{ns}/configmaps/m",
            header_params={"Content-Type": "text/plain"},
            body='{"data": {"a": "b"}}',
        )
    )
    response.read()
    assert response.status == 415
    assert json.loads(response.data)["reason"] == "UnsupportedMediaType"


def test_binding_sets_node_once(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("bound"))
    binding = {"metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "node-a"}}
    first = core.create_namespaced_pod_binding("bound", ns, binding, _preload_content=False)
    assert first.status == 201
    pod = core.read_namespaced_pod("bound", ns)
    assert pod.spec.node_name == "node-a"
    assert [c.type for c in pod.status.conditions] == ["PodScheduled"]
    again = {"metadata": {"name": "bound"}, "target": {"kind": "Node", "name": "node-b"}}
    with pytest.raises(ApiException) as second:
        core.create_namespaced_pod_binding("bound", ns, again)
    status = _status(second.value)
    assert status["code"] == 409 and status["reason"] == "Conflict"
    assert 'pod bound is already assigned to node "node-a"' in status["message"]


def test_pod_node_name_cannot_change_through_update(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _pod("fixed"))
    with pytest.raises(ApiException) as error:
        core.patch_namespaced_pod("fixed", ns, {"spec": {"nodeName": "node-z"}})
    assert error.value.status == 422
    assert _status(error.value)["details"]["causes"][0]["field"] == "spec"


def test_events_leases_and_quotas_are_served(api: ApiClient, ns: str) -> None:
    lease = client.CoordinationV1Api(api).create_namespaced_lease(
        ns,
        {
            "metadata": {"name": "leader"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        },
    )
    assert lease.spec.holder_identity == "a"
    event = client.EventsV1Api(api).create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e1"},
            "regarding": {"kind": "Pod", "name": "q", "namespace": ns},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reason": "Prepared",
            "action": "Prepare",
            "reportingController": "x.example.com/c",
            "reportingInstance": "i",
            "type": "Normal",
        },
    )
    assert event.reason == "Prepared"
    core = client.CoreV1Api(api)
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "e2"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
            "reason": "R",
        },
    )
    found = core.list_namespaced_event(ns, field_selector="involvedObject.name=p").items
    assert [e.metadata.name for e in found] == ["e2"]
    quota = core.create_namespaced_resource_quota(
        ns,
        {
            "metadata": {"name": "q"},
            "spec": {"hard": {"pods": "2"}},
            "status": {"used": {"pods": "9"}},
        },
    )
    assert quota.status is None


def test_nodes_keep_status_written_on_create(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    node = {"metadata": {"name": "crud-node"}, "status": {"capacity": {"cpu": "8"}}}
    assert core.create_node(node).status.capacity == {"cpu": "8"}
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    patched = core.patch_node_status("crud-node", ready)
    assert [c.type for c in patched.status.conditions] == ["Ready"]
    assert patched.status.capacity == {"cpu": "8"}
    unschedulable = core.patch_node("crud-node", {"spec": {"unschedulable": True}})
    assert unschedulable.spec.unschedulable is True
    cordoned = core.list_node(field_selector="spec.unschedulable=true").items
    assert "crud-node" in [n.metadata.name for n in cordoned]
    assert all(n.spec.unschedulable for n in cordoned)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
def test_kubectl_uses_the_written_kubeconfig(api: ApiClient, kubeconfig: Path, ns: str) -> None:
    client.CoreV1Api(api).create_namespaced_config_map(
        ns, {"metadata": {"name": "seen-by-kubectl"}}
    )
    result = subprocess.run(
        ["kubectl", "--kubeconfig", str(kubeconfig), "get", "configmaps", "-n", ns, "-o", "name"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["configmap/seen-by-kubectl"]
