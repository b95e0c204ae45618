"""The ValidatingAdmissionPolicies deploy/ ships, tried by each bypass they exist to stop.

Each test installs the policy files as kustomize would (the YAML documents as they
are), then makes real `kubernetes` client calls to the API emulator under the
identity a tenant, a component or a stolen token would have: a forged claim
allocation, forged HAMi pod and node annotations, and pods with claims that could
reach around libvgpu. The emulator evaluates the policies' CEL as kube-apiserver
v1.36 does; what it cannot evaluate (optional syntax, `authorizer`) the shipped
policies do not use. The last group checks that the pod policy and the rules
prepare and the legacy webhook apply (`tamper_rules`) refuse the same pods.
"""

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

from dra_driver.objects.claim_workloads import DRIVER_NAME
from dra_driver.objects.tamper_rules import tamper_findings
from libvgpu.settings import LibvgpuPaths, guarded_paths
from simulator.apiserver import APIServer, run_in_thread

DEPLOY = Path(__file__).parents[2] / "deploy/components"
ALLOCATION_POLICY = DEPLOY / "kubelet-plugin/claim-allocation-policy.yaml"
POD_POLICY = DEPLOY / "kubelet-plugin/claim-pod-policy.yaml"
ANNOTATION_POLICY = DEPLOY / "legacy/annotation-policy.yaml"
SYSTEM = "vgpu-system"
NS = "tenant"


def _denial(policy: str) -> str:
    return f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "


class Cluster:
    """One emulator with the policies of some files installed; clients per identity."""

    def __init__(self, server: APIServer, directory: Path, files: list[Path]) -> None:
        self.server = server
        self._directory = directory
        self._open: list[ApiClient] = []
        admin = self.api()
        admission = client.AdmissionregistrationV1Api(admin)
        for path in files:
            for document in yaml.safe_load_all(path.read_text()):
                if document["kind"] == "ValidatingAdmissionPolicy":
                    admission.create_validating_admission_policy(document)
                else:
                    admission.create_validating_admission_policy_binding(document)
        client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})

    def api(self, token: str | None = None) -> ApiClient:
        path = self._directory / f"kubeconfig-{len(self._open)}"
        made = config.new_client_from_config(
            config_file=str(self.server.write_kubeconfig(path, token=token))
        )
        self._open.append(made)
        return made

    def user(self, name: str) -> ApiClient:
        return self.api(self.server.tokens.issue(name, ("tenants",)))

    def service_account(self, name: str, node: str | None = None) -> ApiClient:
        token = self.server.tokens.issue_service_account(
            SYSTEM,
            name,
            node_name=node,
            pod_name=f"{name}-{node}" if node else None,
            pod_uid=str(uuid.uuid4()) if node else None,
        )
        return self.api(token)

    def close(self) -> None:
        for api in self._open:
            api.close()


@pytest.fixture
def server() -> Iterator[APIServer]:
    with run_in_thread() as running:
        yield running


def _cluster(server: APIServer, tmp_path: Path, *files: Path) -> Iterator[Cluster]:
    cluster = Cluster(server, tmp_path, list(files))
    yield cluster
    cluster.close()


