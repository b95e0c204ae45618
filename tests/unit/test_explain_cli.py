"""`dra-driver explain` on inventories with several nodes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from dra_driver.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def write(tmp_path: Path, name: str, document) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(document))
    return path


def run_json(capsys, inventory: Path, workload: Path) -> tuple[int, dict]:
    status = main(["explain", "-i", str(inventory), "-w", str(workload), "-o", "json"])
    return status, json.loads(capsys.readouterr().out)


def gpu_pod(limits, annotations=None, namespace="default"):
    return {
        "kind": "Pod",
        "metadata": {"name": "job", "namespace": namespace, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "main", "resources": {"limits": limits}}]},
    }


def test_bundled_example_places_pod_and_explains_the_others(capsys):
    status, result = run_json(
        capsys, EXAMPLES / "inventory.yaml", EXAMPLES / "pod-two-containers.yaml"
    )
    assert status == 0
    assert result["node"] == "gpu-node-b"
    names = [c["name"] for c in result["containers"]]
    assert names == ["init:warmup", "train", "sidecar", "eval"]
    train = result["containers"][1]["devices"]
    assert {d["memoryMiB"] for d in train} == {16000}
    assert len({d["id"] for d in train}) == 2
    assert result["reasons"] == {
        "gpu-node-a": "1/4 AllocatedCardsInsufficientRequest, 1/4 CardCordoned, "
        "1/4 CardInsufficientCore, 1/4 CardNotHealth",
        "gpu-node-c": "2/2 CardTypeMismatch",
    }


def test_refusal_lists_each_nodes_reason(capsys, tmp_path):
    workload = write(
        tmp_path, "pod.yaml", gpu_pod({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 82000})
    )
    status, result = run_json(capsys, EXAMPLES / "inventory.yaml", workload)
    assert status == 1
    assert result["fits"] is False and result["node"] is None
    assert result["reasons"] == {
        "gpu-node-a": "1/4 CardCordoned, 1/4 CardNotHealth, 2/4 CardInsufficientMemory",
        "gpu-node-b": "2/2 CardInsufficientMemory",
        "gpu-node-c": "2/2 CardInsufficientMemory",
    }
    assert result["summary"].startswith("no available node, 3 nodes do not meet: ")
    assert "3 nodes CardInsufficientMemory(gpu-node-a,gpu-node-b,gpu-node-c)" in result["summary"]


def test_dropped_memory_request_is_explained(capsys, tmp_path):
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": "16Gi"}
    workload = write(tmp_path, "pod.yaml", gpu_pod(limits))
    status, result = run_json(capsys, EXAMPLES / "inventory.yaml", workload)
    assert status == 0
    assert result["containers"] == [{"name": "main", "init": False, "devices": []}]
    (why,) = result["dropped"]
    assert why.startswith("spec.containers[0].resources.nvidia.com/gpumem: 16Gi is not a whole")
    assert main(["explain", "-i", str(EXAMPLES / "inventory.yaml"), "-w", str(workload)]) == 0
    text = capsys.readouterr().out
    assert "main: no devices" in text
    assert f"requests ignored, as HAMi ignores them:\n  {why}" in text


def test_bad_scoring_weights_are_refused_with_hamis_message(capsys, tmp_path):
    annotations = {"hami.io/device-scoring-weights": "slot=1,core=1"}
    workload = write(tmp_path, "pod.yaml", gpu_pod({"nvidia.com/gpu": 1}, annotations))
    assert main(["explain", "-i", str(EXAMPLES / "inventory.yaml"), "-w", str(workload)]) == 2
    assert (
        'invalid hami.io/device-scoring-weights annotation "slot=1,core=1": '
        "expected slot, core, and memory weights"
    ) in capsys.readouterr().err


def test_quota_refusal(capsys, tmp_path):
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 9000, "nvidia.com/gpucores": 10}
    workload = write(tmp_path, "pod.yaml", gpu_pod(limits, namespace="team-small"))
    status, result = run_json(capsys, EXAMPLES / "inventory.yaml", workload)
    assert status == 1
    assert result["reasons"]["gpu-node-b"] == "2/2 ResourceQuotaNotFit"


def test_text_output_names_node_and_devices(capsys, tmp_path):
    workload = write(
        tmp_path,
        "pod.yaml",
        gpu_pod(
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000, "nvidia.com/gpucores": 10},
            annotations={"nvidia.com/use-gputype": "T4"},
        ),
    )
    status = main(["explain", "-i", str(EXAMPLES / "inventory.yaml"), "-w", str(workload)])
    out = capsys.readouterr().out
    assert status == 0
    assert out.startswith("default/job -> node gpu-node-c\n")
    assert "memory 1000 MiB, cores 10%" in out
    assert "gpu-node-a: 1/4 CardCordoned, 1/4 CardNotHealth, 2/4 CardTypeMismatch" in out


def test_bad_inventory_names_the_field(capsys, tmp_path):
    inventory = write(
        tmp_path,
        "inv.yaml",
        {"nodes": [{"name": "n", "devices": [{"id": "GPU-1", "index": 0, "type": "NVIDIA"}]}]},
    )
    workload = write(tmp_path, "pod.yaml", gpu_pod({"nvidia.com/gpu": 1}))
    status = main(["explain", "-i", str(inventory), "-w", str(workload)])
    assert status == 2
    assert "nodes.0.devices.0.memory: Field required" in capsys.readouterr().err


def test_unknown_workload_kind_is_refused(capsys, tmp_path):
    inventory = EXAMPLES / "inventory.yaml"
    workload = write(tmp_path, "svc.yaml", {"kind": "Service", "metadata": {"name": "x"}})
    assert main(["explain", "-i", str(inventory), "-w", str(workload)]) == 2
    assert "workload.kind: expected Pod or ResourceClaim, got 'Service'" in capsys.readouterr().err


def test_print_schema_is_json_schema(capsys):
    assert main(["explain", "--print-schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert "nodes" in schema["properties"]
    assert "splitCount" in schema["$defs"]["DeviceSpec"]["properties"]


def test_console_script_runs_in_a_fresh_process():
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "explain",
            "-i",
            str(EXAMPLES / "inventory.yaml"),
            "-w",
            str(EXAMPLES / "pod-two-containers.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    assert "ml/trainer -> node gpu-node-b" in completed.stdout


def test_committed_inventory_schema_is_current():
    committed = json.loads((EXAMPLES.parent / "docs" / "inventory.schema.json").read_text())
    from dra_driver.explain.inventory_file import inventory_schema

    assert committed == inventory_schema()
