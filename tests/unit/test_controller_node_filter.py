"""Node predicates the controller applies before the engine: kube-scheduler's wording."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from controller.node_filter import NodeFilter
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


class Lookups:
    """The pods and nodes a NodeFilter reads, counting the pod reads."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.nodes = {"node-a": node()}
        self.pod_reads = 0

    def pod_of(self, key: str) -> dict[str, Any] | None:
        self.pod_reads += 1
        return self.pods.get(key)

    def node_of(self, name: str) -> dict[str, Any] | None:
        return self.nodes.get(name)


def refusal(nodes: NodeFilter, the_pod: dict[str, Any]) -> str | None:
    candidates, refused = nodes.candidates(the_pod, ["node-a"], (), ())
    return None if candidates else refused["node-a"]


def gpu_pod(resource: str, amount: str = "1") -> dict[str, Any]:
    container = {"name": "c", "resources": {"requests": {"cpu": "1", resource: amount}}}
    return {"metadata": {"name": "p"}, "spec": {"containers": [container]}}


def test_a_resource_the_node_does_not_list_is_insufficient_as_kube_scheduler_says() -> None:
    """fit.go counts an unlisted resource as 0: the controller must not allocate a claim
    on a node whose pod kube-scheduler then refuses (a legacy GPU pod on an AMD node)."""
    assert node_refusal(gpu_pod("nvidia.com/gpu"), node(), 0, {}) == ("Insufficient nvidia.com/gpu")
    listed = node()
    listed["status"]["allocatable"]["nvidia.com/gpu"] = "2"
    assert node_refusal(gpu_pod("nvidia.com/gpu", "2"), listed, 0, {}) is None


def test_a_node_that_lists_no_pod_count_takes_no_pod() -> None:
    unlisted = node()
    del unlisted["status"]["allocatable"]["pods"]
    assert node_refusal(pod(), unlisted, 0, {}) == "Too many pods"


def test_a_device_class_resource_the_node_does_not_list_is_left_to_dra() -> None:
    """A class's extendedResourceName is DynamicResources' to allocate; the implicit
    deviceclass.resource.kubernetes.io/<class> name is no extended name, never checked."""
    explicit, implicit = "example.com/vgpu", "deviceclass.resource.kubernetes.io/x.vgpu.hami.io"
    assert node_refusal(gpu_pod(explicit), node(), 0, {}) == f"Insufficient {explicit}"
    assert node_refusal(gpu_pod(explicit), node(), 0, {}, dra_resources={explicit}) is None
    assert node_refusal(gpu_pod(implicit), node(), 0, {}) is None


def test_node_filter_counts_the_pods_bound_to_a_node_as_they_come_and_go() -> None:
    lookups = Lookups()
    nodes = NodeFilter(lookups.pod_of, lookups.node_of)
    for name in ("ns/p1", "ns/p2", "ns/p3"):
        lookups.pods[name] = pod(cpu="1")
        nodes.place(name, "node-a")
    assert refusal(nodes, pod(cpu="1")) == "Too many pods"
    nodes.place("ns/p3", None)
    assert refusal(nodes, pod(cpu="1")) is None
    nodes.place("ns/p1", None)
    nodes.place("ns/p2", None)
    assert refusal(nodes, pod(cpu="4")) is None
    nodes.place("ns/p1", "node-a")
    assert refusal(nodes, pod(cpu="4")) == "Insufficient cpu"


def test_forgotten_memos_are_built_again_from_the_pods() -> None:
    lookups = Lookups()
    nodes = NodeFilter(lookups.pod_of, lookups.node_of)
    lookups.pods["ns/p1"] = pod(cpu="3")
    nodes.place("ns/p1", "node-a")
    assert refusal(nodes, pod(cpu="2")) == "Insufficient cpu"
    reads = lookups.pod_reads
    assert refusal(nodes, pod(cpu="2")) == "Insufficient cpu"
    assert lookups.pod_reads == reads, "a repeated question is answered from the memo"
    nodes.forget_memos()
    assert refusal(nodes, pod(cpu="2")) == "Insufficient cpu"
    assert lookups.pod_reads == reads + 1, "the node's pods are read again"


def test_rooms_are_the_nodes_that_only_lack_what_removing_pods_gives() -> None:
    """Preemption's dry run judges these nodes with its victims gone; a node refused for
    a placement predicate, or asked for more than its whole allocatable, is none."""
    lookups = Lookups()
    nodes = NodeFilter(lookups.pod_of, lookups.node_of)
    for index, name in enumerate(("ns/p1", "ns/p2")):
        lookups.pods[name] = {**pod(cpu="2"), "metadata": {"name": name, "uid": f"uid-{index}"}}
        nodes.place(name, "node-a")
    wanting = pod(cpu="1")
    _, refused = nodes.candidates(wanting, ["node-a"], (), ())
    assert refused == {"node-a": "Insufficient cpu"}
    room = nodes.rooms(wanting, refused)["node-a"]
    assert room.refusal_without({"cpu": Decimal(1)}, []) == "Insufficient cpu"
    assert room.refusal_without({"cpu": Decimal(1)}, ["uid-0"]) is None
    assert room.refusal_without({"cpu": Decimal(3)}, ["uid-0"]) == "Insufficient cpu"
    assert room.refusal_without({"cpu": Decimal(1)}, ["not-bound-here"]) == "Insufficient cpu"
    assert nodes.rooms(pod(cpu="5"), {"node-a": "Insufficient cpu"}) == {}
    selective = pod(cpu="1", nodeSelector={"zone": "b"})
    assert nodes.rooms(selective, {"node-a": "Insufficient cpu"}) == {}
    assert nodes.rooms(wanting, {"node-a": "node(s) were unschedulable"}) == {}


def test_a_room_counts_the_pods_a_removal_frees() -> None:
    lookups = Lookups()
    nodes = NodeFilter(lookups.pod_of, lookups.node_of)
    for index in range(3):
        name = f"ns/p{index}"
        lookups.pods[name] = {**pod(cpu="0"), "metadata": {"name": name, "uid": f"uid-{index}"}}
        nodes.place(name, "node-a")
    _, refused = nodes.candidates(pod(cpu="0"), ["node-a"], (), ())
    assert refused == {"node-a": "Too many pods"}
    room = nodes.rooms(pod(cpu="0"), refused)["node-a"]
    assert room.refusal_without({}, ["uid-2"]) is None
