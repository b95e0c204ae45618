"""deploy/components/controller/lease-holder-policy.yaml in the API emulator: a claim
status write by the vGPU controller's ServiceAccount goes through only from the pod that
holds the leader-election Lease, so a replica paused past its lease (SIGSTOP, a GC
pause, a partition) cannot write an allocation its successor may already have handed
out. Real `kubernetes` client calls under pod-bound ServiceAccount tokens, as kubelet
mounts them; the emulator evaluates the parameterised policy as kube-apiserver v1.36."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from controller.command import LEASE_NAME
from simulator.apiserver import APIServer, run_in_thread
from simulator.policies import admission_policies

CONTROLLER = Path(__file__).parents[2] / "deploy/components/controller"
POLICY_FILE = CONTROLLER / "lease-holder-policy.yaml"
POLICY = "vgpu-controller-lease-holder"
SYSTEM, ACCOUNT, LEASE = "vgpu-system", "vgpu-controller", "vgpu-hami-io-controller"
NS = "tenant"
DENIED = (
    'resourceclaims.resource.k8s.io "mine" is forbidden: '
    f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "
)
ALLOCATION = {
    "devices": {
        "results": [
            {
                "request": "gpu",
                "driver": "vgpu.hami.io",
                "pool": "node-a",
                "device": "gpu-0",
                "shareID": "5e1c2a9e-7d4f-4b8e-9a51-0c3f6f2d8b11",
                "consumedCapacity": {"memory": "10Gi", "cores": "30"},
            }
        ]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    },
}


class Cluster:
    """The emulator with the fence installed, a tenant namespace and one claim."""

    def __init__(self, server: APIServer, directory: Path) -> None:
        self.server = server
        self._directory = directory
        self._open: list[ApiClient] = []
        admission = client.AdmissionregistrationV1Api(self.api())
        policy, binding = yaml.safe_load_all(POLICY_FILE.read_text())
        admission.create_validating_admission_policy(policy)
        admission.create_validating_admission_policy_binding(binding)
        core = client.CoreV1Api(self.api())
        for namespace in (SYSTEM, NS):
            core.create_namespace({"metadata": {"name": namespace}})
        request = {"name": "gpu", "exactly": {"deviceClassName": "nvidia.vgpu.hami.io"}}
        client.ResourceV1Api(self.api()).create_namespaced_resource_claim(
            NS, {"metadata": {"name": "mine"}, "spec": {"devices": {"requests": [request]}}}
        )

    def api(self, token: str | None = None) -> ApiClient:
        path = self._directory / f"kubeconfig-{len(self._open)}"
        made = config.new_client_from_config(
            config_file=str(self.server.write_kubeconfig(path, token=token))
        )
        self._open.append(made)
        return made

    def replica(self, pod: str | None) -> ApiClient:
        """A controller replica: its ServiceAccount's token, bound to pod `pod` (None: a
        token bound to no pod)."""
        token = self.server.tokens.issue_service_account(
            SYSTEM,
            ACCOUNT,
            node_name="control-1" if pod else None,
            pod_name=pod,
            pod_uid=str(uuid.uuid4()) if pod else None,
        )
        return self.api(token)

    def user(self, name: str, *groups: str) -> ApiClient:
        return self.api(self.server.tokens.issue(name, groups))

    def hold(self, holder: str) -> None:
        """The Lease as the replica `holder` writes it when it acquires it ('' once
        released); created the first time."""
        leases = client.CoordinationV1Api(self.api())
        spec = {"holderIdentity": holder, "leaseDurationSeconds": 15}
        try:
            leases.patch_namespaced_lease(LEASE, SYSTEM, {"spec": spec})
        except ApiException as error:
            assert error.status == 404, error.body
            leases.create_namespaced_lease(SYSTEM, {"metadata": {"name": LEASE}, "spec": spec})

    def close(self) -> None:
        for api in self._open:
            api.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with run_in_thread() as server:
        made = Cluster(server, tmp_path)
        yield made
        made.close()


def _reserve(api: ApiClient, pod: str) -> None:
    """A claim status write, as the controller makes it: the allocation (the same one
    each time: it is immutable once set) and the pod's reservation; it was stored."""
    reservation = {"resource": "pods", "name": pod, "uid": str(uuid.uuid5(uuid.NAMESPACE_DNS, pod))}
    written = client.ResourceV1Api(api).patch_namespaced_resource_claim_status(
        "mine", NS, {"status": {"allocation": ALLOCATION, "reservedFor": [reservation]}}
    )
    assert pod in [r.name for r in written.status.reserved_for]


def _refused(api: ApiClient, pod: str, code: int = 403) -> str:
    with pytest.raises(ApiException) as raised:
        _reserve(api, pod)
    assert raised.value.status == code, raised.value.body
    status: dict[str, Any] = json.loads(raised.value.body)
    message: str = status["message"]
    return message


