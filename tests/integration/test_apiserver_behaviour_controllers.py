"""What the controller and leader election rely on (issue 9, group 1), as on a real
kube-apiserver + kube-controller-manager v1.36 (reference §9): Lease PUT rules, one
Event store for both Event APIs, the resourceclaim controller and the not-ready taint.

Controller effects are awaited with bounded watches, never asserted at once."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from api_refusals import send
from cluster_waits import not_ready_tainted, wait_schedulable, watch_until
from kubernetes import client, config
from kubernetes.client import ApiClient

from simulator.apiserver import APIServer
from simulator.standins.dra_scheduler import DRAScheduler

DRIVER = "gpu.example.com"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
STALE = "the object has been modified; please apply your changes to the latest version"


def _lease_path(ns: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}"


def test_put_creates_a_missing_lease_and_refuses_a_stale_one(api: ApiClient, ns: str) -> None:
    body: dict[str, Any] = {
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    code, created = send(api, "PUT", _lease_path(ns, "leader"), body)
    assert code == 201
    stale_version = created["metadata"]["resourceVersion"]
    body["metadata"]["resourceVersion"] = stale_version
    body["spec"]["holderIdentity"] = "b"
    code, renewed = send(api, "PUT", _lease_path(ns, "leader"), body)
    assert code == 200 and renewed["spec"]["holderIdentity"] == "b"
    body["spec"]["holderIdentity"] = "c"
    code, status = send(api, "PUT", _lease_path(ns, "leader"), body)
    assert (code, status["reason"]) == (409, "Conflict")
    assert STALE in status["message"]


def test_both_event_apis_list_each_others_events(api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    events = client.EventsV1Api(api)
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "from-core"},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
            "reason": "Prepared",
            "message": "claim prepared",
            "type": "Normal",
        },
    )
    events.create_namespaced_event(
        ns,
        {
            "metadata": {"name": "from-events"},
            "eventTime": "2026-11-30T10:00:00.000000Z",
            "regarding": {"kind": "Pod", "name": "q", "namespace": ns},
            "reason": "Unprepared",
            "note": "claim released",
            "type": "Normal",
            "action": "Unprepare",
            "reportingController": "gpu.example.com/plugin",
            "reportingInstance": "node-a",
        },
    )
    as_core = {e.metadata.name: e for e in core.list_namespaced_event(ns).items}
    # Read raw: a core Event has no eventTime, which events.k8s.io/v1 shows as null (as the
    # real server does) and the typed client refuses to deserialize.
    code, listed = send(api, "GET", f"/apis/events.k8s.io/v1/namespaces/{ns}/events")
    as_events = {e["metadata"]["name"]: e for e in listed["items"]}
    assert code == 200 and listed["kind"] == "EventList"
    assert set(as_core) == set(as_events) == {"from-core", "from-events"}
    assert as_core["from-events"].involved_object.name == "q"
    assert as_core["from-events"].message == "claim released"
    assert as_events["from-core"]["regarding"]["name"] == "p"
    assert as_events["from-core"]["note"] == "claim prepared"
    assert as_events["from-core"]["apiVersion"] == "events.k8s.io/v1"
    code, by_reason = send(
        api,
        "GET",
        f"/apis/events.k8s.io/v1/namespaces/{ns}/events?fieldSelector=regarding.name%3Dq",
    )
    assert [e["metadata"]["name"] for e in by_reason["items"]] == ["from-events"]
    events.delete_namespaced_event("from-events", ns)
    assert [e.metadata.name for e in core.list_namespaced_event(ns).items] == ["from-core"]


# ---- kube-controller-manager: resourceclaim controller --------------------------------


def _claim(name: str, finalizers: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "finalizers": finalizers},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
        },
    }


ALLOCATION = {
    "devices": {
        "results": [{"request": "gpu", "driver": DRIVER, "pool": "node-a", "device": "gpu-0"}]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    },
    "allocationTimestamp": "2026-11-30T10:00:00Z",
}


def _pod(api: ApiClient, ns: str, name: str) -> Any:
    body = {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i:1"}]}}
    return client.CoreV1Api(api).create_namespaced_pod(ns, body)


def _allocated_claim(
    api: ApiClient, ns: str, name: str, finalizers: list[str], pods: list[Any]
) -> dict[str, Any]:
    resource = client.ResourceV1Api(api)
    resource.create_namespaced_resource_claim(ns, _claim(name, finalizers))
    status: dict[str, Any] = {"allocation": ALLOCATION}
    if pods:
        status["reservedFor"] = [
            {"resource": "pods", "name": p.metadata.name, "uid": p.metadata.uid} for p in pods
        ]
    patched = resource.patch_namespaced_resource_claim_status(name, ns, {"status": status})
    return patched.to_dict()


def _claim_until(api: ApiClient, ns: str, name: str, seen: Any) -> dict[str, Any]:
    return watch_until(
        client.ResourceV1Api(api).list_namespaced_resource_claim,
        seen,
        ns,
        field_selector=f"metadata.name={name}",
    )


def test_stale_reservations_are_dropped_and_the_last_one_deallocates(
    api: ApiClient, ns: str
) -> None:
    core = client.CoreV1Api(api)
    first, second = _pod(api, ns, "first"), _pod(api, ns, "second")
    _allocated_claim(api, ns, "shared", [DELETE_PROTECTION], [first, second])
    core.delete_namespaced_pod("first", ns)
    one_left = _claim_until(
        api, ns, "shared", lambda _, c: len(c["status"].get("reservedFor") or []) == 1
    )
    assert one_left["status"]["reservedFor"][0]["uid"] == second.metadata.uid
    assert one_left["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    core.delete_namespaced_pod("second", ns)
    released = _claim_until(
        api,
        ns,
        "shared",
        lambda _, c: DELETE_PROTECTION not in (c["metadata"].get("finalizers") or []),
    )
    assert "allocation" not in released["status"]
    assert "reservedFor" not in released["status"]


def test_a_finished_pods_reservation_is_dropped_and_the_claim_deallocated(
    api: ApiClient, ns: str
) -> None:
    done = _pod(api, ns, "done")
    _allocated_claim(api, ns, "finished", [DELETE_PROTECTION], [done])
    client.CoreV1Api(api).patch_namespaced_pod_status(
        "done", ns, {"status": {"phase": "Succeeded"}}
    )
    released = _claim_until(
        api,
        ns,
        "finished",
        lambda _, c: DELETE_PROTECTION not in (c["metadata"].get("finalizers") or []),
    )
    assert "allocation" not in released["status"]
    assert "reservedFor" not in released["status"]


def test_without_the_finalizer_the_allocation_stays(api: ApiClient, ns: str) -> None:
    pod = _pod(api, ns, "user")
    _allocated_claim(api, ns, "kept", [], [pod])
    client.CoreV1Api(api).delete_namespaced_pod("user", ns)
    unreserved = _claim_until(api, ns, "kept", lambda _, c: not c["status"].get("reservedFor"))
    assert unreserved["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"


def test_an_allocated_claim_never_reserved_stays_allocated(api: ApiClient, ns: str) -> None:
    _allocated_claim(api, ns, "idle", [DELETE_PROTECTION], [])
    # A witness written after it: once the controller has released the witness, it has
    # seen the idle claim too, and left it alone.
    user = _pod(api, ns, "user")
    _allocated_claim(api, ns, "witness", [DELETE_PROTECTION], [user])
    client.CoreV1Api(api).delete_namespaced_pod("user", ns)
    _claim_until(api, ns, "witness", lambda _, c: "allocation" not in c["status"])
    idle = client.ResourceV1Api(api).read_namespaced_resource_claim("idle", ns)
    assert idle.status.allocation.devices.results[0].device == "gpu-0"
    assert idle.metadata.finalizers == [DELETE_PROTECTION]


def test_a_deleted_protected_claim_is_deallocated_and_goes(api: ApiClient, ns: str) -> None:
    resource = client.ResourceV1Api(api)
    _allocated_claim(api, ns, "doomed", [DELETE_PROTECTION], [])
    since = resource.list_namespaced_resource_claim(ns).metadata.resource_version
    resource.delete_namespaced_resource_claim("doomed", ns)
    gone = watch_until(
        resource.list_namespaced_resource_claim,
        lambda kind, _: kind == "DELETED",
        ns,
        resource_version=since,
        field_selector="metadata.name=doomed",
    )
    assert "allocation" not in gone["status"]


# ---- kube-controller-manager: node lifecycle ------------------------------------------


def test_a_new_node_is_not_ready_until_the_controller_lifts_the_taint(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    created = core.create_node({"metadata": {"name": "fresh-node"}})
    assert [(t.key, t.effect) for t in created.spec.taints] == [
        ("node.kubernetes.io/not-ready", "NoSchedule")
    ]
    ready = wait_schedulable(api, "fresh-node")
    assert not not_ready_tainted(ready)


def test_a_node_reporting_not_ready_keeps_the_taint(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    not_ready = {"conditions": [{"type": "Ready", "status": "False"}]}
    core.create_node({"metadata": {"name": "sick"}, "status": not_ready})
    core.create_node({"metadata": {"name": "well"}})
    wait_schedulable(api, "well")
    code, sick = send(api, "GET", "/api/v1/nodes/sick")
    assert code == 200 and not_ready_tainted(sick)


async def test_the_scheduler_stand_in_waits_for_the_taint_to_go(tmp_path: Path) -> None:
    async with APIServer() as server:
        path = server.write_kubeconfig(tmp_path / "config")
        with config.new_client_from_config(config_file=str(path)) as api:
            core = client.CoreV1Api(api)
            # Room for pods, as kubelet reports it: a node listing none takes no pod.
            not_ready = {
                "conditions": [{"type": "Ready", "status": "False"}],
                "allocatable": {"pods": "110"},
            }
            await asyncio.to_thread(
                core.create_node, {"metadata": {"name": "late"}, "status": not_ready}
            )
            pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
            await asyncio.to_thread(core.create_namespaced_pod, "default", pod)
            scheduler = DRAScheduler(api)
            refused = await scheduler.schedule("default", "p")
            assert refused.node is None
            assert "untolerated taint {node.kubernetes.io/not-ready: }" in (refused.message or "")
            ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
            await asyncio.to_thread(core.patch_node_status, "late", ready)
            await asyncio.to_thread(wait_schedulable, api, "late")
            assert (await scheduler.schedule("default", "p")).node == "late"
