"""The policy that lets the DRA controller's ServiceAccount remove its own allocation
gate from a pod and change nothing else, tried against the API emulator (as
test_deploy_admission_policies.py tries the others)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from test_deploy_admission_policies import NS, Cluster, _cluster, _denial, _refused

from controller.allocation_gate import ALLOCATION_GATE
from simulator.apiserver import run_in_thread

POLICY = Path(__file__).parents[2] / "deploy/components/allocation-gate/gate-removal-policy.yaml"
KUEUE = "kueue.x-k8s.io/admission"


@pytest.fixture
def gates(tmp_path: Path) -> Iterator[Cluster]:
    with run_in_thread() as server:
        yield from _cluster(server, tmp_path, POLICY)


def _gated_pod(api: client.ApiClient, name: str, *gate_names: str) -> None:
    client.CoreV1Api(api).create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name, "labels": {"app": "job"}},
            "spec": {
                "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
                "schedulingGates": [{"name": g} for g in gate_names],
            },
        },
    )


def _json_patch(api: client.ApiClient, name: str, ops: list[dict[str, Any]]) -> Any:
    return client.CoreV1Api(api).patch_namespaced_pod(name, NS, ops)


def _remove(index: int, name: str) -> list[dict[str, Any]]:
    path = f"/spec/schedulingGates/{index}"
    return [{"op": "test", "path": path, "value": {"name": name}}, {"op": "remove", "path": path}]


def _gate_names(api: client.ApiClient, name: str) -> list[str]:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, NS)
    return [g.name for g in pod.spec.scheduling_gates or []]


def test_the_controller_removes_its_own_gate(gates: Cluster) -> None:
    admin, controller = gates.api(), gates.service_account("vgpu-controller")
    _gated_pod(admin, "job", ALLOCATION_GATE)
    _json_patch(controller, "job", _remove(0, ALLOCATION_GATE))
    assert _gate_names(admin, "job") == []


@pytest.mark.parametrize(
    "ops",
    [
        _remove(0, KUEUE),
        [{"op": "replace", "path": "/metadata/labels", "value": {"app": "other"}}],
        [
            *_remove(1, ALLOCATION_GATE),
            {"op": "add", "path": "/metadata/annotations", "value": {"x": "y"}},
        ],
        [{"op": "add", "path": "/spec/activeDeadlineSeconds", "value": 1}],
    ],
    ids=["kueue's gate", "a label", "an annotation with our gate", "the spec"],
)
def test_the_controller_may_change_nothing_else(gates: Cluster, ops: list[dict[str, Any]]) -> None:
    admin, controller = gates.api(), gates.service_account("vgpu-controller")
    _gated_pod(admin, "job", KUEUE, ALLOCATION_GATE)
    status = _refused(_json_patch, controller, "job", ops)
    assert _denial("vgpu-controller-pod-gate") in status["message"]
    assert _gate_names(admin, "job") == [KUEUE, ALLOCATION_GATE]


def test_others_are_not_held_to_it(gates: Cluster) -> None:
    admin = gates.api()
    _gated_pod(admin, "job", KUEUE, ALLOCATION_GATE)
    _json_patch(admin, "job", _remove(0, KUEUE))
    assert _gate_names(admin, "job") == [ALLOCATION_GATE]


def test_preemption_writes_are_not_held_to_it(gates: Cluster) -> None:
    """The policy matches UPDATE of pods only: the controller's preemption writes (a
    status patch through pods/status, a delete) are not gate removals and pass."""
    admin, controller = gates.api(), gates.service_account("vgpu-controller")
    _gated_pod(admin, "preemptor")
    _gated_pod(admin, "victim")
    core = client.CoreV1Api(controller)
    core.patch_namespaced_pod_status("preemptor", NS, {"status": {"nominatedNodeName": "node-a"}})
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByVGPUController",
        "message": "vgpu-dra-controller: preempting to accommodate a higher priority pod",
    }
    core.patch_namespaced_pod_status("victim", NS, {"status": {"conditions": [condition]}})
    core.delete_namespaced_pod("victim", NS)
    read = client.CoreV1Api(admin)
    assert read.read_namespaced_pod("preemptor", NS).status.nominated_node_name == "node-a"
    assert "victim" not in {p.metadata.name for p in read.list_namespaced_pod(NS).items}
