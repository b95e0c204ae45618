"""Pods and Bindings: the update rules, status checks, create-time defaults and Binding
refusals of a real kube-apiserver v1.36 (§9)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from api_refusals import refusal, send
from kubernetes import client
from kubernetes.client import ApiClient


@pytest.fixture
def core(api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


def _pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.36"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-a"}],
        },
    }


def test_create_applies_the_admission_defaults(core: client.CoreV1Api, ns: str) -> None:
    created = json.loads(
        core.create_namespaced_pod(ns, _pod("defaults"), _preload_content=False).data
    )
    spec = created["spec"]
    assert spec["serviceAccountName"] == "default"
    assert spec["enableServiceLinks"] is True
    assert spec["priority"] == 0
    assert {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    } in spec["tolerations"]
    assert any(t["key"] == "node.kubernetes.io/unreachable" for t in spec["tolerations"])


def test_an_own_no_execute_toleration_is_kept_instead(core: client.CoreV1Api, ns: str) -> None:
    body = _pod("tolerant")
    body["spec"]["tolerations"] = [{"operator": "Exists", "effect": "NoExecute"}]
    created = core.create_namespaced_pod(ns, body)
    assert [(t.operator, t.effect) for t in created.spec.tolerations] == [("Exists", "NoExecute")]


@pytest.mark.parametrize(
    ("patch", "field", "message"),
    [
        (
            {"spec": {"containers": [{"name": "side", "image": "busybox:1.36"}]}},
            "spec.containers",
            "Forbidden: pod updates may not add or remove containers",
        ),
        (
            {"spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "claim-b"}]}},
            "spec",
            "Forbidden: pod updates may not change fields other than",
        ),
    ],
)
def test_pod_updates_are_limited(
    core: client.CoreV1Api, ns: str, patch: dict[str, Any], field: str, message: str
) -> None:
    core.create_namespaced_pod(ns, _pod("fixed"))
    status = refusal(core.patch_namespaced_pod, "fixed", ns, patch)
    assert status["code"] == 422
    assert f"{field}: {message}" in status["message"]


def test_an_image_change_and_a_replace_without_defaults_are_allowed(
    core: client.CoreV1Api, ns: str
) -> None:
    core.create_namespaced_pod(ns, _pod("mutable"))
    patched = core.patch_namespaced_pod(
        "mutable", ns, {"spec": {"containers": [{"name": "main", "image": "busybox:1.37"}]}}
    )
    assert patched.spec.containers[0].image == "busybox:1.37"
    current = core.read_namespaced_pod("mutable", ns)
    current.spec.enable_service_links = None
    current.metadata.labels = {"touched": "yes"}
    assert core.replace_namespaced_pod("mutable", ns, current).metadata.labels == {"touched": "yes"}


def test_claim_statuses_must_name_a_pod_claim(core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, _pod("claims"))
    status = refusal(
        core.patch_namespaced_pod_status,
        "claims",
        ns,
        {"status": {"resourceClaimStatuses": [{"name": "other", "resourceClaimName": "x"}]}},
    )
    assert status["code"] == 422
    assert "status.resourceClaimStatuses[0].name" in status["message"]
    named = core.patch_namespaced_pod_status(
        "claims",
        ns,
        {"status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "claim-a"}]}},
    )
    assert named.status.resource_claim_statuses[0].resource_claim_name == "claim-a"


def test_binding_checks(api: ApiClient, core: client.CoreV1Api, ns: str) -> None:
    core.create_namespaced_pod(ns, _pod("p1"))
    path = f"/api/v1/namespaces/{ns}/pods/p1/binding"
    target = {"apiVersion": "v1", "kind": "Node", "name": "node-a"}
    code, status = send(api, "POST", path, {"metadata": {"name": "p2"}, "target": target})
    assert (code, status["message"]) == (400, "name in URL does not match name in Binding object")
    code, status = send(api, "POST", path, {"metadata": {"name": "p1"}, "target": {}})
    assert (code, status["message"]) == (500, "target.name: Required value")
    code, _ = send(api, "POST", path, {"metadata": {"name": "p1"}, "target": target})
    assert code == 201
    code, status = send(api, "POST", path, {"metadata": {"name": "p1"}, "target": target})
    assert code == 409
    assert 'pod p1 is already assigned to node "node-a"' in status["message"]


QUANTITY_REFUSAL = (
    'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
    "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def _with_resources(name: str, key: str, resources: dict[str, Any]) -> dict[str, Any]:
    body = _pod(name)
    body["spec"][key] = [{"name": key.lower(), "image": "busybox:1.36", "resources": resources}]
    return body


@pytest.mark.parametrize(
    ("key", "resources"),
    [
        ("containers", {"limits": {"nvidia.com/gpu": "abc"}}),
        ("containers", {"requests": {"nvidia.com/gpumem": "3000MMi"}}),
        ("initContainers", {"limits": {"cpu": "1 core"}}),
    ],
)
def test_a_resource_that_is_not_a_quantity_does_not_decode(
    core: client.CoreV1Api, ns: str, key: str, resources: dict[str, Any]
) -> None:
    status = refusal(core.create_namespaced_pod, ns, _with_resources("bad", key, resources))
    assert (status["code"], status["reason"], status["message"]) == (
        400,
        "BadRequest",
        QUANTITY_REFUSAL,
    )


def test_quantities_as_numbers_and_with_suffixes_are_accepted(
    api: ApiClient, core: client.CoreV1Api, ns: str
) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "3000", "memory": "10Gi", "cpu": "500m"}
    body = _with_resources("good", "containers", {"limits": limits, "requests": {"cpu": None}})
    code, created = send(api, "POST", f"/api/v1/namespaces/{ns}/pods", body)
    assert code == 201
    assert created["spec"]["containers"][0]["resources"]["limits"]["memory"] == "10Gi"
    status = refusal(
        core.patch_namespaced_pod,
        "good",
        ns,
        {"spec": {"overhead": {"nvidia.com/gpu": "one"}}},
    )
    assert (status["code"], status["message"]) == (400, QUANTITY_REFUSAL)
