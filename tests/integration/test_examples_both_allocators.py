"""Every example in examples/dra/ under both DRA allocators: the controller
(`--mode dra`) and kube-scheduler (`--mode dra-scheduler-allocated`).

Each example says at its top which mode it is for. One simulation per mode runs
that mode's bundled examples (the simulator picks them by that mark); an example
for both must end the same way under both (running or refused) and be charged
the same on every GPU it holds. An example for the controller alone must be
refused when created under kube-scheduler, by the overlay's admission policy,
naming the VGPUConfig field it cannot read.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from simulate_patience import PATIENT

from dra_driver.cli import main
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.yaml_files import read_yaml_documents
from simulator.apiserver import APIServer
from simulator.deviceclasses import device_classes
from simulator.policies import install_policies
from simulator.settings import DRA_ALLOCATORS, EXAMPLES, Mode, example_modes
from simulator.workloads import apply_workloads, load_scenario

EXAMPLE_FILES = sorted((EXAMPLES / "dra").glob("*.yaml"))
BOTH = DRA_ALLOCATORS
MODE_NAMES = tuple(mode.value for mode in Mode)

Outcome = tuple[bool, tuple[tuple[int, int], ...]]
"""Whether the pod runs, and the (memory bytes, cores) charged on each GPU it holds."""


def _simulate(mode: Mode) -> dict[str, Any]:
    """A run over the mode's bundled examples (none named: the simulator picks them)."""
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        status = main(["simulate", *PATIENT, "-o", "json", "--mode", mode.value])
    assert status == 0, output.getvalue()[-2000:]
    report: dict[str, Any] = json.loads(output.getvalue())
    return report


def _outcomes(report: dict[str, Any]) -> dict[str, Outcome]:
    charged: dict[str, list[tuple[int, int]]] = {}
    for gpu in report["gpus"]:
        for share in gpu["shares"]:
            for pod in share["pods"]:
                charged.setdefault(pod, []).append((share["memoryBytes"], share["cores"]))
    return {
        pod["name"]: (pod["phase"] == "Running", tuple(sorted(charged.get(pod["name"], []))))
        for pod in report["pods"]
    }


@pytest.fixture(scope="module")
def outcomes() -> dict[Mode, dict[str, Outcome]]:
    return {mode: _outcomes(_simulate(mode)) for mode in BOTH}


def _pods(example: Path) -> list[str]:
    return [
        document["metadata"]["name"]
        for document in read_yaml_documents(example)
        if isinstance(document, dict) and document.get("kind") == "Pod"
    ]


async def _refusal(example: Path, root: Path) -> str:
    """What creating the example says under the scheduler-allocated overlay's policies."""
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
        try:
            await install_policies(client, Mode.DRA_SCHEDULER.value)
            for device_class in device_classes():
                await client.create("/apis/resource.k8s.io/v1/deviceclasses", device_class)
            scenario = load_scenario([example], Mode.DRA_SCHEDULER.value, MODE_NAMES)
            with pytest.raises(InvalidParameterError) as raised:
                await apply_workloads(client, scenario.workloads, "default")
        finally:
            await client.aclose()
    return str(raised.value)


def test_every_example_says_which_mode_it_is_for() -> None:
    assert EXAMPLE_FILES
    unmarked = [path.name for path in EXAMPLE_FILES if example_modes(path) is None]
    assert unmarked == [], "each example's first line is `# Mode: ...`"


def test_each_mode_runs_the_examples_marked_for_it(
    outcomes: dict[Mode, dict[str, Outcome]],
) -> None:
    for mode in BOTH:
        marked = {
            pod
            for path in EXAMPLE_FILES
            if mode in (example_modes(path) or ())
            for pod in _pods(path)
        }
        assert set(outcomes[mode]) == marked, mode


@pytest.mark.parametrize("example", EXAMPLE_FILES, ids=lambda path: path.stem)
async def test_an_example_ends_the_same_under_both_allocators_or_says_why_not(
    example: Path,
    outcomes: dict[Mode, dict[str, Outcome]],
    tmp_path: Path,
) -> None:
    modes = example_modes(example)
    assert modes is not None, f"{example.name} does not say which mode it is for"
    pods = _pods(example)
    assert pods, f"{example.name} has no pod"
    if modes == BOTH:
        for pod in pods:
            assert outcomes[Mode.DRA][pod] == outcomes[Mode.DRA_SCHEDULER][pod], pod
        return
    (only,) = modes
    for pod in pods:
        assert pod in outcomes[only]
    if only is Mode.DRA_SCHEDULER:
        pytest.skip("the controller has no admission check for scheduler-only examples")
    refusal = await _refusal(example, tmp_path)
    assert "denied request: spec.spec.devices.config[0].opaque.parameters." in refusal
    assert "kube-scheduler allocates the claims of this cluster" in refusal


def test_the_mark_is_the_first_line(tmp_path: Path) -> None:
    marks = {
        "# Mode: both. Capacity requests only.\n": BOTH,
        "# Mode: controller-allocated. Why.\n": frozenset({Mode.DRA}),
        "# Mode: scheduler-allocated\n": frozenset({Mode.DRA_SCHEDULER}),
        "# A workload.\n# Mode: both\n": None,
        "apiVersion: v1\n": None,
    }
    for position, (text, modes) in enumerate(marks.items()):
        path = tmp_path / f"{position}.yaml"
        path.write_text(text)
        assert example_modes(path) == modes, text
