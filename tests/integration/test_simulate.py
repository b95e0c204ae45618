"""`dra-driver simulate` end to end: the bundled examples on 3 emulated nodes x 4 mock GPUs."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from simulate_patience import PATIENT

from dra_driver.cli import main
from dra_driver.version import build_info
from simulator.nodes import mock_gpu_uuid

GIB = 1 << 30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def simulate(capsys, *args: str) -> dict:
    status = main(["simulate", *PATIENT, "-o", "json", *args])
    report = json.loads(capsys.readouterr().out)
    report["exit"] = status
    return report


def pods_by_name(report: dict) -> dict[str, dict]:
    return {pod["name"]: pod for pod in report["pods"]}


def holders(report: dict) -> dict[str, tuple[str, str]]:
    """Claim name prefix (the template's pod) -> (node, gpu) for every share."""
    found = {}
    for gpu in report["gpus"]:
        for share in gpu["shares"]:
            for pod in share["pods"]:
                found.setdefault(pod, []).append((gpu["node"], gpu["device"], gpu["uuid"]))
    return found


def test_every_example_but_one_is_allocated_and_prepared(capsys):
    report = simulate(capsys)
    assert report["exit"] == 0
    assert {key: report[key] for key in ("version", "commit")} == build_info().fields()
    pods = pods_by_name(report)
    running = {name for name, pod in pods.items() if pod["phase"] == "Running"}
    expected = {
        path.stem for path in (EXAMPLES / "dra").glob("*.yaml") if path.stem != "cannot-fit"
    }
    assert len(running) == len(pods) - 1
    assert "too-big" not in running
    assert "CardInsufficientMemory" in pods["too-big"]["reason"]
    assert expected, "the examples are there"
    placed = holders(report)

    # Exclusive: a whole card, nobody else on it.
    ((node, device, _),) = placed["exclusive"]
    gpu = next(g for g in report["gpus"] if (g["node"], g["device"]) == (node, device))
    assert len(gpu["shares"]) == 1 and gpu["allocatedCores"] == 100

    # Two distinct GPUs of one node on one NUMA node, limits per ordinal.
    training = placed["training"]
    assert len({(n, d) for n, d, _ in training}) == 2 and len({n for n, _, _ in training}) == 1
    env = pods["training"]["containers"]["trainer"]["env"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == env["CUDA_DEVICE_MEMORY_LIMIT_1"] == "20480m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == env["CUDA_DEVICE_SM_LIMIT_1"] == "50"

    # The 10 GiB / 30 % share gets exactly those limits.
    inference = pods["inference"]["containers"]["server"]
    assert inference["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
    assert inference["env"]["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert inference["cdiDevices"] and pods["inference"]["specFiles"]

    # VGPUConfig percentage: a quarter of an 80 GiB card.
    quarter = pods["quarter"]["containers"]["notebook"]["env"]
    assert quarter["CUDA_DEVICE_MEMORY_LIMIT_0"] == "20480m"

    # The UUID filter pins the share to that GPU.
    assert [uuid for _, _, uuid in placed["pinned"]] == [mock_gpu_uuid(0, 0)]

    # Binpack joins the fullest card; spread takes an empty node.
    ((packed_node, packed_gpu, _),) = placed["packed"]
    ((spread_node, _, _),) = placed["spread"]
    packed_card = next(
        g for g in report["gpus"] if (g["node"], g["device"]) == (packed_node, packed_gpu)
    )
    assert len(packed_card["shares"]) > 1
    assert spread_node != packed_node

    # Nothing over-committed anywhere.
    for gpu in report["gpus"]:
        assert gpu["allocatedMemoryBytes"] <= gpu["memoryBytes"]
        assert gpu["allocatedCores"] <= gpu["cores"]
        assert len(gpu["shares"]) <= gpu["sharesTotal"]


def test_scheduler_allocated_mode_runs_capacity_requests_and_keeps_its_files(capsys):
    scenario = EXAMPLES / "dra" / "inference-10gi-30pct.yaml"
    work_dir = Path(tempfile.mkdtemp(prefix="sim-", dir="/tmp"))  # sockets need short paths
    try:
        report = simulate(
            capsys,
            "--mode",
            "dra-scheduler-allocated",
            "--scenario",
            str(scenario),
            "--work-dir",
            str(work_dir),
        )
        assert report["exit"] == 0
        (pod,) = report["pods"]
        assert pod["phase"] == "Running", json.dumps(pod)
        assert pod["containers"]["server"]["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"
        (spec_file,) = pod["specFiles"]
        assert Path(spec_file).is_relative_to(work_dir)
        assert "CUDA_DEVICE_MEMORY_LIMIT_0=10240m" in Path(spec_file).read_text()
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)


def test_a_bad_scenario_names_the_document(capsys, tmp_path: Path):
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: x}\n")
    assert main(["simulate", *PATIENT, "--scenario", str(scenario)]) == 2
    assert "bad.yaml#0: kind" in capsys.readouterr().err


def test_a_scenario_with_broken_yaml_names_the_file_line_and_column(capsys, tmp_path: Path):
    scenario = tmp_path / "broken.yaml"
    scenario.write_text("kind: Pod\nmetadata:\n  name: [x\n  namespace: default\n")
    assert main(["simulate", *PATIENT, "--scenario", str(scenario)]) == 2
    error = capsys.readouterr().err
    assert error.startswith(
        f"dra-driver simulate: {scenario}:4:12: not valid YAML: expected ',' or ']'"
    )
    assert "(while parsing a flow sequence at line 3, column 9)" in error
    assert "<unicode string>" not in error


def test_legacy_mode_runs_webhook_filter_bind_allocate(capsys):
    report = simulate(capsys, "--mode", "legacy")
    assert report["exit"] == 0
    pods = pods_by_name(report)
    assert {name for name, pod in pods.items() if pod["phase"] == "Running"} == set(pods)
    shared = pods["legacy-shared"]["containers"]["app"]["env"]
    assert (shared["CUDA_DEVICE_MEMORY_LIMIT_0"], shared["CUDA_DEVICE_SM_LIMIT_0"]) == (
        "3000m",
        "30",
    )
    half = pods["legacy-half"]["containers"]["app"]["env"]
    assert half["CUDA_DEVICE_MEMORY_LIMIT_0"] == half["CUDA_DEVICE_MEMORY_LIMIT_1"] == "40960m"
    # nvidia.com/gpu alone: the whole card, made exclusive by the webhook's gpucores=100.
    whole = pods["legacy-whole"]["containers"]["app"]["env"]
    assert whole["CUDA_DEVICE_SM_LIMIT_0"] == "100"
    legacy_gpus = [gpu for gpu in report["gpus"] if gpu["mode"] == "legacy"]
    whole_gpu = next(g for g in legacy_gpus if g["uuid"] == whole["NVIDIA_VISIBLE_DEVICES"])
    assert [share["holder"] for share in whole_gpu["shares"]] == ["legacy-whole"]
