"""`dra-driver simulate --mode legacy`: a node of every family, each vendor's example pod
placed on its vendor's node by the real webhook, /filter and /bind, with the pod keys
HAMi's PatchAnnotations writes for that vendor (hami-vendors.md), and the vendor plugin's
stand-in's bind-phase success and lock release after /bind."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from simulate_patience import PATIENT

from dra_driver.cli import main


@dataclass(frozen=True)
class Expected:
    node: str
    vendor: str
    """HAMi's request type, written as the device's Type unless the card's type is kept."""
    keys: tuple[str, ...]
    """PatchAnnotations' device keys, each holding `uuid,type,mem,cores:` per device."""
    extra: tuple[str, ...] = ()
    """The vendor's own device-plugin annotations."""
    memory_mib: int | None = None
    cores: int | None = None


EXPECTED = {
    "legacy-mlu": Expected(
        "sim-mlu-0",
        "MLU",
        ("hami.io/cambricon-mlu-devices-to-allocate", "hami.io/cambricon-mlu-devices-allocated"),
        ("CAMBRICON_DSMLU_ASSIGNED", "CAMBRICON_DSMLU_PROFILE"),
        memory_mib=20 * 256,
        cores=10,
    ),
    "legacy-dcu": Expected(
        "sim-dcu-0",
        "DCU",
        ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated"),
        memory_mib=2000,
        cores=60,
    ),
    "legacy-ascend": Expected(
        "sim-ascend-0",
        "Ascend910B3",
        ("hami.io/Ascend910B3-devices-to-allocate", "hami.io/Ascend910B3-devices-allocated"),
        ("huawei.com/Ascend910B3", "predicate-time"),
        memory_mib=16384,
    ),
    "legacy-iluvatar": Expected(
        "sim-iluvatar-0",
        "BI-V100",
        ("hami.io/BI-V100-devices-to-allocate", "hami.io/BI-V100-devices-allocated"),
        memory_mib=64 * 256,
        cores=50,
    ),
    "legacy-metax": Expected(
        "sim-metax-0",
        "Metax-GPU",
        ("hami.io/metax-gpu-devices-to-allocate", "hami.io/metax-gpu-devices-allocated"),
    ),
    "legacy-mthreads": Expected(
        "sim-mthreads-0",
        "Mthreads",
        ("hami.io/mthreads-vgpu-devices-allocated",),
        ("mthreads.com/gpu-index", "mthreads.com/predicate-node", "mthreads.com/predicate-time"),
        memory_mib=32 * 512,
        cores=8,
    ),
    "legacy-gcu": Expected(
        "sim-gcu-0",
        "GCU",
        ("hami.io/enflame-gcu-devices-to-allocate", "hami.io/enflame-gcu-devices-allocated"),
        cores=100,
    ),
    "legacy-xpu": Expected(
        "sim-xpu-0",
        "XPU",
        ("hami.io/xpu-devices-to-allocate", "hami.io/xpu-devices-allocated"),
        memory_mib=24576,
    ),
    "legacy-neuron": Expected(
        "sim-neuron-0",
        "AWSNeuron",
        ("hami.io/aws-neuron-devices-allocated",),
        ("AWS_NEURON_IDS", "NEURON_ALLOCATED", "aws.amazon.com/predicate-node"),
    ),
    "legacy-amd": Expected(
        "sim-amd-0",
        "AMD",
        ("hami.io/amd-devices-to-allocate", "hami.io/amd-devices-allocated"),
        memory_mib=16384,
        cores=25,
    ),
    "legacy-vastai": Expected(
        "sim-vastai-0",
        "Vastai",
        ("hami.io/Vastai-devices-to-allocate", "hami.io/Vastai-devices-allocated"),
    ),
    "legacy-biren": Expected(
        "sim-biren-0",
        "Biren",
        ("hami.io/Biren-devices-to-allocate", "hami.io/Biren-devices-allocated"),
    ),
}


@pytest.fixture(scope="module")
def default_run() -> dict:
    """One default legacy run for the module's tests (it starts 15 nodes)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = main(["simulate", *PATIENT, "--mode", "legacy", "-o", "json"])
    report = json.loads(out.getvalue())
    report["exit"] = status
    return report


def pods(report: dict) -> dict[str, dict]:
    return {pod["name"]: pod for pod in report["pods"]}


def test_every_pod_runs_and_the_run_exits_0(default_run) -> None:
    found = pods(default_run)
    assert default_run["exit"] == 0
    assert set(EXPECTED) <= set(found)
    assert {name for name, pod in found.items() if pod["phase"] != "Running"} == set()
    # The NVIDIA examples still go through the real device plugin's Allocate.
    nvidia = [pod for pod in found.values() if pod["node"].startswith("sim-node-")]
    assert {pod["name"] for pod in nvidia} == {"legacy-half", "legacy-shared", "legacy-whole"}
    assert all(d["vendor"] == "NVIDIA" for pod in nvidia for d in pod["devices"])


def test_only_the_chosen_vendors_nodes_are_started() -> None:
    out = io.StringIO()
    scenario = str(Path(__file__).resolve().parents[2] / "examples" / "legacy" / "dcu-share.yaml")
    with contextlib.redirect_stdout(out):
        status = main(
            [
                "simulate",
                *PATIENT,
                "--mode",
                "legacy",
                "--vendors",
                "nvidia,dcu",
                "--nodes",
                "1",
                "--scenario",
                scenario,
                "-o",
                "json",
            ]
        )
    report = json.loads(out.getvalue())
    assert status == 0
    assert {gpu["node"] for gpu in report["gpus"]} <= {"sim-node-0", "sim-dcu-0"}
    ((pod),) = report["pods"]
    assert (pod["name"], pod["node"]) == ("legacy-dcu", "sim-dcu-0")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_vendor_pod_lands_on_its_vendor_node_with_its_pod_keys(default_run, name) -> None:
    expected = EXPECTED[name]
    pod = pods(default_run)[name]
    assert pod["node"] == expected.node
    ((device),) = pod["devices"]
    assert (device["container"], device["vendor"]) == ("app", expected.vendor)
    if expected.memory_mib is not None:
        assert device["memoryMib"] == expected.memory_mib
    if expected.cores is not None:
        assert device["cores"] == expected.cores
    keys = pod["podKeys"]
    entry = f"{device['uuid']},{device['type']},{device['memoryMib']},{device['cores']}:;"
    for key in expected.keys:
        assert keys[key] == entry, key
    assert set(expected.extra) <= set(keys), set(expected.extra) - set(keys)
    # No other vendor's device keys: Filter wrote only this vendor's.
    others = {k for e in EXPECTED.values() if e is not expected for k in e.keys}
    assert not others & set(keys)
    assert keys["hami.io/vgpu-node"] == expected.node
    # The vendor plugin's stand-in answered Bind as HAMi's plugins do.
    assert keys["hami.io/bind-phase"] == "success"
