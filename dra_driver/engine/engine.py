"""The allocator: which node and devices a pod gets, or why none fits.

HAMi scores every device of every node for each pod. The node score depends
only on usage before the pod, so here nodes are kept in an index ordered by
policy preference (score, then name) and tried best-first: the first node
that fits is the node HAMi would pick, with the same fit rules applied in
full. When nothing fits, every node's reason is needed; two shortcuts keep
that cheap without changing a single reason: refusals are remembered per
request shape until the node changes (`reason_cache`), and a node that
refuses one of the containers HAMi fits first is refused in one counting
pass over its devices (`single_request`).

A vendor with its own ScoreNode (`VendorAdapter.score`: Ascend's NetworkID
share, Kunlun's fragmentation; `usage_score` when it reads the usage before the
pod, as Metax sGPU does) adds a score that depends on the devices the
pod gets, so for a pod asking for such a vendor every node is fitted and the
best total (node score plus the vendors' scores, HAMi's OverrideScore) wins,
ties going to the node tried first.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from dra_driver.engine.fit import FULL_CARD_CORES, fit_container
from dra_driver.engine.grants import ContainerGrants, Slot
from dra_driver.engine.mig_fit import MIG_MODE
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.policy import (
    BINPACK,
    SPREAD,
    GpuPolicy,
    node_score,
    parse_gpu_policy,
    parse_node_policy,
)
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.reason_cache import NodeRefusals, ReasonCache
from dra_driver.engine.reasons import NODE_HAS_NO_DEVICES, NODE_UNREGISTERED
from dra_driver.engine.requests import PodRequest
from dra_driver.engine.single_request import (
    DeviceFacts,
    PodJudge,
    device_facts,
    device_profile,
)
from dra_driver.engine.usage import collapse_pod_usage
from dra_driver.engine.vendors import FitContext, VendorRegistry

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """Cluster-wide defaults (HAMi's scheduler flags) and the engine's own knobs.

    `reason_cache_shapes`: how many distinct request shapes keep their nodes'
    refusals until those nodes change (0 turns the cache off). Each shape
    holds at most one short string per node, so 32 shapes at 5,000 nodes stay
    in the tens of MiB; pending workloads rarely have more distinct shapes.
    """

    gpu_policy: str = SPREAD
    node_policy: str = BINPACK
    reason_cache_shapes: int = 32


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: the node and, per container (init first), its grants."""

    node: str
    containers: tuple[ContainerGrants, ...]
    score: float
    init_count: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """The engine's answer: a placement, or per-node reasons why not."""

    placement: Placement | None
    failures: Mapping[str, str] = field(default_factory=dict)


_VERSIONS = itertools.count(1)
"""State versions, unique across all nodes and engines, so a replaced node never
matches a refusal remembered for its predecessor (a node state that goes idle again
takes back its own idle version)."""


_IdleState = tuple[
    int, list[tuple[int, int, int]], float, tuple[float, str], tuple[DeviceFacts, ...]
]
"""A node state's idle version, headroom, score, order key and facts."""


class NodeState:
    """A node's devices with their current usage, its cached node score, and a
    version that changes whenever any of them does."""

    __slots__ = (
        "_facts",
        "_idle",
        "headroom",
        "ids",
        "mig",
        "node",
        "order_key",
        "profiles",
        "score",
        "slots",
        "version",
    )

    def __init__(self, node: Node, usage: Mapping[str, DeviceUsage]) -> None:
        self.node = node
        self.version = 0
        self.ids = tuple(device.id for device in node.devices)
        self.mig = any(device.mode == MIG_MODE for device in node.devices)
        """A GPU in MIG mode may give one container several slices and refuses by
        its placements: neither the headroom test nor the per-device judge knows
        that, so such a node always gets the full fit."""
        self.profiles = tuple(device_profile(device, node.cordoned) for device in node.devices)
        self._facts: tuple[DeviceFacts, ...] | None = None
        self._idle: _IdleState | None = None
        self.slots = [Slot(d, 0, 0, 0) for d in node.devices]
        self.score = 0.0
        self.order_key = (0.0, node.name)
        """(score, name): the node's place in the engine's order."""
        self.headroom: list[tuple[int, int, int]] = []
        self.rescore()
        self._facts = device_facts(self.profiles, self.slots)
        self._idle = (self.version, self.headroom, self.score, self.order_key, self._facts)
        """The idle node's version, headroom, score, order key and facts, kept from its
        start: a node that goes idle again takes them back instead of building them anew
        (what is remembered for its idle version holds again, the state being the same).
        When a burst's claims went, 1,000 nodes' worth built then lay scattered among the
        burst's freed memory and kept most of it from being given back."""
        if usage:
            self.reset_usage(usage)
            self._facts = device_facts(self.profiles, self.slots)

    def reset_usage(self, usage: Mapping[str, DeviceUsage]) -> None:
        """Give the devices exactly `usage` (a device it leaves out holds nothing), in
        place, and rescore."""
        idle = DeviceUsage()
        for slot in self.slots:
            wanted = usage.get(slot.device.id, idle)
            slot.used, slot.memory, slot.cores = wanted.used, wanted.memory_mib, wanted.cores
            slot.tags = wanted.tags
        stale = usage.keys() - set(self.ids)
        if stale:
            log.debug(
                "usage of devices the inventory no longer has is ignored",
                extra={"node": self.node.name, "devices": sorted(stale)},
            )
        self.rescore()

    def rescore(self) -> None:
        """Refresh the node score and the per-device headroom used for pruning,
        after the slots changed; this gives the node a new version (its idle one
        when it holds nothing)."""
        if self._idle is not None and all(slot.holds_nothing for slot in self.slots):
            self.version, self.headroom, self.score, self.order_key, self._facts = self._idle
            return
        self.version = next(_VERSIONS)
        self._facts = None
        self.headroom = [
            (s.device.memory_mib - s.memory, s.device.cores - s.cores, s.device.memory_mib)
            for s in self.slots
            if s.device.healthy and s.used < s.device.count
        ]
        used = count = cores = all_cores = memory = all_memory = 0
        for slot in self.slots:
            device = slot.device
            used += slot.used
            count += device.count
            cores += slot.cores
            all_cores += device.cores
            memory += slot.memory
            all_memory += device.memory_mib
        self.score = node_score((used, count, cores, all_cores, memory, all_memory))
        self.order_key = (self.score, self.node.name)

    @property
    def facts(self) -> tuple[DeviceFacts, ...]:
        """Each device's facts as they are now: built with the node, and again when
        first needed after its usage changed (commits stay cheap)."""
        if self._facts is None:
            self._facts = device_facts(self.profiles, self.slots)
        return self._facts

    def fresh_slots(self) -> list[Slot]:
        return [slot.copy() for slot in self.slots]

    def could_fit(self, pod: PodRequest, own_fit: frozenset[str] = frozenset()) -> bool:
        """A necessary condition for `fit_pod_on_node`: every request finds enough
        devices with a free slot, memory and cores on the node as it is now.

        Filters, vendor, NUMA and exclusivity only remove devices, so a node that
        fails this check fails the full fit too; it never changes a decision.
        Requests of the vendors in `own_fit` (a Fit of their own, whose memory and
        cores mean something else, e.g. AMD's percentage of CUs) are not checked.
        """
        if self.mig:
            return True
        headroom = self.headroom
        for container in pod.all_containers:
            for request in container:
                if request.count <= 0 or request.vendor in own_fit:
                    continue
                cores = min(request.cores, FULL_CARD_CORES)
                eligible = 0
                for free_memory, free_cores, total_memory in headroom:
                    if free_cores >= cores and free_memory >= request.memory_on(total_memory):
                        eligible += 1
                if eligible < request.count:
                    return False
        return True


def fit_pod_on_node(state: NodeState, pod: PodRequest, ctx: FitContext) -> Placement | str:
    """HAMi's scoreNode: init containers each on a fresh copy, app containers
    accumulating on one copy; returns the placement or the failure reason."""
    if not state.slots:
        return NODE_HAS_NO_DEVICES
    init_grants: list[ContainerGrants] = []
    for container in pod.init_containers:
        if not any(request.count > 0 for request in container):
            init_grants.append(())
            continue
        grants, reason = fit_container(state.fresh_slots(), container, ctx, init_grants)
        if grants is None:
            return reason
        init_grants.append(grants)
    slots = state.fresh_slots()
    app_grants: list[ContainerGrants] = []
    for container in pod.containers:
        if not any(request.count > 0 for request in container):
            app_grants.append(())
            continue
        grants, reason = fit_container(slots, container, ctx, app_grants)
        if grants is None:
            return reason
        app_grants.append(grants)
    return Placement(
        node=state.node.name,
        containers=(*init_grants, *app_grants),
        score=state.score,
        init_count=len(pod.init_containers),
    )


class Engine:
    """Stateful allocator over a cluster snapshot; `commit` applies a decision."""

    def __init__(
        self,
        nodes: Iterable[Node],
        usage: Mapping[str, Mapping[str, DeviceUsage]] | None = None,
        *,
        settings: EngineSettings | None = None,
        vendors: VendorRegistry | None = None,
        quota: QuotaLedger | None = None,
    ) -> None:
        self.settings = settings or EngineSettings()
        self.vendors = vendors or VendorRegistry()
        self.quota = quota
        usage = usage or {}
        self._states = {node.name: NodeState(node, usage.get(node.name, {})) for node in nodes}
        stale_nodes = usage.keys() - self._states.keys()
        if stale_nodes:
            log.debug(
                "usage on nodes the inventory does not have is ignored",
                extra={"nodes": sorted(stale_nodes)},
            )
        self._order = sorted(state.order_key for state in self._states.values())
        self._default_gpu_policy = parse_gpu_policy(self.settings.gpu_policy)
        parse_node_policy(self.settings.node_policy)
        self._refusals = ReasonCache(self.settings.reason_cache_shapes)

    def node_state(self, name: str) -> NodeState:
        return self._states[name]

    def decide(
        self,
        pod: PodRequest,
        candidates: Iterable[str] | None = None,
        *,
        explain_all: bool = False,
    ) -> Decision:
        """Pick a node for `pod` among `candidates` (all nodes when None).

        With `explain_all`, every candidate is evaluated so the decision carries
        the reasons of every refusing node even when one fits. Reasons are
        always those of HAMi's full fit on the node as it is now, whether they
        were remembered, counted in one pass or fitted in full.
        """
        gpu_policy = self._gpu_policy(pod)
        node_policy = parse_node_policy(pod.node_policy or self.settings.node_policy)
        allowed = None if candidates is None else set(candidates)
        remembered = self._refusals.refusals(self._shape(pod)) if self._refusals.enabled else None
        judging = explain_all
        judge = PodJudge.for_pod(pod, gpu_policy, self.vendors, self.quota) if judging else None
        failures: dict[str, str] = {}
        known_states: list[NodeState] = []
        known_reasons: list[str] = []
        pruned: list[NodeState] = []
        chosen: Placement | None = None
        own: set[str] = set()
        scorers = False
        for container in pod.all_containers:
            for request in container:
                vendor = self.vendors.get(request.vendor)
                if vendor.fit is not None:
                    own.add(request.vendor)
                scorers = scorers or vendor.score is not None or vendor.usage_score is not None
        own_fit = frozenset(own)
        for name in self._preference(node_policy):
            if allowed is not None and name not in allowed:
                continue
            state = self._states[name]
            reason = self._known_refusal(state, remembered, judge)
            if reason is not None:
                known_states.append(state)
                known_reasons.append(reason)
                continue
            if not explain_all and not state.could_fit(pod, own_fit):
                pruned.append(state)
                continue
            outcome = self._fit(state, pod, gpu_policy)
            if isinstance(outcome, str):
                self._refused(failures, remembered, state, outcome)
                if not judging:
                    # A node that passed the cheap check refused: filters or later
                    # containers are at play, so judge the remaining nodes first.
                    judge = PodJudge.for_pod(pod, gpu_policy, self.vendors, self.quota)
                    judging = True
                continue
            if scorers:
                outcome = replace(
                    outcome,
                    score=outcome.score + self._vendor_score(state, outcome, pod, node_policy),
                )
                if chosen is None or _better(outcome.score, chosen.score, node_policy):
                    chosen = outcome
                continue
            if chosen is None:
                chosen = outcome
                if not explain_all:
                    break
        for state, reason in zip(known_states, known_reasons, strict=True):
            # A full fit reports a node the cheap check prunes only when nothing
            # fits; so do known refusals, so that no decision depends on history.
            if chosen is None or explain_all or state.could_fit(pod, own_fit):
                failures[state.node.name] = reason
        if chosen is None and pruned:
            if not judging:
                judge = PodJudge.for_pod(pod, gpu_policy, self.vendors, self.quota)
            for state in pruned:
                reason = self._known_refusal(state, None, judge)
                if reason is None:
                    outcome = self._fit(state, pod, gpu_policy)
                    assert isinstance(outcome, str), f"pruned node {state.node.name} fits"
                    reason = outcome
                self._refused(failures, remembered, state, reason)
        if allowed is not None:
            for name in sorted(allowed - self._states.keys()):
                failures[name] = NODE_UNREGISTERED
        return Decision(chosen, failures)

    @staticmethod
    def _known_refusal(
        state: NodeState, remembered: NodeRefusals | None, judge: PodJudge | None
    ) -> str | None:
        """The node's refusal without a full fit: remembered for its current
        version, or counted by the judge (and then remembered); None if unknown."""
        if remembered is not None:
            refusal = remembered.get(state.node.name)
            if refusal is not None and refusal[0] == state.version:
                return refusal[1]
        if judge is None or state.mig:
            return None
        reason = judge.refusal(state.facts, state.ids)
        if reason is not None and remembered is not None:
            remembered[state.node.name] = (state.version, reason)
        return reason

    @staticmethod
    def _refused(
        failures: dict[str, str],
        remembered: NodeRefusals | None,
        state: NodeState,
        reason: str,
    ) -> None:
        failures[state.node.name] = reason
        if remembered is not None:
            remembered[state.node.name] = (state.version, reason)

    def _shape(self, pod: PodRequest) -> Hashable:
        """What a node's refusal of `pod` depends on besides the node itself: the
        requests, filters, policy and weights (not the pod's name or node policy)
        and the namespace's quota for the vendors asked for."""
        quota: tuple[object, ...] = ()
        if self.quota is not None:
            vendors = sorted({r.vendor for c in pod.all_containers for r in c})
            quota = tuple(
                (vendor, q.memory_limit_mib, q.cores_limit, q.memory_used_mib, q.cores_used)
                for vendor in vendors
                for q in (self.quota.quotas.get((pod.namespace, vendor)),)
                if q is not None
            )
        policy = pod.gpu_policy or self.settings.gpu_policy
        return pod.containers, pod.init_containers, policy, pod.weights, quota

    def _vendor_score(
        self, state: NodeState, placement: Placement, pod: PodRequest, node_policy: str
    ) -> float:
        """The ScoreNode of every vendor the pod asks for, over the pod's grants."""
        vendors = dict.fromkeys(r.vendor for c in pod.all_containers for r in c)
        total = 0.0
        for name in vendors:
            vendor = self.vendors.get(name)
            if vendor.score is not None:
                total += vendor.score(
                    state.node, placement.containers, pod.all_containers, node_policy
                )
            if vendor.usage_score is not None:
                total += vendor.usage_score(
                    state.slots, placement.containers, pod.all_containers, node_policy
                )
        return total

    def _fit(self, state: NodeState, pod: PodRequest, gpu_policy: GpuPolicy) -> Placement | str:
        ctx = FitContext(
            state.node, pod.namespace, gpu_policy, pod.weights, self.vendors, self.quota
        )
        return fit_pod_on_node(state, pod, ctx)

    def commit(self, pod: PodRequest, placement: Placement) -> None:
        """Charge a placement to its node (init containers at their peak) and quota."""
        self._charge(pod, placement, sign=1)

    def release(self, pod: PodRequest, placement: Placement) -> None:
        """Undo `commit`, e.g. when the pod is deleted or its claim deallocated."""
        self._charge(pod, placement, sign=-1)

    def _charge(self, pod: PodRequest, placement: Placement, sign: int) -> None:
        """Add (sign 1) or remove (sign -1) a placement's usage.

        Placements also come from live objects (claims, pod annotations) that
        outlive devices and nodes; their share on a device or node the
        inventory no longer has is skipped with a debug log, while the quota
        still counts what the namespace holds.
        """
        per_device = collapse_pod_usage(placement.containers, placement.init_count)
        if self.quota is not None:
            for vendor, (memory, cores) in vendor_totals(per_device, placement).items():
                self.quota.charge(pod.namespace, vendor, sign * memory, sign * cores)
        state = self._states.get(placement.node)
        if state is None:
            log.debug(
                "usage on a node the inventory does not have is ignored",
                extra={"node": placement.node, "pod": f"{pod.namespace}/{pod.name}"},
            )
            return
        by_id = {slot.device.id: slot for slot in state.slots}
        stale = []
        for device_id, usage in per_device.items():
            slot = by_id.get(device_id)
            if slot is None:
                stale.append(device_id)
                continue
            slot.used += sign * usage.used
            slot.memory += sign * usage.memory_mib
            slot.cores += sign * usage.cores
            if usage.tags:
                slot.tags = _with_tags(slot.tags, usage.tags, sign)
        if stale:
            log.debug(
                "usage of devices the inventory no longer has is ignored",
                extra={
                    "node": placement.node,
                    "pod": f"{pod.namespace}/{pod.name}",
                    "devices": sorted(stale),
                },
            )
        self._forget_order(state)
        state.rescore()
        bisect.insort(self._order, state.order_key)

    def set_node(self, node: Node, usage: Mapping[str, DeviceUsage] | None = None) -> None:
        """Add a node, or replace its inventory (devices, cordons, pair scores) and
        usage, e.g. when its ResourceSlices or register annotation change.

        `usage` maps device id to what is already granted there (nothing when None).
        """
        self.remove_node(node.name)
        state = NodeState(node, usage or {})
        self._states[node.name] = state
        bisect.insort(self._order, state.order_key)

    def set_usage(self, name: str, usage: Mapping[str, DeviceUsage]) -> None:
        """Give a known node's devices exactly `usage`, keeping its inventory and its
        node state: replaced at every change, the state objects of 1,000 nodes were
        built anew as a burst's claims went and lay scattered among the burst's freed
        memory, which they then kept from being given back."""
        state = self._states[name]
        self._forget_order(state)
        state.reset_usage(usage)
        bisect.insort(self._order, state.order_key)

    def remove_node(self, name: str) -> None:
        """Forget a node (deleted, or its devices unpublished); unknown names are ignored."""
        state = self._states.pop(name, None)
        if state is not None:
            self._forget_order(state)

    def _forget_order(self, state: NodeState) -> None:
        del self._order[bisect.bisect_left(self._order, state.order_key)]

    def _preference(self, node_policy: str) -> Iterable[str]:
        """Node names best-first: binpack prefers the highest score, spread the
        lowest (HAMi sorts and takes the last); ties go to the smaller name."""
        if node_policy == BINPACK:
            return _binpack_order(self._order)
        return (name for _, name in self._order)

    def _gpu_policy(self, pod: PodRequest) -> GpuPolicy:
        if pod.gpu_policy is None:
            return self._default_gpu_policy
        return parse_gpu_policy(pod.gpu_policy)


def _better(score: float, best: float, node_policy: str) -> bool:
    """Binpack takes the highest total, spread the lowest (HAMi sorts by Less and
    takes the last node)."""
    return score > best if node_policy == BINPACK else score < best


def _with_tags(tags: tuple[str, ...], change: tuple[str, ...], sign: int) -> tuple[str, ...]:
    """A device's tags with a placement's added (sign 1) or one of each removed (-1)."""
    if sign > 0:
        return tags + change
    kept = list(tags)
    for tag in change:
        if tag in kept:
            kept.remove(tag)
    return tuple(kept)


def _binpack_order(order: list[tuple[float, str]]) -> Iterable[str]:
    """Descending score, ascending name within a score."""
    end = len(order)
    while end > 0:
        score = order[end - 1][0]
        start = bisect.bisect_left(order, (score, ""))
        for index in range(start, end):
            yield order[index][1]
        end = start


def vendor_totals(
    per_device: Mapping[str, DeviceUsage], placement: Placement
) -> dict[str, tuple[int, int]]:
    """Per vendor of the grants, the memory (MiB) and cores of the placement's
    per-device usage: what the namespace's quota of that vendor is charged."""
    vendor_of: dict[str, str] = {
        grant.uuid: grant.vendor for container in placement.containers for grant in container
    }
    totals: dict[str, tuple[int, int]] = {}
    for device_id, usage in per_device.items():
        memory, cores = totals.get(vendor_of[device_id], (0, 0))
        totals[vendor_of[device_id]] = (memory + usage.memory_mib, cores + usage.cores)
    return totals
