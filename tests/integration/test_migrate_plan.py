"""`dra-driver migrate plan` against the API emulator: bare pods and controllers' pod
templates, each with what it would become or why it cannot move; nothing is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from dra_driver.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "legacy"
DEVICE_CONFIG = Path(__file__).resolve().parents[2] / "simulator" / "device-config.yaml"


def _example(name: str) -> dict[str, Any]:
    """The example pod, its resource values as the strings the API returns."""
    pod = next(d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d)
    for container in pod["spec"]["containers"]:
        for part, values in (container.get("resources") or {}).items():
            container["resources"][part] = {k: str(v) for k, v in values.items()}
    return pod


def _deployment(name: str, pod: dict[str, Any]) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def _plan(kubeconfig: Path, capsys, *args: str) -> str:
    argv = ["migrate", "plan", "--kubeconfig", str(kubeconfig), *args]
    assert main([*argv, "--device-config-file", str(DEVICE_CONFIG)]) == 0
    return capsys.readouterr().out


def test_plan_lists_each_workload_with_its_claim_or_reason(
    api: ApiClient, kubeconfig: Path, ns: str, capsys
) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    core.create_namespaced_pod(ns, _example("shared-gpu.yaml"))
    core.create_namespaced_pod(
        ns,
        {"metadata": {"name": "cpu-only"}, "spec": {"containers": [{"name": "c", "image": "x"}]}},
    )
    apps.create_namespaced_deployment(ns, _deployment("metax", _example("metax-whole-card.yaml")))
    apps.create_namespaced_deployment(ns, _deployment("mlu", _example("mlu-share.yaml")))

    view = json.loads(_plan(kubeconfig, capsys, "-o", "json", "--namespace", ns))
    by_name = {(w["kind"], w["name"]): w for w in view}
    assert set(by_name) == {
        ("Pod", "legacy-shared"),
        ("Deployment", "metax"),
        ("Deployment", "mlu"),
    }
    shared = by_name[("Pod", "legacy-shared")]
    assert shared["translatable"] is True
    assert shared["template"].startswith("vgpu-migrated-")
    (request,) = shared["requests"]
    assert (request["deviceClass"], request["count"], request["memoryMiB"], request["cores"]) == (
        "nvidia.vgpu.hami.io",
        1,
        3000,
        30,
    )
    mlu = by_name[("Deployment", "mlu")]
    assert [r["deviceClass"] for r in mlu["requests"]] == ["mlu.vgpu.hami.io"]
    metax = by_name[("Deployment", "metax")]
    assert metax["translatable"] is False
    assert metax["template"] is None
    assert "no DRA DeviceClass" in metax["problems"][0]["reason"]
    templates = client.ResourceV1Api(api).list_namespaced_resource_claim_template(ns)
    assert templates.items == []


def test_text_plan_shows_classes_and_reasons(
    api: ApiClient, kubeconfig: Path, ns: str, capsys
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _example("whole-gpu.yaml"))
    core.create_namespaced_pod(ns, _example("metax-whole-card.yaml"))
    text = _plan(kubeconfig, capsys, "--namespace", ns)
    assert "nvidia.vgpu.hami.io 1x 100% cores" in text
    assert "not migrated" in text
    assert "no DRA DeviceClass" in text


DEPLOYED = Path(__file__).resolve().parents[2] / "deploy/components/legacy/device-config.yaml"


def test_without_a_file_the_plan_reads_the_deployed_device_config(
    api: ApiClient, kubeconfig: Path, ns: str, capsys
) -> None:
    """HAMi's defaults have no Biren section: a Biren pod is planned only because the plan
    read the cluster's own vgpu-scheduler-device ConfigMap, as the scheduler does."""
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, _example("biren-whole-card.yaml"))
    argv = ["migrate", "plan", "--kubeconfig", str(kubeconfig), "-o", "json", "--namespace", ns]

    assert main(argv) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out) == []
    assert "planning with HAMi's default device config" in captured.err

    deployed = yaml.safe_load(DEPLOYED.read_text())
    if "vgpu-system" not in {n.metadata.name for n in core.list_namespace().items}:
        core.create_namespace({"metadata": {"name": "vgpu-system"}})
    core.create_namespaced_config_map("vgpu-system", deployed)
    assert main(argv) == 0
    (biren,) = json.loads(capsys.readouterr().out)
    assert [r["deviceClass"] for r in biren["requests"]] == ["biren.vgpu.hami.io"]
