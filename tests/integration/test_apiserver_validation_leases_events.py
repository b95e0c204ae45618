"""Leases and Events: what leader election and event recorders meet on a real kube-apiserver
v1.36 (§9): conditional lease updates, MicroTime, and the Event validation of both APIs."""

from __future__ import annotations

from typing import Any

import pytest
from api_refusals import send
from kubernetes import client
from kubernetes.client import ApiClient

NOW_MICRO = "2026-11-30T10:00:00.000000Z"


def _leases(ns: str, name: str = "") -> str:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    return f"{path}/{name}" if name else path


def _lease(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, **spec},
    }


def test_a_lease_update_must_be_conditional(api: ApiClient, ns: str) -> None:
    code, created = send(api, "POST", _leases(ns), _lease("leader", renewTime=NOW_MICRO))
    assert code == 201
    code, status = send(api, "PUT", _leases(ns, "leader"), _lease("leader", holderIdentity="b"))
    assert code == 422
    assert (
        "metadata.resourceVersion: Invalid value: 0: must be specified for an update"
        in status["message"]
    )
    body = _lease("leader", holderIdentity="b")
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    code, replaced = send(api, "PUT", _leases(ns, "leader"), body)
    assert code == 200 and replaced["spec"]["holderIdentity"] == "b"


@pytest.mark.parametrize(
    ("stamp", "rest"),
    [("2026-11-30T10:00:00Z", "Z"), ("2026-11-30T10:00:00.123Z", ".123Z")],
)
def test_lease_times_need_six_fractional_digits(
    api: ApiClient, ns: str, stamp: str, rest: str
) -> None:
    code, status = send(api, "POST", _leases(ns), _lease("micro", acquireTime=stamp))
    assert code == 400
    assert f'cannot parse "{rest}" as ".000000"' in status["message"]


def test_lease_times_are_stored_in_utc_microseconds(api: ApiClient, ns: str) -> None:
    code, created = send(
        api, "POST", _leases(ns), _lease("utc", renewTime="2026-11-30T12:00:00.000001+02:00")
    )
    assert code == 201 and created["spec"]["renewTime"] == "2026-11-30T10:00:00.000001Z"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"leaseDurationSeconds": 0}, "spec.leaseDurationSeconds: Invalid value: 0"),
        ({"leaseTransitions": -1}, "spec.leaseTransitions: Invalid value: -1"),
    ],
)
def test_lease_numbers_are_checked(
    api: ApiClient, ns: str, spec: dict[str, Any], message: str
) -> None:
    code, status = send(api, "POST", _leases(ns), _lease("numbers", **spec))
    assert code == 422 and message in status["message"]


def test_a_core_event_must_agree_on_its_namespace(api: ApiClient, ns: str) -> None:
    event = {
        "metadata": {"name": "e-ns"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "reason": "Prepared",
    }
    code, status = send(api, "POST", f"/api/v1/namespaces/{ns}/events", event)
    assert code == 422
    assert (
        'involvedObject.namespace: Invalid value: "": does not match event.namespace'
        in status["message"]
    )
    event["involvedObject"]["namespace"] = ns
    created = client.CoreV1Api(api).create_namespaced_event(ns, event)
    assert created.involved_object.namespace == ns


def _event_v1(ns: str, **fields: Any) -> dict[str, Any]:
    event = {
        "metadata": {"name": "e-v1"},
        "regarding": {"kind": "Pod", "name": "p", "namespace": ns},
        "eventTime": NOW_MICRO,
        "reason": "Prepared",
        "action": "Prepare",
        "reportingController": "gpushare.example.com/plugin",
        "reportingInstance": "node-a",
        "type": "Normal",
        **fields,
    }
    return {k: v for k, v in event.items() if v is not None}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"eventTime": None}, "eventTime: Required value"),
        ({"type": "Fatal"}, "type: Invalid value"),
        ({"note": "x" * 1025}, "can have at most 1024 characters"),
    ],
)
def test_events_v1_are_checked(
    api: ApiClient, ns: str, fields: dict[str, Any], message: str
) -> None:
    path = f"/apis/events.k8s.io/v1/namespaces/{ns}/events"
    code, status = send(api, "POST", path, _event_v1(ns, **fields))
    assert code == 422 and message in status["message"]
    code, _ = send(api, "POST", path, _event_v1(ns, note="x" * 1024))
    assert code == 201
    client.EventsV1Api(api).delete_namespaced_event("e-v1", ns)
