"""`dra-driver simulate --scenario examples/priority`: phases, Kueue's release, preemption.

The scenario fills the default cluster's NVIDIA GPUs with low-priority batch pods
while Kueue holds a training pod, then Kueue admits it, then a high-priority
inference pod needs a whole card: the controller preempts the two batch pods of
one GPU and no more, and the report names them with the events.
"""

from __future__ import annotations

import json
from typing import Any

from simulate_patience import PATIENT

from controller.allocation_gate import ALLOCATION_GATE
from dra_driver.cli import main
from simulator.settings import EXAMPLES

KUEUE_GATE = "kueue.x-k8s.io/admission"
BATCH = {f"batch-{i:02d}" for i in range(1, 24)}


def test_the_priority_example_preempts_exactly_the_batch_pods_one_card_needs(capsys: Any) -> None:
    status = main(["simulate", *PATIENT, "-o", "json", "--scenario", str(EXAMPLES / "priority")])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    pods = {pod["name"]: pod for pod in report["pods"]}
    (preemption,) = report["preemptions"]
    assert preemption["preemptor"] == "default/inference"
    victims = {name.removeprefix("default/") for name in preemption["victims"]}
    assert len(victims) == 2 and victims <= BATCH
    assert set(pods) == (BATCH - victims) | {"training", "inference"}
    assert all(pod["phase"] == "Running" for pod in pods.values())
    assert preemption["node"] == pods["inference"]["node"]
    assert [event["reason"] for event in preemption["events"]].count("Preempted") == 2
    assert "Preempting" in [event["reason"] for event in preemption["events"]]
    training = pods["training"]
    assert (training["createdGates"], training["gates"]) == ([KUEUE_GATE, ALLOCATION_GATE], [])