@pytest.fixture
def claims(server: APIServer, tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(server, tmp_path, ALLOCATION_POLICY)


@pytest.fixture
def pods(server: APIServer, tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(server, tmp_path, POD_POLICY)


@pytest.fixture
def hami(server: APIServer, tmp_path: Path) -> Iterator[Cluster]:
    yield from _cluster(server, tmp_path, ANNOTATION_POLICY)


def _refused(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    """The Status of a write the policies refuse: 403 Forbidden, as their `reason` says."""
    with pytest.raises(ApiException) as raised:
        call(*args, **kwargs)
    assert raised.value.status == 403, raised.value.body
    status: dict[str, Any] = json.loads(raised.value.body)
    assert status["reason"] == "Forbidden"
    return status


# ---- who may write a claim's allocation ------------------------------------------------


def _claim(api: ApiClient, name: str) -> None:
    client.ResourceV1Api(api).create_namespaced_resource_claim(
        NS,
        {
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpu", "exactly": {"deviceClassName": "vgpu.hami.io"}}]
                }
            },
        },
    )


def _allocation(device: str, driver: str = DRIVER_NAME) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": driver,
                    "pool": "node-a",
                    "device": device,
                    "shareID": str(uuid.uuid4()),
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


def _write_allocation(api: ApiClient, name: str, allocation: dict[str, Any] | None) -> None:
    client.ResourceV1Api(api).patch_namespaced_resource_claim_status(
        name, NS, {"status": {"allocation": allocation}}
    )


def _stored_allocation(cluster: Cluster, name: str) -> Any:
    claim = client.ResourceV1Api(cluster.api()).read_namespaced_resource_claim(name, NS)
    return claim.status.allocation if claim.status else None


def test_a_tenant_cannot_allocate_its_own_claim(claims: Cluster) -> None:
    _claim(claims.api(), "mine")
    tenant = claims.user("alice")
    status = _refused(_write_allocation, tenant, "mine", _allocation("gpu-0"))
    assert status["message"] == (
        'resourceclaims.resource.k8s.io "mine" is forbidden: '
        + _denial("vgpu-claim-allocation-writers")
        + "alice may not write the allocation of a claim on vgpu.hami.io devices: only "
        "the vGPU controller and kube-scheduler allocate them"
    )
    assert _stored_allocation(claims, "mine") is None


def test_the_controller_allocates_and_a_tenant_cannot_drop_it(claims: Cluster) -> None:
    """(Widening is refused by the API itself: an allocation is immutable once set.)"""
    _claim(claims.api(), "mine")
    controller = claims.service_account("vgpu-controller")
    _write_allocation(controller, "mine", _allocation("gpu-0"))
    given = _stored_allocation(claims, "mine")
    assert given.devices.results[0].device == "gpu-0"
    tenant = claims.user("alice")
    status = _refused(_write_allocation, tenant, "mine", None)
    assert "alice may not remove the allocation" in status["message"]
    assert _stored_allocation(claims, "mine").devices.results[0].device == "gpu-0"


def test_kube_controller_manager_may_deallocate_but_not_allocate(claims: Cluster) -> None:
    _claim(claims.api(), "mine")
    deallocator = claims.api(
        claims.server.tokens.issue_service_account("kube-system", "resource-claim-controller")
    )
    _refused(_write_allocation, deallocator, "mine", _allocation("gpu-0"))
    _write_allocation(claims.service_account("vgpu-controller"), "mine", _allocation("gpu-0"))
    _write_allocation(deallocator, "mine", None)
    assert _stored_allocation(claims, "mine") is None


def test_kube_scheduler_allocates_in_scheduler_allocated_mode(claims: Cluster) -> None:
    _claim(claims.api(), "mine")
    scheduler = claims.api(claims.server.tokens.issue("system:kube-scheduler"))
    _write_allocation(scheduler, "mine", _allocation("gpu-0"))
    assert _stored_allocation(claims, "mine").devices.results[0].device == "gpu-0"


def test_claims_of_other_drivers_and_other_status_writes_are_left_alone(claims: Cluster) -> None:
    _claim(claims.api(), "theirs")
    tenant = claims.user("alice")
    _write_allocation(tenant, "theirs", _allocation("nic-0", driver="net.example.com"))
    _claim(claims.api(), "mine")
    _write_allocation(claims.service_account("vgpu-controller"), "mine", _allocation("gpu-0"))
    client.ResourceV1Api(tenant).patch_namespaced_resource_claim(
        "mine", NS, {"metadata": {"labels": {"team": "a"}}}
    )
    assert _stored_allocation(claims, "theirs").devices.results[0].driver == "net.example.com"


# ---- pods holding claims that could reach around libvgpu -----------------------------


def _pod(name: str, *, claims: bool = True, **changes: Any) -> dict[str, Any]:
    app: dict[str, Any] = {"name": "app", "image": "cuda"}
    spec: dict[str, Any] = {"containers": [app]}
    if claims:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "mine"}]
        app["resources"] = {"claims": [{"name": "gpu"}]}
    if "sidecar" in changes:
        spec["containers"].append({"name": "sidecar", "image": "busybox", **changes["sidecar"]})
    if "host_path" in changes:
        host, mount = changes["host_path"]
        spec["volumes"] = [{"name": "host", "hostPath": {"path": host}}]
        app["volumeMounts"] = [{"name": "host", "mountPath": mount}]
    return {"metadata": {"name": name}, "spec": spec}


