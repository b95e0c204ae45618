"""The kube-scheduler stand-in's Filter predicates: does a pod fit a node.

Owns the checks kube-scheduler runs per node besides allocating devices, in the
order of its default plugins: an unschedulable node, an untolerated
NoSchedule/NoExecute taint, the pod's node selector, then NodeResourcesFit; then
DynamicResources' check that the node can reach every allocated claim, and which of
those claims PostFilter may deallocate. Each answers the reasons kube-scheduler
reports and whether preemption could resolve them (which shapes the "preemption:"
part of the message).

NodeResourcesFit is `node_predicates.resource_fit`, shared with the controller.
Pure over the objects given; it may call dra_driver.objects.node_predicates and
the admission stand-in's quantity reader.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from dra_driver.objects.node_predicates import (
    NODE_NAME_MISMATCH,
    NODE_UNSCHEDULABLE,
    SELECTOR_MISMATCH,
    node_selector_matches,
    pod_resource_requests,
    resource_fit,
    untolerated_taint,
)
from simulator.standins.admission import quantity_value

CLAIM_NOT_ON_NODE = "resourceclaim not available on the node"
DRA_EXTENDED_NOT_MODELLED = "the stand-in does not allocate DRA extended resources"
"""The stand-in's own reason where kube-scheduler's DynamicResources would allocate a
DRA extended resource from its class's devices (a special claim the stand-in does
not make): such a pod is refused, never placed without its devices."""


@dataclass(frozen=True, slots=True)
class FitFailure:
    """A node's failed Filter status: the reasons (NodeResourcesFit gives one per
    insufficient resource) and whether preemption could resolve them."""

    reasons: tuple[str, ...]
    resolvable: bool

    @classmethod
    def of(cls, reason: str, resolvable: bool = False) -> FitFailure:
        return cls((reason,), resolvable)


def pod_untolerated_taint(node: dict[str, Any], pod: dict[str, Any]) -> Mapping[str, Any] | None:
    """The node's first NoSchedule/NoExecute taint the pod does not tolerate."""
    return untolerated_taint(
        (node.get("spec") or {}).get("taints") or [],
        (pod.get("spec") or {}).get("tolerations") or [],
    )


@dataclass(slots=True)
class NodeInfo:
    """One node with what its pods request, kept up to date by the scheduler's cache (like
    kube-scheduler's NodeInfo): allocatable is parsed once per node version, the pods'
    requests once per pod, so a Filter over 1,000 nodes parses no quantity."""

    node: dict[str, Any]
    allocatable: dict[str, Decimal]
    pods: dict[str, Mapping[str, Decimal]] = field(default_factory=dict)
    used: dict[str, Decimal] = field(default_factory=dict)

    @classmethod
    def of(cls, node: dict[str, Any]) -> NodeInfo:
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        return cls(node, {name: quantity_value(v) for name, v in allocatable.items()})

    @property
    def name(self) -> str:
        return str(self.node["metadata"]["name"])

    def updated(self, node: dict[str, Any]) -> NodeInfo:
        """The new version of the node, with the same pods."""
        fresh = NodeInfo.of(node)
        fresh.pods, fresh.used = self.pods, self.used
        return fresh

    def add(self, key: str, requests: Mapping[str, Decimal]) -> None:
        self.remove(key)
        self.pods[key] = requests
        for name, amount in requests.items():
            self.used[name] = self.used.get(name, Decimal(0)) + amount

    def remove(self, key: str) -> None:
        requests = self.pods.pop(key, None)
        for name, amount in (requests or {}).items():
            self.used[name] -= amount


def fit_failure_on(
    pod: Mapping[str, Any],
    requested: Mapping[str, Decimal],
    info: NodeInfo,
    dra_resources: Collection[str] = frozenset(),
) -> FitFailure | None:
    """The first failing Filter plugin's status, or None, in the order of kube-scheduler's
    default Filter plugins (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity,
    NodeResourcesFit); `requested` is the pod's requests, `dra_resources` the names
    DeviceClasses answer to (`dra_extended_resources`)."""
    node = info.node
    spec = pod.get("spec") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return FitFailure.of(NODE_UNSCHEDULABLE)
    if spec.get("nodeName") and spec["nodeName"] != info.name:
        return FitFailure.of(NODE_NAME_MISMATCH)
    taint = pod_untolerated_taint(node, pod)
    if taint is not None:
        return FitFailure.of(
            f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}"
        )
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return FitFailure.of(SELECTOR_MISMATCH)
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not node_selector_matches(node, required):
        return FitFailure.of(SELECTOR_MISMATCH)
    return _resources_fit(requested, info, dra_resources)


def _resources_fit(
    requested: Mapping[str, Decimal], info: NodeInfo, dra_resources: Collection[str]
) -> FitFailure | None:
    reasons, resolvable = resource_fit(
        requested, info.allocatable, info.used, len(info.pods), dra_resources
    )
    return FitFailure(reasons, resolvable) if reasons else None


def dra_extended_requests(
    requested: Mapping[str, Decimal], info: NodeInfo, dra_resources: Collection[str]
) -> list[str]:
    """The DRA extended resources the pod asks of DynamicResources on this node: those a
    DeviceClass answers to and the node does not list."""
    return sorted(
        name
        for name, amount in requested.items()
        if amount > 0 and name in dra_resources and name not in info.allocatable
    )


def fit_failure(
    pod: dict[str, Any], node: dict[str, Any], pods_on_node: Sequence[dict[str, Any]]
) -> FitFailure | None:
    """fit_failure_on for a node and the pods on it given as objects."""
    info = NodeInfo.of(node)
    for index, other in enumerate(pods_on_node):
        info.add(str(index), pod_resource_requests(other))
    return fit_failure_on(pod, pod_resource_requests(pod), info)


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


def pinned_nodes(claims: Sequence[Mapping[str, Any]]) -> set[str] | None:
    """The only nodes every allocated claim can reach, when each names them in the usual
    way (one term: `metadata.name In [...]`); None when some claim does not, or none is
    allocated. Only a shortcut for finding a feasible node: Filter still checks them."""
    names: set[str] | None = None
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            continue
        terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        if len(terms) != 1 or terms[0].get("matchExpressions"):
            return None
        fields = terms[0].get("matchFields") or []
        if len(fields) != 1:
            return None
        requirement = fields[0]
        if requirement.get("key") != "metadata.name" or requirement.get("operator") != "In":
            return None
        these = set(requirement.get("values") or [])
        names = these if names is None else names & these
    return names


def deallocatable(claim: Mapping[str, Any], pod_uid: str) -> bool:
    """PostFilter may clear the claim: reserved by nobody, or only by the pod itself."""
    reserved = (claim.get("status") or {}).get("reservedFor") or []
    return not reserved or (len(reserved) == 1 and reserved[0].get("uid") == pod_uid)
