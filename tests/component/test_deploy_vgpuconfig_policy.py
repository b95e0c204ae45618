"""The scheduler-allocated overlay's policy on VGPUConfig, evaluated by the API emulator.

kube-scheduler allocates in deploy/overlays/dra-scheduler-allocated and reads no
opaque parameters: a claim or template whose VGPUConfig sizes the share, filters
GPUs, binds NUMA or picks a policy would be placed and charged as if it said
nothing. The overlay's policies are installed as the simulation installs them
(followed through the overlay's kustomization), then real `kubernetes` client
calls create claims and templates: each such field is refused when the object is
created, naming the field and what kube-scheduler honours instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from simulator.apiserver import APIServer, run_in_thread
from simulator.policies import COLLECTIONS, admission_policies

POLICY = "vgpu-config-scheduler-allocated"
OVERLAY = "dra-scheduler-allocated"
NS = "default"
DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
PARAMS = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}
UUID = "GPU-5100e000-0000-4000-8000-000000000000"
DENIED = f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "


def _install(api: ApiClient, mode: str) -> None:
    admission = client.AdmissionregistrationV1Api(api)
    for document in admission_policies(mode):
        if document["kind"] == "ValidatingAdmissionPolicy":
            admission.create_validating_admission_policy(document)
        else:
            admission.create_validating_admission_policy_binding(document)


@pytest.fixture
def server() -> Iterator[APIServer]:
    with run_in_thread() as running:
        yield running


@pytest.fixture
def admin(server: APIServer, tmp_path: Path) -> Iterator[ApiClient]:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    with config.new_client_from_config(config_file=str(kubeconfig)) as api:
        yield api


@pytest.fixture
def scheduler_allocated(admin: ApiClient) -> ApiClient:
    _install(admin, OVERLAY)
    return admin


def _entry(parameters: dict[str, Any], driver: str = DRIVER) -> dict[str, Any]:
    return {"requests": ["gpu"], "opaque": {"driver": driver, "parameters": parameters}}


def _spec(*configs: dict[str, Any], **exactly: Any) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": CLASS, **exactly}}
    return {"devices": {"requests": [request], "config": list(configs)}}


def _create_claim(api: ApiClient, name: str, spec: dict[str, Any]) -> None:
    body = {"metadata": {"name": name}, "spec": spec}
    client.ResourceV1Api(api).create_namespaced_resource_claim(NS, body)


def _create_template(api: ApiClient, name: str, spec: dict[str, Any]) -> None:
    body = {"metadata": {"name": name}, "spec": {"spec": spec}}
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(NS, body)


def _refusal(create: Any, api: ApiClient, spec: dict[str, Any]) -> str:
    """The message of a create the policy refuses (422, reason Invalid)."""
    with pytest.raises(ApiException) as raised:
        create(api, "refused", spec)
    assert raised.value.status == 422, raised.value.body
    status = json.loads(raised.value.body)
    assert status["reason"] == "Invalid"
    message: str = status["message"]
    assert DENIED in message
    return message.split(DENIED, 1)[1]


@pytest.mark.parametrize(
    ("parameters", "fields", "equivalent"),
    [
        ({"memory": "10Gi"}, ["memory"], "capacity.requests"),
        ({"memoryPercentage": 25, "cores": 25}, ["memoryPercentage", "cores"], "capacity.requests"),
        ({"useUUIDs": [UUID]}, ["useUUIDs"], "device.attributes['vgpu.hami.io'].uuid"),
        ({"noUseUUIDs": [UUID]}, ["noUseUUIDs"], "device.attributes['vgpu.hami.io'].uuid"),
        ({"useTypes": ["A100"]}, ["useTypes"], "device.attributes['vgpu.hami.io'].type"),
        ({"noUseTypes": ["A100"]}, ["noUseTypes"], "device.attributes['vgpu.hami.io'].type"),
        ({"numaBind": True}, ["numaBind"], "matchAttribute: vgpu.hami.io/numa"),
        ({"gpuPolicy": "binpack"}, ["gpuPolicy"], "deploy/overlays/dra"),
        ({"nodePolicy": "spread"}, ["nodePolicy"], "deploy/overlays/dra"),
    ],
)
@pytest.mark.parametrize(
    ("create", "prefix"),
    [(_create_claim, "spec.devices"), (_create_template, "spec.spec.devices")],
    ids=["claim", "template"],
)
def test_what_kube_scheduler_cannot_read_is_refused_naming_field_and_equivalent(
    scheduler_allocated: ApiClient,
    create: Any,
    prefix: str,
    parameters: dict[str, Any],
    fields: list[str],
    equivalent: str,
) -> None:
    spec = _spec(
        _entry({"kind": "Other"}, driver="other.example.com"), _entry({**PARAMS, **parameters})
    )
    message = _refusal(create, scheduler_allocated, spec)
    for name in fields:
        assert f"{prefix}.config[1].opaque.parameters.{name}" in message
    assert f"{prefix}.config[0]" not in message
    assert "kube-scheduler" in message and equivalent in message


def test_what_kube_scheduler_honours_is_admitted(scheduler_allocated: ApiClient) -> None:
    """Capacity requests, CEL selectors, constraints, and the settings prepare applies
    (priority, the core limit policy, numaBind off) are all honoured in this mode."""
    selector = {"cel": {"expression": f"device.attributes['{DRIVER}'].uuid == '{UUID}'"}}
    spec = _spec(
        _entry({**PARAMS, "priority": 0, "coreLimitPolicy": "force", "numaBind": False}),
        _entry({"memory": "10Gi", "useUUIDs": [UUID]}, driver="other.example.com"),
        capacity={"requests": {"memory": "10Gi", "cores": "30"}},
        selectors=[selector],
    )
    spec["devices"]["constraints"] = [{"requests": ["gpu"], "matchAttribute": f"{DRIVER}/numa"}]
    _create_claim(scheduler_allocated, "honoured", spec)
    _create_template(scheduler_allocated, "honoured", spec)
    _create_claim(
        scheduler_allocated, "bare", {"devices": {"requests": spec["devices"]["requests"]}}
    )


def test_device_classes_are_checked_on_create_and_update(scheduler_allocated: ApiClient) -> None:
    """An administrator's class config is as invisible to kube-scheduler as a claim's."""
    classes = client.ResourceV1Api(scheduler_allocated)
    body = {
        "metadata": {"name": "plain.vgpu.hami.io"},
        "spec": {"config": [{"opaque": {"driver": DRIVER, "parameters": {**PARAMS}}}]},
    }
    classes.create_device_class(body)
    sized = {"opaque": {"driver": DRIVER, "parameters": {**PARAMS, "disableControl": True}}}
    body["spec"]["config"].append(sized)
    classes.replace_device_class("plain.vgpu.hami.io", body)
    body["spec"]["config"][0]["opaque"]["parameters"]["useTypes"] = ["A100"]
    with pytest.raises(ApiException) as raised:
        classes.replace_device_class("plain.vgpu.hami.io", body)
    assert raised.value.status == 422
    assert "spec.config[0].opaque.parameters.useTypes: kube-scheduler" in raised.value.body
    body["metadata"]["name"] = "sized.vgpu.hami.io"
    with pytest.raises(ApiException) as raised:
        classes.create_device_class(body)
    assert "spec.config[0].opaque.parameters.useTypes" in raised.value.body


def test_claims_stored_before_the_policy_can_still_be_updated(admin: ApiClient) -> None:
    """Only creation is checked: kube-scheduler's and kube-controller-manager's writes
    (finalizers, deallocation) on a claim that predates the policy go through."""
    _create_claim(admin, "older", _spec(_entry({**PARAMS, "memory": "10Gi"})))
    _install(admin, OVERLAY)
    resources = client.ResourceV1Api(admin)
    finalizer = {"metadata": {"finalizers": ["resource.kubernetes.io/delete-protection"]}}
    resources.patch_namespaced_resource_claim("older", NS, finalizer)
    resources.patch_namespaced_resource_claim("older", NS, {"metadata": {"finalizers": None}})


def test_the_controller_allocated_overlay_reads_vgpuconfig_and_does_not_refuse_it(
    admin: ApiClient,
) -> None:
    controller_allocated = [d["metadata"]["name"] for d in admission_policies("dra")]
    assert POLICY not in controller_allocated
    scheduler_allocated = [
        d for d in admission_policies(OVERLAY) if d["metadata"]["name"] == POLICY
    ]
    assert [d["kind"] for d in scheduler_allocated] == list(COLLECTIONS)
    _install(admin, "dra")
    _create_claim(admin, "sized", _spec(_entry({**PARAMS, "memory": "10Gi", "useTypes": ["A100"]})))