PRIVILEGED = {"securityContext": {"privileged": True}}
SYS_ADMIN = {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}
TAMPERING_PODS = {
    "privileged sidecar": (
        _pod("p", sidecar=PRIVILEGED),
        "container sidecar is privileged (securityContext.privileged)",
    ),
    "CAP_SYS_ADMIN sidecar": (
        _pod("p", sidecar={"securityContext": {"capabilities": {"add": ["cap_sys_admin"]}}}),
        "container sidecar adds CAP_SYS_ADMIN (securityContext.capabilities.add)",
    ),
    "hostPath over the vgpu dir": (
        _pod("p", host_path=("/usr/local/vgpu", "/data")),
        "volume host: hostPath reaches the library, preload list, shared regions or locks",
    ),
    "hostPath of a parent": (
        _pod("p", host_path=("/usr/local/", "/data")),
        "volume host: hostPath reaches the library",
    ),
    "hostPath of a claim's cache dir": (
        _pod("p", host_path=("/usr/local/vgpu/claims", "/data")),
        "volume host: hostPath reaches the library",
    ),
    "hostPath of the lock dir": (
        _pod("p", host_path=("/tmp/vgpulock", "/locks")),
        "volume host: hostPath reaches the library",
    ),
    "hostPath of the host's preload list": (
        _pod("p", host_path=("/etc/ld.so.preload", "/preload")),
        "volume host: hostPath reaches the library",
    ),
    "hostPath mounted over the preload list": (
        _pod("p", host_path=("/srv/empty", "/etc/ld.so.preload")),
        "container app mounts a hostPath volume over the preload list or library directory",
    ),
    "hostPath mounted over the library dir, relative": (
        _pod("p", host_path=("/srv/lib", "usr/local/vgpu")),
        "container app mounts a hostPath volume over the preload list or library directory",
    ),
    "a guarded path spelled another way": (
        _pod("p", host_path=("/usr//local/vgpu", "/data")),
        "volume host: a pod holding resource claims may use only absolute, canonical hostPath",
    ),
}


@pytest.mark.parametrize("case", list(TAMPERING_PODS))
def test_a_pod_with_claims_that_could_lift_its_limits_is_refused(pods: Cluster, case: str) -> None:
    pod, reason = TAMPERING_PODS[case]
    tenant = client.CoreV1Api(pods.user("alice"))
    status = _refused(tenant.create_namespaced_pod, NS, pod)
    assert status["message"].startswith(
        f'pods "p" is forbidden: {_denial("vgpu-claim-pods-no-tamper")}{reason}'
    ), status["message"]
    assert client.CoreV1Api(pods.api()).list_namespaced_pod(NS).items == []


def test_pods_without_claims_and_harmless_pods_with_claims_are_admitted(pods: Cluster) -> None:
    tenant = client.CoreV1Api(pods.user("alice"))
    tenant.create_namespaced_pod(NS, _pod("debug", claims=False, sidecar=PRIVILEGED))
    tenant.create_namespaced_pod(NS, _pod("data", host_path=("/srv/datasets", "/data")))
    tenant.create_namespaced_pod(NS, _pod("plain", sidecar={"securityContext": {}}))
    names = {p.metadata.name for p in client.CoreV1Api(pods.api()).list_namespaced_pod(NS).items}
    assert names == {"debug", "data", "plain"}


def test_an_admin_is_held_to_the_same_rules(pods: Cluster) -> None:
    """Policies bind system:masters too: the kubeconfig's admin gets no way around them."""
    admin = client.CoreV1Api(pods.api())
    _refused(admin.create_namespaced_pod, NS, _pod("p", sidecar=SYS_ADMIN))


