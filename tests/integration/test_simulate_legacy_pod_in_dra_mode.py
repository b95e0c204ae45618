"""`dra-driver simulate --mode dra` given a legacy GPU pod: no node of a DRA cluster lists
`nvidia.com/gpu` (no device plugin serves it), so kube-scheduler leaves the pod Pending,
`Insufficient nvidia.com/gpu` on every node, and the report says so; it never runs on a
node that has no GPU for it."""

from __future__ import annotations

import json
from pathlib import Path

from simulate_patience import PATIENT

from dra_driver.cli import main

LEGACY_WHOLE_GPU = Path(__file__).resolve().parents[2] / "examples" / "legacy" / "whole-gpu.yaml"


def test_a_legacy_gpu_pod_stays_pending_with_kube_schedulers_reason(capsys) -> None:
    status = main(
        [
            "simulate",
            *PATIENT,
            "-o",
            "json",
            "--mode",
            "dra",
            "--nodes",
            "1",
            "--vendors",
            "nvidia,amd",
            "--scenario",
            str(LEGACY_WHOLE_GPU),
        ]
    )
    report = json.loads(capsys.readouterr().out)

    (pod,) = report["pods"]
    assert (pod["name"], pod["phase"], pod["node"]) == ("legacy-whole", "Pending", "")
    assert pod["reason"] == (
        "Unschedulable: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu. no new claims "
        "to deallocate, preemption: 0/2 nodes are available: 2 Preemption is not helpful for "
        "scheduling."
    )
    assert status == 0, "a pod refused with a reason is a settled run"
