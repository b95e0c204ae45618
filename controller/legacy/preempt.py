"""kube-scheduler's preempt verb: which victims free a HAMi share on each candidate node.

kube-scheduler's DefaultPreemption (`SelectVictimsOnNode`) proposes, per node,
the victims its own filters need: every lower-priority pod removed, then each
returned most important first and kept if the pod still fits. Its filters see
no HAMi share (gpumem, cores, type and uuid filters; `nvidia.com/gpu` only as a
node count, and not even that where `ignoredByScheduler` is set), and every
victim it proposes was needed by one of them: returning it failed a filter
while fewer pods were back, and resources only grow as pods return. So this
verb drops none of them (bar one of equal or higher priority, which
kube-scheduler never proposes and which is never a victim here). It judges the
share with the project's engine over the node's usage without the proposed
victims, and where that is not enough it runs the same reprieve over the other
lower-priority pods holding shares on the node (bound there, not terminating):
all removed, then returned most important first (priority, then earliest
start; a pod not started yet counts as started now, as kube-scheduler's
`GetPodStartTime` does) and kept when the pod still fits. Those that cannot
return are added: the fewest, of the lowest priority. A node where even all
of them gone leaves no room is dropped, as is one left with no victim.

`NumPDBViolations`: the count kube-scheduler gave (capped at the victims kept
of its own), plus every added victim, since this process reads no
PodDisruptionBudget and an added one may violate one: an upper bound, so
kube-scheduler's node choice never prefers a node for violations it was not
told of. A pod whose `preemptionPolicy` is `Never` gets no node.
In mixed mode DRA pods are holders too, ordered with the legacy ones: a pod
reserving a claim of this driver allocated on the node frees the claim's share
once every pod in its `status.reservedFor` is removed (a claim shared with a
pod that stays, or reserved for anything the cache does not know, frees
nothing; `preempt_victims`). Deleting such a victim does not free the share at
once: the DRA controller (or kube-controller-manager) drops the reservation and
deallocates the claim, and this cache counts the share until the claim's watch
event shows that: kube-scheduler's nominated pod is refused by Filter until
then and fits at a later try. The DRA controller preempts legacy pods for a DRA
preemptor by the same rules (`controller/preemption.py`).
Reference: kubernetes-dra.md §10 (Extender preemption).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from controller.legacy.cluster import ClusterState
from controller.legacy.pod_shape import check_pod_shape
from controller.legacy.pod_usage import PodAllocation, is_terminated, pod_uid
from controller.legacy.preempt_victims import added_victims
from controller.preemption import PREEMPT_NEVER
from controller.preemption_shares import Share, quota_without, usage_without
from dra_driver.engine.engine import Engine, vendor_totals
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.requests import PodRequest
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_scheduling import pod_priority, preemption_policy
from dra_driver.objects.pod_workloads import pod_request

NOT_STARTED = "~"
"""Sorts after every RFC 3339 time: a pod without `status.startTime` is the latest."""


@dataclass(frozen=True, slots=True)
class ProposedVictims:
    """kube-scheduler's victims on one node: their UIDs, and the pods in the full form."""

    uids: tuple[str, ...]
    pods: Mapping[str, Mapping[str, Any]]
    pdb_violations: int


@dataclass(frozen=True, slots=True)
class PreemptArgs:
    """ExtenderPreemptionArgs."""

    pod: Mapping[str, Any]
    nodes: Mapping[str, ProposedVictims]


def _victims(field: str, node: str, value: object, meta: bool) -> ProposedVictims:
    where = f"{field}.{node}"
    if not isinstance(value, dict):
        raise InvalidParameterError(where, "expected an object with Pods and NumPDBViolations")
    pods = value.get("Pods") or []
    if not isinstance(pods, list) or not all(isinstance(p, dict) for p in pods):
        raise InvalidParameterError(f"{where}.Pods", "expected a list of objects")
    violations = value.get("NumPDBViolations") or 0
    if not isinstance(violations, int) or violations < 0:
        raise InvalidParameterError(f"{where}.NumPDBViolations", "expected a count")
    uids = []
    for pod in pods:
        uid = pod.get("UID") if meta else (pod.get("metadata") or {}).get("uid")
        if not isinstance(uid, str) or not uid:
            raise InvalidParameterError(f"{where}.Pods", "every victim needs a UID")
        uids.append(uid)
    full = {} if meta else dict(zip(uids, pods, strict=True))
    return ProposedVictims(tuple(uids), full, violations)


def parse_preempt_args(body: object) -> PreemptArgs:
    """Validate ExtenderPreemptionArgs (either victims form); the error names the field."""
    if not isinstance(body, dict):
        raise InvalidParameterError("ExtenderPreemptionArgs", "expected a JSON object")
    pod = body.get("Pod")
    check_pod_shape(pod, "Pod")
    nodes: dict[str, ProposedVictims] = {}
    for field, meta in (("NodeNameToVictims", False), ("NodeNameToMetaVictims", True)):
        per_node = body.get(field)
        if per_node is None:
            continue
        if not isinstance(per_node, dict):
            raise InvalidParameterError(field, "expected an object keyed by node name")
        for node, value in per_node.items():
            nodes[node] = _victims(field, node, value, meta)
    return PreemptArgs(pod, nodes)


