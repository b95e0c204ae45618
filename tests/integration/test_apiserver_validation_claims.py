"""ResourceClaims, templates and DeviceClasses: defaults, canonical forms and refusals of a real
kube-apiserver v1.36 (§9), CEL compiled on write with the evaluator the allocators use."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from api_refusals import refusal, send
from kubernetes import client
from kubernetes.client import ApiClient

DRIVER = "gpushare.example.com"
SHARE = str(uuid.uuid4())


@pytest.fixture
def resource(api: ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api)


def _claim(name: str, **exactly: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER, **exactly}}]
            }
        },
    }


def _allocation(stamp: str = "2026-10-01T00:00:00Z", memory: str = "10Gi") -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": DRIVER,
                    "pool": "node-a",
                    "device": "gpu-0",
                    "shareID": SHARE,
                    "consumedCapacity": {"memory": memory, "cores": "30"},
                }
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
            ]
        },
        "allocationTimestamp": stamp,
    }


def _raw(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(response.data)
    return body


def test_create_answers_an_empty_status_and_defaults_the_request(
    resource: client.ResourceV1Api, ns: str
) -> None:
    body = _claim("defaults", count=0, capacity={"requests": {"memory": "10240Mi"}})
    body["status"] = {"allocation": _allocation()}
    created = _raw(resource.create_namespaced_resource_claim(ns, body, _preload_content=False))
    assert created["status"] == {}
    exactly = created["spec"]["devices"]["requests"][0]["exactly"]
    assert exactly["allocationMode"] == "ExactCount"
    assert exactly["count"] == 1
    assert exactly["capacity"]["requests"] == {"memory": "10Gi"}


def test_status_is_stored_in_canonical_form(resource: client.ResourceV1Api, ns: str) -> None:
    resource.create_namespaced_resource_claim(ns, _claim("canon"))
    # A real pod: kube-controller-manager drops reservations of pods that do not exist.
    body = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    uid = client.CoreV1Api(resource.api_client).create_namespaced_pod(ns, body).metadata.uid
    pod = {"apiGroup": "", "resource": "pods", "name": "p", "uid": uid}
    written = resource.patch_namespaced_resource_claim_status(
        "canon",
        ns,
        {
            "status": {
                "allocation": _allocation("2026-10-01T02:00:00.123456+02:00", "10240Mi"),
                "reservedFor": [pod],
            }
        },
        _preload_content=False,
    )
    status = _raw(written)["status"]
    assert status["allocation"]["allocationTimestamp"] == "2026-10-01T00:00:00Z"
    result = status["allocation"]["devices"]["results"][0]
    assert result["consumedCapacity"] == {"memory": "10Gi", "cores": "30"}
    assert "apiGroup" not in status["reservedFor"][0]

    version = _raw(written)["metadata"]["resourceVersion"]
    again = resource.patch_namespaced_resource_claim_status(
        "canon", ns, {"status": {"allocation": _allocation()}}, _preload_content=False
    )
    assert _raw(again)["metadata"]["resourceVersion"] == version
    moved = refusal(
        resource.patch_namespaced_resource_claim_status,
        "canon",
        ns,
        {"status": {"allocation": _allocation("2026-10-01T00:00:01Z")}},
    )
    assert moved["code"] == 422 and "field is immutable" in moved["message"]
    assert [c["field"] for c in moved["details"]["causes"]] == ["status.allocation"]


def test_an_allocation_timestamp_that_is_not_a_time_is_invalid(api: ApiClient, ns: str) -> None:
    client.ResourceV1Api(api).create_namespaced_resource_claim(ns, _claim("stamp"))
    code, status = send(
        api,
        "PATCH",
        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/stamp/status",
        {"status": {"allocation": _allocation("yesterday")}},
        "application/merge-patch+json",
    )
    assert code == 422
    assert "status.allocation.allocationTimestamp" in status["message"]


def test_device_status_must_name_an_allocated_device(
    resource: client.ResourceV1Api, ns: str
) -> None:
    resource.create_namespaced_resource_claim(ns, _claim("devstatus"))
    resource.patch_namespaced_resource_claim_status(
        "devstatus", ns, {"status": {"allocation": _allocation()}}
    )
    entry = {"driver": DRIVER, "pool": "node-a", "device": "gpu-0"}
    status = refusal(
        resource.patch_namespaced_resource_claim_status,
        "devstatus",
        ns,
        {"status": {"devices": [entry]}},
    )
    assert status["code"] == 422
    assert "status.devices[0]: Invalid value: " in status["message"]
    assert "must be an allocated device in the claim" in status["message"]
    accepted = resource.patch_namespaced_resource_claim_status(
        "devstatus", ns, {"status": {"devices": [{**entry, "shareID": SHARE}]}}
    )
    assert accepted.status.devices[0].share_id == SHARE


def test_reserved_for_holds_at_most_256(resource: client.ResourceV1Api, ns: str) -> None:
    resource.create_namespaced_resource_claim(ns, _claim("crowd"))
    pods = [{"resource": "pods", "name": f"p{i}", "uid": str(uuid.uuid4())} for i in range(257)]
    status = refusal(
        resource.patch_namespaced_resource_claim_status,
        "crowd",
        ns,
        {"status": {"allocation": _allocation(), "reservedFor": pods}},
    )
    assert status["code"] == 422
    assert "status.reservedFor: Too many: 257: must have at most 256 items" in status["message"]


@pytest.mark.parametrize(
    ("expression", "stable"),
    [
        ("device.driver == ", "compilation failed: ERROR: <input>:1:"),
        ("device.nosuchfield == 'a'", "undefined field 'nosuchfield'"),
    ],
)
def test_cel_selectors_are_compiled_on_write(
    resource: client.ResourceV1Api, ns: str, expression: str, stable: str
) -> None:
    selectors = [{"cel": {"expression": expression}}]
    by_class = refusal(
        resource.create_device_class,
        {"metadata": {"name": f"bad-{uuid.uuid4().hex[:6]}"}, "spec": {"selectors": selectors}},
    )
    assert by_class["code"] == 422 and stable in by_class["message"]
    assert by_class["details"]["causes"][0]["field"] == "spec.selectors[0].cel.expression"
    by_claim = refusal(
        resource.create_namespaced_resource_claim, ns, _claim("cel", selectors=selectors)
    )
    assert by_claim["code"] == 422 and stable in by_claim["message"]
    field = by_claim["details"]["causes"][0]["field"]
    assert field == "spec.devices.requests[0].exactly.selectors[0].cel.expression"
    template = {
        "metadata": {"name": "cel"},
        "spec": {"spec": _claim("x", selectors=selectors)["spec"]},
    }
    by_template = refusal(resource.create_namespaced_resource_claim_template, ns, template)
    assert by_template["code"] == 422 and stable in by_template["message"]


def test_a_capacity_request_that_is_not_a_quantity_is_a_bad_request(
    api: ApiClient, ns: str
) -> None:
    code, status = send(
        api,
        "POST",
        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
        _claim("notqty", capacity={"requests": {"memory": "ten gigs"}}),
    )
    assert code == 400
    assert "quantities must match the regular expression" in status["message"]


def test_a_status_field_of_the_wrong_type_is_a_bad_request(api: ApiClient, ns: str) -> None:
    client.ResourceV1Api(api).create_namespaced_resource_claim(ns, _claim("shape"))
    code, status = send(
        api,
        "PATCH",
        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/shape/status",
        {"status": {"allocation": _allocation(), "devices": ["gpu-0"]}},
        "application/merge-patch+json",
    )
    assert code == 400 and "status.devices[0]" in status["message"]
