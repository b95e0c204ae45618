"""deploy/: the controller-allocated overlay gates pods of our classes at admission and
lets the controller remove only its own gate; the scheduler-allocated and legacy overlays
gate nothing. Rendered with kustomize (skipped without kubectl)."""

from __future__ import annotations

from typing import Any

import pytest
from deploy_manifests import NAMESPACE, find, render

from controller.legacy.caller_auth import ALLOCATION_GATE_PATH
from dra_driver.cli import build_parser

WEBHOOK = "vgpu-allocation-gate"
POLICY = "vgpu-controller-pod-gate"


def _container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    (container,) = [
        c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]
    return container


def _flag(args: list[str], name: str) -> str:
    (value,) = [arg.split("=", 1)[1] for arg in args if arg.startswith(f"{name}=")]
    return value


def test_the_dra_overlay_gates_pods_of_our_classes_and_fails_open() -> None:
    dra = render("dra")
    (webhook,) = find(dra, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] == 3
    assert webhook["sideEffects"] == "None"
    assert webhook["reinvocationPolicy"] == "Never"
    assert webhook["admissionReviewVersions"] == ["v1"]
    (rule,) = webhook["rules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        [""],
        ["pods"],
        ["CREATE"],
    )
    (excluded,) = webhook["namespaceSelector"]["matchExpressions"]
    assert excluded["key"] == "kubernetes.io/metadata.name"
    assert excluded["operator"] == "NotIn"
    assert set(excluded["values"]) == {"kube-system", NAMESPACE}
    # The gate policy and the controller's right to patch pods come with it.
    find(dra, "ValidatingAdmissionPolicy", POLICY)
    find(dra, "ValidatingAdmissionPolicyBinding", POLICY)
    find(dra, "ClusterRoleBinding", "vgpu-controller-pod-gate")


def test_the_webhook_reaches_every_controller_replica_over_tls() -> None:
    dra = render("dra")
    (webhook,) = find(dra, "MutatingWebhookConfiguration", WEBHOOK)["webhooks"]
    target = webhook["clientConfig"]["service"]
    assert target["path"] == ALLOCATION_GATE_PATH
    assert target["namespace"] == NAMESPACE
    service = find(dra, "Service", target["name"])
    (port,) = service["spec"]["ports"]
    assert port["port"] == target["port"]
    controller = find(dra, "Deployment", "vgpu-controller")
    assert service["spec"]["selector"].items() <= (
        controller["spec"]["template"]["metadata"]["labels"].items()
    )
    container = _container(controller, "controller")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    parsed = build_parser().parse_args(args)
    assert parsed.webhook_port == ports[port["targetPort"]]
    # The serving certificate is the Secret the certs Job writes for that Service, and
    # the Job sets the webhook's caBundle.
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in controller["spec"]["template"]["spec"]["volumes"]}
    (tls,) = [name for name, path in mounts.items() if _flag(args, "--tls-cert").startswith(path)]
    secret = volumes[tls]["secret"]["secretName"]
    job_args = _container(find(dra, "Job", "vgpu-controller-certs"), "certs")["args"]
    assert _flag(job_args, "--secret") == secret
    assert _flag(job_args, "--service") == service["metadata"]["name"]
    assert _flag(job_args, "--webhook") == WEBHOOK
    assert _flag(job_args, "--client-secret") == ""


@pytest.mark.parametrize("overlay", ["dra-scheduler-allocated", "legacy"])
def test_where_kube_scheduler_allocates_nothing_is_gated(overlay: str) -> None:
    objects = render(overlay)
    named = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("MutatingWebhookConfiguration", WEBHOOK) not in named
    assert ("ValidatingAdmissionPolicy", POLICY) not in named
    assert not [o for o in objects if "gate" in o["metadata"]["name"]]