def preempt_answer(victims: Mapping[str, tuple[list[str], int]]) -> dict[str, Any]:
    """ExtenderPreemptionResult: per node the victims' UIDs and the PDB violations."""
    return {
        "NodeNameToMetaVictims": {
            node: {"Pods": [{"UID": uid} for uid in uids], "NumPDBViolations": violations}
            for node, (uids, violations) in victims.items()
        }
    }


def _importance(pod: Mapping[str, Any]) -> tuple[int, str, str]:
    """Most important first: higher priority, then earlier start (kube-scheduler's
    MoreImportantPod), then the UID so that the answer never depends on map order."""
    start = (pod.get("status") or {}).get("startTime") or NOT_STARTED
    return -pod_priority(pod), str(start), pod_uid(pod)


@dataclass(frozen=True, slots=True)
class NodeHoldings:
    """One candidate node as the verb reads it: the preemptor, the node, the priority
    a victim must be under, the cached pods by uid, and the DRA claims' shares there."""

    preemptor: str
    node: str
    ceiling: int
    pods: Mapping[str, Mapping[str, Any]]
    claims: Sequence[Share]


class _NodeTrial:
    """The preemptor on one node with some shares given back: an engine over that node
    with the cache's usage there (legacy pods and DRA claims) minus those shares, and
    the namespaces' quotas minus what they charged."""

    def __init__(self, engine: Engine, request: PodRequest, node: str) -> None:
        self._engine = engine
        self._request = request
        self._node = node
        self._quota = engine.quota
        self._usage = {
            slot.device.id: DeviceUsage(slot.used, slot.memory, slot.cores, slot.tags)
            for slot in engine.node_state(node).slots
        }

    def fits(self, freed: Sequence[Share]) -> bool:
        self._engine.set_usage(self._node, usage_without(self._usage, freed))
        self._engine.quota = quota_without(self._quota, freed)
        return self._engine.decide(self._request, [self._node]).placement is not None


class Preemption:
    """Answers the preempt verb from the legacy scheduler's cache."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state

    async def preempt(self, args: PreemptArgs) -> dict[str, Any]:
        pod = args.pod
        if preemption_policy(pod) == PREEMPT_NEVER:
            return preempt_answer({})
        request = pod_request(pod, self.state.vendors, admission_defaults=False)
        ceiling = pod_priority(pod)
        answer: dict[str, tuple[list[str], int]] = {}
        async with self.state.lock:
            pods = {pod_uid(p): p for p in self.state.pods.store.values()}
            claims = self.state.dra.shares(args.nodes.keys(), self.state.vendors)
            for node, proposed in args.nodes.items():
                known = {**pods, **proposed.pods}
                kept = [
                    uid
                    for uid in proposed.uids
                    if uid in known and pod_priority(known[uid]) < ceiling
                ]
                held = NodeHoldings(pod_uid(pod), node, ceiling, pods, claims.get(node, []))
                added = self._added_victims(request, held, kept)
                if added is None or not kept + added:
                    continue
                violations = min(proposed.pdb_violations, len(kept)) + len(added)
                answer[node] = (kept + added, violations)
        return preempt_answer(answer)

    def _added_victims(
        self, request: PodRequest, held: NodeHoldings, kept: list[str]
    ) -> list[str] | None:
        """The share holders to remove beside `kept` (none when the pod needs no share),
        or None when no choice of lower-priority holders makes room."""
        if not request.has_devices():
            return []
        entry = self.state.inventory.get(held.node)
        if entry is None or entry.node is None:
            return None
        own: list[Share] = []
        shares = list(held.claims)
        for allocation in self.state.allocations.values():
            if allocation.placement.node == held.node:
                share = _legacy_share(allocation)
                (own if allocation.uid == held.preemptor else shares).append(share)
        holders = {uid for share in shares for uid in share.holders}
        candidates = sorted(
            (
                pod
                for uid in holders
                if uid not in kept and uid != held.preemptor
                for pod in (held.pods.get(uid),)
                if pod is not None and _removable(pod, held.node, held.ceiling)
            ),
            key=_importance,
        )
        trial = _NodeTrial(self.state.engine_for([entry.node]), request, held.node)
        return added_victims(shares, kept, [pod_uid(pod) for pod in candidates], trial.fits, own)


def _removable(pod: Mapping[str, Any], node: str, ceiling: int) -> bool:
    """A pod kube-scheduler can find on the node and may evict for this preemptor."""
    metadata = pod.get("metadata") or {}
    return (
        (pod.get("spec") or {}).get("nodeName") == node
        and not metadata.get("deletionTimestamp")
        and not is_terminated(pod)
        and pod_priority(pod) < ceiling
    )


def _legacy_share(allocation: PodAllocation) -> Share:
    """What a legacy pod's annotations hold on its node, held by the pod alone."""
    quota_use = tuple(
        (allocation.namespace, vendor, memory, cores)
        for vendor, (memory, cores) in vendor_totals(allocation.usage, allocation.placement).items()
    )
    return Share(
        allocation.uid,
        allocation.placement.node,
        allocation.usage,
        frozenset({allocation.uid}),
        quota_use,
    )