def _reserved(cluster: Cluster) -> list[str]:
    claim = client.ResourceV1Api(cluster.api()).read_namespaced_resource_claim("mine", NS)
    return [r.name for r in (claim.status.reserved_for or [])] if claim.status else []


def test_the_holder_writes_and_the_deposed_leader_does_not(cluster: Cluster) -> None:
    """The frozen-leader race as the API server sees it: replica a led, was paused, b
    took the Lease over; a's writes after it resumes are refused, b's go through."""
    cluster.hold("vgpu-controller-a")
    leader, standby = cluster.replica("vgpu-controller-a"), cluster.replica("vgpu-controller-b")
    _reserve(leader, "first")
    assert _refused(standby, "stolen") == DENIED + (
        f"vgpu-controller-b is not the holder of Lease {SYSTEM}/{LEASE} (held by "
        "vgpu-controller-a): only the controller replica that holds the Lease writes claim "
        "status"
    )
    cluster.hold("vgpu-controller-b")
    message = _refused(leader, "stale")
    assert "vgpu-controller-a is not the holder of Lease" in message
    assert "(held by vgpu-controller-b)" in message
    _reserve(standby, "second")
    assert not {"stolen", "stale"} & set(_reserved(cluster))


def test_a_released_lease_lets_no_replica_write(cluster: Cluster) -> None:
    cluster.hold("vgpu-controller-a")
    cluster.hold("")
    message = _refused(cluster.replica("vgpu-controller-a"), "late")
    assert f"vgpu-controller-a is not the holder of Lease {SYSTEM}/{LEASE} (released)" in message


def test_a_controller_token_bound_to_no_pod_is_refused(cluster: Cluster) -> None:
    cluster.hold("vgpu-controller-a")
    message = _refused(cluster.replica(None), "unbound")
    assert message == DENIED + (
        "the vGPU controller token names no pod (authentication.kubernetes.io/pod-name), so "
        f"it cannot be checked against the holder of Lease {SYSTEM}/{LEASE}: claim status is "
        "written only by the controller replica that holds the Lease, from its pod"
    )


def test_without_the_lease_no_claim_status_write_is_refused(cluster: Cluster) -> None:
    """parameterNotFoundAction Allow: the param is looked up before matchConditions,
    so a Deny would refuse everyone's claim status writes while no Lease exists."""
    _reserve(cluster.user("system:kube-scheduler"), "early")
    _reserve(cluster.replica("vgpu-controller-a"), "unelected")
    cluster.hold("vgpu-controller-a")
    _reserve(cluster.user("system:kube-scheduler"), "later")


def test_other_writers_are_not_fenced(cluster: Cluster) -> None:
    cluster.hold("vgpu-controller-b")
    _reserve(cluster.user("system:kube-scheduler"), "scheduled")
    _reserve(cluster.user("system:kube-controller-manager"), "cleaned")
    _reserve(cluster.user("alice", "tenants"), "tenant")
    namesake = cluster.server.tokens.issue_service_account(NS, ACCOUNT, pod_name="impostor")
    _reserve(cluster.api(namesake), "same-name")


def test_the_binding_names_the_lease_and_account_the_deployment_uses() -> None:
    """The policy is only a fence if its names are the controller's: the Lease
    (`--lease-name` default, in the pod's namespace), the ServiceAccount, and the
    identity the Deployment gives each replica (its pod name)."""
    policy, binding = yaml.safe_load_all(POLICY_FILE.read_text())
    deployment = next(
        d
        for d in yaml.safe_load_all((CONTROLLER / "deployment.yaml").read_text())
        if d["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    assert (deployment["metadata"]["namespace"], pod["serviceAccountName"]) == (SYSTEM, ACCOUNT)
    env = {e["name"]: e.get("valueFrom") for e in pod["containers"][0]["env"]}
    assert env["POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert binding["spec"]["paramRef"] == {
        "name": LEASE_NAME,
        "namespace": SYSTEM,
        "parameterNotFoundAction": "Allow",
    }
    assert (
        f"system:serviceaccount:{SYSTEM}:{ACCOUNT}"
        in policy["spec"]["matchConditions"][0]["expression"]
    )


def test_only_the_controller_allocated_overlays_install_it() -> None:
    """deploy/overlays/dra runs the controller; dra-scheduler-allocated runs none, so its
    claims are written by kube-scheduler alone and carry no fence."""
    assert POLICY in [d["metadata"]["name"] for d in admission_policies("dra")]
    assert POLICY in [d["metadata"]["name"] for d in admission_policies("mixed")]
    assert POLICY not in [
        d["metadata"]["name"] for d in admission_policies("dra-scheduler-allocated")
    ]