@pytest.mark.parametrize(
    "pod",
    [pod for pod, _ in TAMPERING_PODS.values() if "//" not in json.dumps(pod)]
    + [
        _pod("p", host_path=("/srv/datasets", "/data")),
        _pod("p", host_path=("/", "/host")),
        _pod("p", host_path=("/usr/local/vgpu-other", "/data")),
        _pod("p", host_path=("/srv/x", "/etc/ld.so.preload.d")),
        _pod("p", sidecar={"securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}),
        _pod("p", sidecar={"securityContext": {"capabilities": {"add": ["ALL"]}}}),
        _pod("p", sidecar={"securityContext": {"privileged": False}}),
    ],
)
def test_the_policy_refuses_exactly_what_prepare_and_the_webhook_refuse(
    pods: Cluster, pod: dict[str, Any]
) -> None:
    """One set of rules in three places: the pod policy here, `tamper_rules` at prepare
    and in the legacy webhook. (The policy alone also refuses non-canonical hostPaths.)"""
    findings = tamper_findings(pod, guarded_paths(LibvgpuPaths()))
    tenant = client.CoreV1Api(pods.user("alice"))
    try:
        tenant.create_namespaced_pod(NS, pod)
    except ApiException as error:
        assert error.status == 403 and findings, error.body
    else:
        assert not findings, findings


# ---- HAMi's annotations: pods ------------------------------------------------------------


def _bound_pod(cluster: Cluster, name: str, node: str) -> None:
    client.CoreV1Api(cluster.api()).create_namespaced_pod(
        NS,
        {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "app", "image": "cuda"}]},
        },
    )


def _annotate_pod(api: ApiClient, name: str, annotations: dict[str, str | None]) -> None:
    client.CoreV1Api(api).patch_namespaced_pod(name, NS, {"metadata": {"annotations": annotations}})


def _pod_annotations(cluster: Cluster, name: str) -> dict[str, str]:
    pod = client.CoreV1Api(cluster.api()).read_namespaced_pod(name, NS)
    return dict(pod.metadata.annotations or {})


ALLOCATED = "GPU-0c1d,NVIDIA,8000,30:;"


def test_a_tenant_cannot_create_a_pod_that_claims_an_allocation(hami: Cluster) -> None:
    tenant = client.CoreV1Api(hami.user("alice"))
    pod = {
        "metadata": {
            "name": "forged",
            "annotations": {"hami.io/vgpu-node": "node-a", "team": "a"},
        },
        "spec": {"containers": [{"name": "app", "image": "cuda"}]},
    }
    status = _refused(tenant.create_namespaced_pod, NS, pod)
    assert status["message"] == (
        'pods "forged" is forbidden: '
        + _denial("vgpu-hami-pod-annotations")
        + "alice may not set or change hami.io/vgpu-node: HAMi allocation annotations are "
        "written only by the vGPU scheduler (and bind-phase, devices-to-allocate, "
        "vgpu-mig-allocations by the device plugin)"
    )


@pytest.mark.parametrize(
    "key",
    [
        "hami.io/vgpu-devices-allocated",
        "hami.io/vgpu-devices-to-allocate",
        "hami.io/bind-phase",
        "hami.io/vgpu-time",
    ],
)
def test_a_tenant_cannot_forge_or_rewrite_an_allocation_annotation(hami: Cluster, key: str) -> None:
    _bound_pod(hami, "mine", "node-a")
    scheduler = hami.service_account("vgpu-legacy-scheduler")
    _annotate_pod(scheduler, "mine", {key: ALLOCATED})
    tenant = hami.user("alice")
    _refused(_annotate_pod, tenant, "mine", {key: ALLOCATED.replace("8000", "80000")})
    _refused(_annotate_pod, tenant, "mine", {key: None})
    _annotate_pod(tenant, "mine", {"team": "a"})
    assert _pod_annotations(hami, "mine") == {key: ALLOCATED, "team": "a"}


