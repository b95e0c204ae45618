"""The DRA simulation runs the allocation-gate webhook as deploy/overlays/dra does.

Where the controller allocates, each pod of our classes is created with the gate
`vgpu.hami.io/allocation` (the real /allocation-gate, called as kube-apiserver
calls it) and ends ungated and Running: the controller removed its gate (one pod
patch each) and kube-scheduler met the pod once, ready (one binding, no
FailedScheduling). A pod of no class of ours is never gated, and a pod another
queue still holds (Kueue's gate) is reported with its gates. Where kube-scheduler
allocates nothing is gated.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from simulate_patience import PATIENT

from controller.allocation_gate import ALLOCATION_GATE
from dra_driver.cli import main
from simulator.dra import CONTROLLER_COMPONENT, dra_cluster
from simulator.dra_simulation import wait_settled
from simulator.settings import ClusterShape, Mode, SimulationSettings
from simulator.standins import user_agents
from simulator.workloads import apply_workloads, load_scenario

KUEUE_GATE = "kueue.x-k8s.io/admission"
SHARE = {"memory": "10Gi", "cores": "10"}


def _claim_spec() -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": "nvidia.vgpu.hami.io", "capacity": {"requests": SHARE}},
    }
    return {"devices": {"requests": [request]}}


def _pod(name: str, claim: dict[str, str] | None, gates: tuple[str, ...] = ()) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "gpu", **claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _scenario(path: Path, *, kueue_held: bool) -> Path:
    """Three template pods, two with pre-created claims, a pod with no claim; and, if
    asked, a template pod Kueue holds."""
    template = {"resourceClaimTemplateName": "share"}
    documents: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "share"},
            "spec": {"spec": _claim_spec()},
        },
        *(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"claim-{i}"},
                "spec": _claim_spec(),
            }
            for i in range(2)
        ),
        *(_pod(f"template-{i}", template) for i in range(3)),
        *(_pod(f"precreated-{i}", {"resourceClaimName": f"claim-{i}"}) for i in range(2)),
        _pod("no-claim", None),
    ]
    if kueue_held:
        documents.append(_pod("queued", template, (KUEUE_GATE,)))
    path.write_text(yaml.safe_dump_all(documents))
    return path


OURS = {"template-0", "template-1", "template-2", "precreated-0", "precreated-1"}


async def test_pods_of_our_classes_are_created_gated_and_the_controller_ungates_them(
    tmp_path: Path,
) -> None:
    settings = SimulationSettings(
        mode=Mode.DRA,
        shape=ClusterShape(nodes=1, vendors=("nvidia",), gpus_per_node=2),
        settle_timeout_s=600.0,
    )
    scenario = load_scenario(
        [_scenario(tmp_path / "gate.yaml", kueue_held=False)],
        Mode.DRA.value,
        tuple(mode.value for mode in Mode),
    )
    async with dra_cluster(settings, tmp_path) as cluster:
        await apply_workloads(cluster.client, scenario.workloads, "default", cluster.admission)
        names = {("default", w.name) for w in scenario.workloads if w.kind == "Pod"}
        view = await wait_settled(cluster, names, settings.settle_timeout_s, lambda *_: None)
        writes = cluster.server.audit.write_counts()
        events = (await cluster.client.list("/api/v1/namespaces/default/events"))["items"]

    created = {name: gates for (_, name), gates in cluster.admission.created_gates.items()}
    assert created == {**{name: [ALLOCATION_GATE] for name in OURS}, "no-claim": []}
    pods = {pod["metadata"]["name"]: pod for pod, _ in view}
    assert {name: pod["status"]["phase"] for name, pod in pods.items()} == {
        name: "Running" for name in [*OURS, "no-claim"]
    }
    assert all(not pod["spec"].get("schedulingGates") for pod in pods.values())
    controller = writes[f"vgpu-dra-driver/{CONTROLLER_COMPONENT}"]
    assert controller["pods"] == len(OURS)
    scheduler = writes[user_agents.KUBE_SCHEDULER.split("/", 1)[0]]
    assert scheduler == {"pods/binding": len(pods)}
    assert [e for e in events if e["reason"] == "FailedScheduling"] == []


def _simulate(capsys: Any, mode: Mode, scenario: Path) -> dict[str, dict[str, Any]]:
    status = main(
        [
            "simulate",
            *PATIENT,
            "-o",
            "json",
            "--mode",
            mode.value,
            "--nodes",
            "1",
            "--vendors",
            "nvidia",
            "--gpus-per-node",
            "2",
            "--scenario",
            str(scenario),
        ]
    )
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    return {pod["name"]: pod for pod in report["pods"]}


def test_the_report_shows_the_gates_each_pod_was_created_with_and_those_left(
    capsys: Any, tmp_path: Path
) -> None:
    pods = _simulate(capsys, Mode.DRA, _scenario(tmp_path / "gate.yaml", kueue_held=True))
    for name in OURS:
        assert (pods[name]["createdGates"], pods[name]["gates"]) == ([ALLOCATION_GATE], [])
        assert pods[name]["phase"] == "Running"
    queued = pods["queued"]
    assert queued["createdGates"] == queued["gates"] == [KUEUE_GATE, ALLOCATION_GATE]
    assert queued["phase"] == "Pending"
    assert queued["reason"] == (
        f"SchedulingGated: the pod keeps its scheduling gates {KUEUE_GATE}, {ALLOCATION_GATE}"
    )


def test_where_kube_scheduler_allocates_nothing_is_gated(capsys: Any, tmp_path: Path) -> None:
    pods = _simulate(
        capsys, Mode.DRA_SCHEDULER, _scenario(tmp_path / "gate.yaml", kueue_held=False)
    )
    assert {name: pod["createdGates"] for name, pod in pods.items()} == {
        name: [] for name in [*OURS, "no-claim"]
    }
    assert all(pod["phase"] == "Running" for pod in pods.values())
