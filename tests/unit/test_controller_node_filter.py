"""Node predicates the controller applies before the engine: kube-scheduler's wording."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from dra_driver.objects.node_predicates import node_refusal, requests_total


def node(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "node-a", "labels": {"zone": "a", "gpu": "yes"}},
        "spec": spec,
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "3"}},
    }


def pod(cpu: str = "1", **spec: Any) -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": cpu}}}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container], **spec}}


def affinity(operator: str, values: list[str]) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "zone", "operator": operator, "values": values}]}
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }


TAINT = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("the_pod", "the_node", "expected"),
    [
        (pod(), node(), None),
        (pod(nodeName="node-b"), node(), "node(s) didn't match the requested node name"),
        (pod(), node(unschedulable=True), "node(s) were unschedulable"),
        (pod(), node(taints=[TAINT]), "node(s) had untolerated taint {dedicated: ml}"),
        (pod(tolerations=[{"key": "dedicated", "operator": "Exists"}]), node(taints=[TAINT]), None),
        (
            pod(nodeSelector={"zone": "b"}),
            node(),
            "node(s) didn't match Pod's node affinity/selector",
        ),
        (pod(affinity=affinity("In", ["a"])), node(), None),
        (
            pod(affinity=affinity("NotIn", ["a"])),
            node(),
            "node(s) didn't match Pod's node affinity/selector",
        ),
        (pod(cpu="5"), node(), "Insufficient cpu"),
    ],
)
def test_each_predicate(
    the_pod: dict[str, Any], the_node: dict[str, Any], expected: str | None
) -> None:
    assert node_refusal(the_pod, the_node, 0, {}) == expected


def test_pods_already_on_the_node_count() -> None:
    running = [pod(cpu="2"), pod(cpu="1500m")]
    used = requests_total(running)
    assert used == {"cpu": Decimal("3.5")}
    assert node_refusal(pod(cpu="500m"), node(), 2, used) is None
    assert node_refusal(pod(cpu="600m"), node(), 2, used) == "Insufficient cpu"
    assert node_refusal(pod(cpu="1m"), node(), 3, used) == "Too many pods"
