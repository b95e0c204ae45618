"""The kube-scheduler stand-in's Filter predicates: does a pod fit a node.

Owns the checks kube-scheduler runs per node besides allocating devices, in the
order of its default plugins: an unschedulable node, an untolerated
NoSchedule/NoExecute taint, the pod's node selector, the pods/cpu/memory the node
has left; then DynamicResources' check that the node can reach every allocated
claim, and which of those claims PostFilter may deallocate. Each answers the reason
kube-scheduler reports and whether preemption could resolve it (which shapes the
"preemption:" part of the message).
Pure over the objects given; it may call dra_driver.objects.node_predicates and
the admission stand-in's quantity reader.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from dra_driver.objects.node_predicates import (
    NODE_UNSCHEDULABLE,
    SELECTOR_MISMATCH,
    TOO_MANY_PODS,
    node_selector_matches,
    pod_resource_requests,
    untolerated_taint,
)
from simulator.standins.admission import quantity_value

CLAIM_NOT_ON_NODE = "resourceclaim not available on the node"


def pod_untolerated_taint(node: dict[str, Any], pod: dict[str, Any]) -> Mapping[str, Any] | None:
    """The node's first NoSchedule/NoExecute taint the pod does not tolerate."""
    return untolerated_taint(
        (node.get("spec") or {}).get("taints") or [],
        (pod.get("spec") or {}).get("tolerations") or [],
    )


def fit_failure(
    pod: dict[str, Any], node: dict[str, Any], pods_on_node: Sequence[dict[str, Any]]
) -> tuple[str, bool] | None:
    """The first failing predicate as (reason, resolvable by preemption), or None."""
    if (node.get("spec") or {}).get("unschedulable"):
        return NODE_UNSCHEDULABLE, False
    taint = pod_untolerated_taint(node, pod)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}", False
    labels = node["metadata"].get("labels") or {}
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return SELECTOR_MISMATCH, False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if "pods" in allocatable and len(pods_on_node) + 1 > quantity_value(allocatable["pods"]):
        return TOO_MANY_PODS, True
    used: dict[str, Decimal] = {}
    for other in pods_on_node:
        for name, amount in pod_resource_requests(other).items():
            used[name] = used.get(name, Decimal(0)) + amount
    for name, amount in sorted(pod_resource_requests(pod).items()):
        if name in allocatable and used.get(name, Decimal(0)) + amount > quantity_value(
            allocatable[name]
        ):
            return f"Insufficient {name}", True
    return None


def unavailable_claims(node: dict[str, Any], claims: Sequence[Mapping[str, Any]]) -> list[int]:
    """Indexes of the allocated claims whose nodeSelector excludes the node: DynamicResources'
    Filter, which runs after the node's other predicates passed; a non-empty answer fails the
    node with CLAIM_NOT_ON_NODE (UnschedulableAndUnresolvable) and makes those claims
    candidates for PostFilter's deallocation."""
    return [
        index
        for index, claim in enumerate(claims)
        if (allocation := (claim.get("status") or {}).get("allocation")) is not None
        and not node_selector_matches(node, allocation.get("nodeSelector"))
    ]


def deallocatable(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """PostFilter may clear the claim: reserved by nobody, or only by the pod itself."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return not reserved or (len(reserved) == 1 and reserved[0].get("uid") == pod_uid)
