"""Which inventory nodes a pod may go to, before the engine is asked: node predicates.

kube-scheduler binds the pod after the controller allocated; a node it would
refuse (selector, affinity, taints, the node's pod and resource limits) must
not get the pod's claims. `node_refusal` answers that per node; the answer is
memoized per pod shape (the spec fields predicates read and the resource
requests), because thousands of pending pods share a few shapes, until the node
object changes (its resourceVersion) or the set of pods bound to it does (the
node's memo is dropped then). A burst's decisions build a memo for most nodes,
and the nodes no pod went to keep theirs: `forget_memos` drops all of it once the
burst is over, so nothing built in its middle outlives it.

Owns the index of pods bound to each node (their requests count against it)
and the memo. Pure: reads objects through the callables it is given and calls
only `dra_driver.objects.node_predicates`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from decimal import Decimal
from typing import Any

from dra_driver.objects.node_predicates import (
    INSUFFICIENT,
    TOO_MANY_PODS,
    NodeRoom,
    node_allocatable,
    node_refusal,
    placement_refusal,
    pod_resource_requests,
    requests_total,
    resource_fit,
)

CLAIM_NOT_ON_NODE = "resourceclaim not available on the node"
NODE_NOT_FOUND = "node not found"
AVOIDED_NODE = "pod could not be scheduled on this node before"
SCHEDULING_FIELDS = ("nodeName", "nodeSelector", "affinity", "tolerations")
"""The pod spec fields node predicates read (with its resource requests)."""
MAX_REMEMBERED_SHAPES = 256
"""Pod shapes remembered per node; past that the node's memo starts again."""

ObjectLookup = Callable[[str], Mapping[str, Any] | None]


class NodeFilter:
    """Per pod: the candidate nodes, and the reason each other node was refused."""

    def __init__(self, pod_of: ObjectLookup, node_of: ObjectLookup) -> None:
        self._pod_of = pod_of
        self._node_of = node_of
        self._pod_node: dict[str, str] = {}
        self._node_pods: dict[str, set[str]] = {}
        self._node_used: dict[str, tuple[int, dict[str, Decimal]]] = {}
        self._refusals: dict[str, dict[str, tuple[str, str | None]]] = {}
        """node -> pod shape -> (the node's resourceVersion, the refusal or None)."""
        self._dra_resources: frozenset[str] = frozenset()
        """The resource names DeviceClasses answer to, left to DRA by NodeResourcesFit."""

    def set_dra_resources(self, names: frozenset[str]) -> None:
        """The DeviceClasses changed: what NodeResourcesFit leaves to DRA may have."""
        if names != self._dra_resources:
            self._dra_resources = names
            self._refusals.clear()

    def place(self, pod_key: str, node: str | None) -> bool:
        """Record the node the pod is bound to (None: unbound or finished); True if moved."""
        previous = self._pod_node.pop(pod_key, None)
        if previous is not None:
            pods = self._node_pods.get(previous)
            if pods is not None:
                pods.discard(pod_key)
                if not pods:
                    del self._node_pods[previous]
            self._touch(previous)
        if node:
            self._pod_node[pod_key] = node
            self._node_pods.setdefault(node, set()).add(pod_key)
            self._touch(node)
        return previous != node

    def candidates(
        self,
        pod: Mapping[str, Any],
        nodes: Iterable[str],
        pinned: Collection[str],
        avoided: Collection[str],
    ) -> tuple[list[str], dict[str, str]]:
        """The `nodes` the pod may go to, and why each other one may not.

        `pinned`: the nodes of the pod's claims already allocated (empty: any);
        `avoided`: nodes kube-scheduler could not put this pod on before.
        """
        candidates: list[str] = []
        refused: dict[str, str] = {}
        requested = pod_resource_requests(pod)
        spec = pod.get("spec") or {}
        shape = json.dumps(
            [spec.get(k) for k in SCHEDULING_FIELDS] + sorted(map(str, requested.items())),
            sort_keys=True,
        )
        for name in nodes:
            node = self._node_of(name)
            if node is None:
                refused[name] = NODE_NOT_FOUND
            elif pinned and name not in pinned:
                refused[name] = CLAIM_NOT_ON_NODE
            elif name in avoided:
                refused[name] = AVOIDED_NODE
            else:
                reason = self._refusal(shape, pod, node, requested)
                if reason is None:
                    candidates.append(name)
                else:
                    refused[name] = reason
        return candidates, refused

    def rooms(self, pod: Mapping[str, Any], refused: Mapping[str, str]) -> dict[str, NodeRoom]:
        """The nodes in `refused` that only lack room (pods, cpu, memory, ...) which
        removing pods bound there could give, each with what NodeResourcesFit reads of
        it: preemption judges them with its victims gone, as kube-scheduler does."""
        requested = pod_resource_requests(pod)
        rooms: dict[str, NodeRoom] = {}
        for name, reason in refused.items():
            if reason != TOO_MANY_PODS and not reason.startswith(INSUFFICIENT):
                continue
            node = self._node_of(name)
            if node is None or placement_refusal(pod, node) is not None:
                continue
            count, used = self._usage(name)
            allocatable = node_allocatable(node)
            short, resolvable = resource_fit(
                requested, allocatable, used, count, self._dra_resources
            )
            if not short or not resolvable:
                continue
            bound = (self._pod_of(key) for key in self._node_pods.get(name, ()))
            requests = {
                str(other["metadata"].get("uid")): pod_resource_requests(other)
                for other in bound
                if other is not None
            }
            rooms[name] = NodeRoom(allocatable, used, count, requests, self._dra_resources)
        return rooms

    def forget_memos(self) -> None:
        """Drop every memoized usage and refusal: they are rebuilt on demand. A set or
        dict that grew during a burst and stayed (even empty) keeps the memory block it
        grew into, and such a block pins the allocator's arena the burst filled."""
        self._node_used.clear()
        self._refusals.clear()

    def _touch(self, node: str) -> None:
        """The node's pods changed: its usage and every refusal memoized for it are stale."""
        self._node_used.pop(node, None)
        self._refusals.pop(node, None)

    def _refusal(
        self,
        shape: str,
        pod: Mapping[str, Any],
        node: Mapping[str, Any],
        requested: Mapping[str, Decimal],
    ) -> str | None:
        """node_refusal, remembered per pod shape until the node or its pods change."""
        name = node["metadata"]["name"]
        version = node["metadata"].get("resourceVersion", "")
        remembered = self._refusals.get(name)
        if remembered is None:
            remembered = self._refusals[name] = {}
        cached = remembered.get(shape)
        if cached is not None and cached[0] == version:
            return cached[1]
        count, used = self._usage(name)
        reason = node_refusal(pod, node, count, used, requested, self._dra_resources)
        if len(remembered) >= MAX_REMEMBERED_SHAPES:
            remembered.clear()
        remembered[shape] = (version, reason)
        return reason

    def _usage(self, node: str) -> tuple[int, dict[str, Decimal]]:
        """How many pods are bound to the node and what they request in total."""
        cached = self._node_used.get(node)
        if cached is None:
            pods = [self._pod_of(k) for k in self._node_pods.get(node, ())]
            live = [p for p in pods if p is not None]
            cached = (len(live), requests_total(live))
            self._node_used[node] = cached
        return cached
