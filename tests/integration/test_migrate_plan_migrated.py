"""`dra-driver migrate plan` on workloads already migrated: reported as done, not as failures.

Seen on a real cluster: a pod the `/migrate` webhook had moved to DRA (Running, its
claim `vgpu-migrated` made from the template) and a Deployment whose template carries
that claim were listed as "not migrated: already has a claim named 'vgpu-migrated'".
A workload that asks for nothing through HAMi any more and holds the migration's claim
is migrated; only one that asks both ways is a problem.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from dra_driver.cli import main
from dra_driver.migration.command import load_backends
from dra_driver.objects.migration import (
    build_claim_spec,
    build_migrated_pod,
    plan_migration,
    template_name,
)

ROOT = Path(__file__).resolve().parents[2]
DEVICE_CONFIG = ROOT / "simulator" / "device-config.yaml"
LEGACY_POD = ROOT / "examples" / "legacy" / "shared-gpu.yaml"


def _migrated(name: str) -> tuple[dict[str, Any], str]:
    """The example pod as the webhook returns it, and the template its claim comes from."""
    pod = yaml.safe_load(LEGACY_POD.read_text())
    pod["metadata"]["name"] = name
    backends = load_backends(DEVICE_CONFIG)
    migration = plan_migration(pod, backends)
    template = template_name(build_claim_spec(migration))
    return build_migrated_pod(pod, migration, backends, template), template


def _deployment(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def _plan(kubeconfig: Path, capsys, ns: str, *args: str) -> str:
    argv = ["migrate", "plan", "--kubeconfig", str(kubeconfig), "--namespace", ns, *args]
    assert main([*argv, "--device-config-file", str(DEVICE_CONFIG)]) == 0
    return capsys.readouterr().out


def _create_running(api: ApiClient, ns: str, pod: dict[str, Any]) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, pod)
    core.patch_namespaced_pod_status(pod["metadata"]["name"], ns, {"status": {"phase": "Running"}})


def test_migrated_pods_and_templates_are_reported_as_migrated(
    api: ApiClient, kubeconfig: Path, ns: str, capsys
) -> None:
    pod, template = _migrated("moved")
    _create_running(api, ns, pod)
    client.AppsV1Api(api).create_namespaced_deployment(ns, _deployment("served", pod))

    view = json.loads(_plan(kubeconfig, capsys, ns, "-o", "json"))
    by_name = {(w["kind"], w["name"]): w for w in view}
    assert set(by_name) == {("Pod", "moved"), ("Deployment", "served")}
    for workload in by_name.values():
        assert workload["migrated"] is True, workload
        assert workload["problems"] == [], workload
        assert workload["template"] == template

    text = _plan(kubeconfig, capsys, ns)
    assert "not migrated" not in text
    assert text.count(f"claim vgpu-migrated from {template}") == 2, text


def test_a_pod_asking_both_ways_is_still_refused(
    api: ApiClient, kubeconfig: Path, ns: str, capsys
) -> None:
    """The migration's claim plus HAMi requests left over: moving it again would add a
    second claim of the same name, so it stays a problem, named."""
    pod, _ = _migrated("both")
    pod["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    _create_running(api, ns, pod)

    (workload,) = json.loads(_plan(kubeconfig, capsys, ns, "-o", "json"))
    assert workload["migrated"] is False
    assert workload["translatable"] is False
    assert {
        "field": "spec.resourceClaims",
        "reason": "already has a claim named 'vgpu-migrated'",
    } in (workload["problems"])
