"""deploy/'s pod policy for pods that ask for a vGPU class by extended resource name.

With DRA extended resources, a pod may ask for `deviceclass.resource.kubernetes.io/
<class>` (or a class's `spec.extendedResourceName`) in its container resources;
kube-scheduler then creates the claim itself, and the pod carries no
`spec.resourceClaims`. Such a pod runs under libvgpu exactly as one with a claim, so
the tamper policy must hold it to the same rules. Seen on a real cluster: a
privileged pod asking for `deviceclass.resource.kubernetes.io/nvidia.vgpu.hami.io`
was admitted, and only prepare refused it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from simulator.apiserver import run_in_thread

DEPLOY = Path(__file__).parents[2] / "deploy"
POLICY = DEPLOY / "components/kubelet-plugin/claim-pod-policy.yaml"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
NS = "tenant"
DENIAL = (
    "ValidatingAdmissionPolicy 'vgpu-claim-pods-no-tamper' with binding "
    "'vgpu-claim-pods-no-tamper' denied request: "
)


def _deploy_device_classes() -> list[dict[str, Any]]:
    return [
        document
        for path in sorted(DEPLOY.rglob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if isinstance(document, dict) and document.get("kind") == "DeviceClass"
    ]


def _extended_resource_names() -> list[str]:
    """Every name by which a pod can ask for one of deploy/'s classes: each class's
    implicit `deviceclass.resource.kubernetes.io/<name>` and any explicit name it sets."""
    names = []
    for device_class in _deploy_device_classes():
        names.append(IMPLICIT_PREFIX + device_class["metadata"]["name"])
        explicit = (device_class.get("spec") or {}).get("extendedResourceName")
        if explicit:
            names.append(explicit)
    return names


@pytest.fixture
def tenant(tmp_path: Path) -> Iterator[client.CoreV1Api]:
    with run_in_thread() as server:
        made: list[ApiClient] = []

        def api(name: str, token: str | None = None) -> ApiClient:
            path = server.write_kubeconfig(tmp_path / f"kubeconfig-{name}", token=token)
            made.append(config.new_client_from_config(config_file=str(path)))
            return made[-1]

        admin = api("admin")
        admission = client.AdmissionregistrationV1Api(admin)
        for document in yaml.safe_load_all(POLICY.read_text()):
            if document["kind"] == "ValidatingAdmissionPolicy":
                admission.create_validating_admission_policy(document)
            else:
                admission.create_validating_admission_policy_binding(document)
        client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})
        yield client.CoreV1Api(api("alice", server.tokens.issue("alice", ("tenants",))))
        for opened in made:
            opened.close()


def _pod(resource: str, *, where: str = "limits", init: bool = False, **app: Any) -> dict[str, Any]:
    asking = {"name": "app", "image": "cuda", "resources": {where: {resource: "1"}}}
    containers = [{"name": "app", "image": "cuda", **app}]
    spec: dict[str, Any] = {"containers": containers}
    if init:
        spec["initContainers"] = [asking]
    else:
        containers[0]["resources"] = asking["resources"]
    return {"metadata": {"name": "p"}, "spec": spec}


PRIVILEGED = {"securityContext": {"privileged": True}}


def test_deploy_ships_vgpu_classes() -> None:
    names = _extended_resource_names()
    assert IMPLICIT_PREFIX + "nvidia.vgpu.hami.io" in names, names


@pytest.mark.parametrize("resource", _extended_resource_names())
def test_a_privileged_pod_asking_by_extended_resource_name_is_refused(
    tenant: client.CoreV1Api, resource: str
) -> None:
    with pytest.raises(ApiException) as raised:
        tenant.create_namespaced_pod(NS, _pod(resource, **PRIVILEGED))
    assert raised.value.status == 403, raised.value.body
    message = json.loads(raised.value.body)["message"]
    assert message.startswith(
        f'pods "p" is forbidden: {DENIAL}container app is privileged (securityContext.privileged)'
    ), message


@pytest.mark.parametrize(
    ("where", "init"), [("requests", False), ("limits", True), ("requests", True)]
)
def test_the_request_counts_in_requests_and_in_init_containers(
    tenant: client.CoreV1Api, where: str, init: bool
) -> None:
    pod = _pod(IMPLICIT_PREFIX + "mlu.vgpu.hami.io", where=where, init=init, **PRIVILEGED)
    with pytest.raises(ApiException) as raised:
        tenant.create_namespaced_pod(NS, pod)
    assert raised.value.status == 403, raised.value.body


def test_a_harmless_pod_and_other_drivers_classes_are_admitted(tenant: client.CoreV1Api) -> None:
    tenant.create_namespaced_pod(NS, _pod(IMPLICIT_PREFIX + "nvidia.vgpu.hami.io"))
    other = _pod(IMPLICIT_PREFIX + "gpu.nvidia.com", **PRIVILEGED)
    other["metadata"]["name"] = "other"
    tenant.create_namespaced_pod(NS, other)
    assert {p.metadata.name for p in tenant.list_namespaced_pod(NS).items} == {"p", "other"}
