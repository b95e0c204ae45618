"""`dra-driver simulate` with every family: the default run places each vendor's example
on that vendor's node through its DeviceClass, with the family's rules applied."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from simulate_patience import PATIENT

from dra_driver.cli import main
from dra_driver.objects.dra_vendors import DRA_VENDORS, dra_vendor

GIB = 1 << 30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dra"
VENDOR_EXAMPLES = {
    "mlu": "mlu",
    "dcu": "dcu",
    "ascend": "ascend",
    "iluvatar": "iluvatar",
    "metax": "metax",
    "mthreads": "mthreads",
    "gcu": "gcu-whole",
    "xpu": "xpu-quarter",
    "neuron": "neuron-core",
    "amd": "amd",
    "vastai": "vastai-whole",
    "biren": "biren-whole",
}
"""Family -> the pod of its example in examples/dra/."""


def simulate(capsys, *args: str) -> dict:
    status = main(["simulate", *PATIENT, "-o", "json", *args])
    report = json.loads(capsys.readouterr().out)
    report["exit"] = status
    return report


@pytest.fixture(scope="module")
def default_run() -> dict:
    """One default run for the module's checks (it starts a node of every family)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["simulate", *PATIENT, "-o", "json"])
    report = json.loads(out.getvalue())
    report["exit"] = status
    return report


def cards_of(report: dict, pod: str) -> list[dict]:
    return [g for g in report["gpus"] for s in g["shares"] if pod in s["pods"]]


def test_default_run_shares_cards_of_every_family_each_from_its_class(default_run):
    report = default_run
    assert report["exit"] == 0
    vendors_with_shares = {g["vendor"] for g in report["gpus"] if g["shares"]}
    assert len(vendors_with_shares) >= 5
    assert vendors_with_shares == {v.request_type for v in DRA_VENDORS}
    pods = {pod["name"]: pod for pod in report["pods"]}
    for vendor_id, pod_name in VENDOR_EXAMPLES.items():
        vendor = dra_vendor(vendor_id)
        pod = pods[pod_name]
        assert pod["phase"] == "Running", (pod_name, pod["reason"])
        assert pod["node"] == f"sim-{vendor_id}-0"
        (gpu,) = cards_of(report, pod_name)
        assert (gpu["vendor"], gpu["node"]) == (vendor.request_type, pod["node"])
        assert vendor.request_type in gpu["type"]
        env = pod["containers"]["app"]["env"]
        assert env["VGPU_SHARE_VENDOR"] == vendor_id
        assert not any(name.startswith("CUDA_") for name in env), pod_name


def test_default_run_applies_each_familys_rules(default_run):
    report = default_run
    pods = {pod["name"]: pod for pod in report["pods"]}

    def share(pod: str) -> dict:
        (gpu,) = cards_of(report, pod)
        (held,) = [s for s in gpu["shares"] if pod in s["pods"]]
        return {"gpu": gpu, **held}

    # Kunlunxin vXPU: 20 GiB asked, the 24 GiB tier (a quarter of the card) held and limited.
    xpu = share("xpu-quarter")
    assert xpu["memoryBytes"] == 24 * GIB == xpu["gpu"]["memoryBytes"] // 4
    assert pods["xpu-quarter"]["containers"]["app"]["env"]["VGPU_SHARE_MEMORY_LIMIT_0"] == "24576m"
    # Whole-card families: one share holding all of the card.
    for pod in ("gcu-whole", "vastai-whole", "biren-whole"):
        whole = share(pod)
        assert whole["gpu"]["sharesTotal"] == 1
        assert (whole["memoryBytes"], whole["cores"]) == (whole["gpu"]["memoryBytes"], 100)
    # AWS Neuron: one of two NeuronCores.
    assert share("neuron-core")["cores"] == 50
    # The vendors' own runtime variables.
    amd = pods["amd"]["containers"]["app"]["env"]
    assert amd["HIP_DEVICE_MEMORY_LIMIT"] == "49152m" and "ROCR_VISIBLE_DEVICES" in amd
    assert "ASCEND_VISIBLE_DEVICES" in pods["ascend"]["containers"]["app"]["env"]
    # NVIDIA's examples stay on NVIDIA nodes with libvgpu's limits.
    inference = pods["inference"]
    assert inference["node"].startswith("sim-node-")
    assert inference["containers"]["server"]["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == "10240m"


def test_vendors_flag_builds_only_those_families(capsys):
    scenario = EXAMPLES / "ascend-share.yaml"
    report = simulate(
        capsys, "--vendors", "ascend,mlu", "--vendor-nodes", "2", "--scenario", str(scenario)
    )
    assert report["exit"] == 0
    nodes = sorted({g["node"] for g in report["gpus"]})
    assert nodes == ["sim-ascend-0", "sim-ascend-1", "sim-mlu-0", "sim-mlu-1"]
    assert {g["vendor"] for g in report["gpus"]} == {"Ascend", "MLU"}


def test_an_unknown_vendor_is_refused_by_the_flag(capsys):
    with pytest.raises(SystemExit) as caught:
        main(["simulate", *PATIENT, "--vendors", "nvidia,tpu"])
    assert caught.value.code == 2
    assert "unknown vendor 'tpu'" in capsys.readouterr().err