def test_the_device_plugin_records_allocate_only_on_its_own_nodes_pods(hami: Cluster) -> None:
    _bound_pod(hami, "here", "node-a")
    _bound_pod(hami, "there", "node-b")
    plugin = hami.service_account("vgpu-device-plugin", node="node-a")
    _annotate_pod(
        plugin, "here", {"hami.io/bind-phase": "success", "hami.io/vgpu-devices-to-allocate": ";"}
    )
    status = _refused(_annotate_pod, plugin, "there", {"hami.io/bind-phase": "success"})
    assert status["message"].endswith(
        "the device plugin on node node-a may not change allocation annotations of a pod "
        "bound to node node-b"
    )
    _refused(_annotate_pod, plugin, "here", {"hami.io/vgpu-devices-allocated": ALLOCATED})
    assert _pod_annotations(hami, "here")["hami.io/bind-phase"] == "success"


def test_the_device_plugin_records_a_mig_instance_on_its_own_nodes_pods(hami: Cluster) -> None:
    """Allocate writes the instance's uuid and ids into hami.io/vgpu-mig-allocations in
    the patch that marks the container served (HAMi's annotateMigRuntimeInfo)."""
    key = "hami.io/vgpu-mig-allocations"
    reserved = '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-0c1d","profile":"3g.40gb",'
    placement = '"placement":{"start":4,"size":4}'
    _bound_pod(hami, "here", "node-a")
    _bound_pod(hami, "there", "node-b")
    scheduler = hami.service_account("vgpu-legacy-scheduler")
    for name in ("here", "there"):
        _annotate_pod(scheduler, name, {key: reserved + placement + "}]"})
    plugin = hami.service_account("vgpu-device-plugin", node="node-a")
    served = reserved + placement + ',"migUUID":"MIG-1","gpuInstanceID":1,"computeInstanceID":0}]'
    _annotate_pod(plugin, "here", {"hami.io/bind-phase": "success", key: served})
    _refused(_annotate_pod, plugin, "there", {key: served})
    _refused(_annotate_pod, hami.user("alice"), "here", {key: None})
    assert _pod_annotations(hami, "here")[key] == served


# ---- HAMi's annotations: nodes -----------------------------------------------------------

REGISTER = "hami.io/node-nvidia-register"
HANDSHAKE = "hami.io/node-handshake"


def _node(cluster: Cluster, name: str) -> None:
    client.CoreV1Api(cluster.api()).create_node({"metadata": {"name": name}})


def _annotate_node(api: ApiClient, name: str, annotations: dict[str, str]) -> None:
    client.CoreV1Api(api).patch_node(name, {"metadata": {"annotations": annotations}})


def test_only_a_nodes_device_plugin_writes_its_register(hami: Cluster) -> None:
    _node(hami, "node-a")
    _node(hami, "node-b")
    register = "[]"
    _annotate_node(
        hami.service_account("vgpu-device-plugin", node="node-a"), "node-a", {REGISTER: register}
    )
    for forger in (
        hami.user("alice"),
        hami.service_account("vgpu-device-plugin", node="node-b"),
        hami.service_account("vgpu-device-plugin"),
        hami.service_account("vgpu-legacy-scheduler"),
    ):
        status = _refused(_annotate_node, forger, "node-a", {REGISTER: '[{"id": "GPU-forged"}]'})
        assert f"may not set or change {REGISTER} on node node-a" in status["message"]
    node = client.CoreV1Api(hami.api()).read_node("node-a")
    assert node.metadata.annotations[REGISTER] == register


def test_the_scheduler_answers_the_handshake_and_a_tenant_cannot(hami: Cluster) -> None:
    _node(hami, "node-a")
    _annotate_node(
        hami.service_account("vgpu-legacy-scheduler"),
        "node-a",
        {HANDSHAKE: "Requesting_2026-12-01 10:00:00"},
    )
    _refused(_annotate_node, hami.user("alice"), "node-a", {HANDSHAKE: "Reported now"})
    _annotate_node(hami.user("alice"), "node-a", {"team": "a"})
