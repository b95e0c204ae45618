"""Preemption in DRA mode, the acting half: when to plan, the writes, and held capacity.

kube-scheduler cannot preempt for a GPU share (preemption.py says why), so the
controller does it for the pods whose shares and MIG partitions it decides.
`plan_preemption` (preemption.py, pure) chooses the node and the victims, over
the view's engine and its partitions' counters; this module decides
when to ask it and carries the plan out as kube-scheduler's executor does
(reference kubernetes-dra.md §10).

When: a pending pod with `preemptionPolicy: PreemptLowerPriority` (the default)
that fit on no node is planned for at most once per change of the view (the
work queue says whether a refusal is news) and never while its own writes run.
As in kube-scheduler's `podEligibleToPreemptOthers`, a pod already nominated to
a node where a holder of lower priority is still terminating waits for it
instead of preempting again. A nominated pod for which preemption can no longer
help loses its nomination (kube-scheduler clears it then too), so nothing is
held for a pod that will not fit there.

The writes, each behind the leader's write fence: the preemptor's
`status.nominatedNodeName`; then per victim the DisruptionTarget condition (a
strategic merge patch of pods/status, merged by condition type) and a plain
delete (PodDisruptionBudgets only steer the choice, as in kube-scheduler);
events `Preempted` on each victim and one `Preempting` on the preemptor. A
refusal stops the plan there, so no pod is evicted beyond it, and is a Warning
on the preemptor; if no victim was evicted yet, the nomination is taken back.

Held capacity, deliberately conservative: while a pending pod is nominated to
a node and any claim of ours it uses is still unallocated, pods of strictly
lower priority are not allocated on that node at all, whatever it has free.
That never lets a lower-priority pod take what the victims free, and needs no
accounting of which share frees when. It is read from the pods themselves
(`status.nominatedNodeName` of pending pods, indexed from the pod informer), so
a restarted or newly elected controller holds the same, and the hold ends when
the pod's claims are allocated, or it is bound, deleted or loses its
nomination. A nominated pod is retried at every change of the view, its backoff
aside (`WorkQueue.hurry`), so it is decided as soon as the victims' shares are
released, before the pods it outranks (pod_order.py), and is allocated there or
wherever it fits first.

PodDisruptionBudgets come from the view's informer (disruption_budgets.py):
they steer which pods are reprieved first and which node is chosen, as in
kube-scheduler; victims are still deleted whatever a budget allows.

In mixed mode a legacy pod's HAMi hold (its `vgpu-devices-allocated` on the
GPUs of our slices, as the view charges it) is a share held by that pod alone:
the pod is a holder like a DRA one, chosen by the same rules and deleted the
same way; its hold is gone from the view once the pod is.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from controller.cluster_view import ClusterView
from controller.disruption_budgets import disruption_budgets
from controller.metrics import ControllerMetrics
from controller.mixed_usage import LegacyHold
from controller.object_state import allocated_node, allocation_of, is_pending, reservations_of
from controller.preemption import (
    PREEMPT_NEVER,
    Holder,
    Holdings,
    NodeVictims,
    NoPreemption,
    Preemptor,
    plan_preemption,
)
from controller.preemption_shares import Share, claim_shares
from controller.requests import PodVariant
from controller.work_queue import WorkQueue
from dra_driver.errors import DriverError
from dra_driver.kube.events import NORMAL, WARNING, EventRecorder, involved_object
from dra_driver.kube.informer import object_key
from dra_driver.kube.leader import WriteFence
from dra_driver.kube.rest import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    KubeClient,
    NotFoundError,
    object_path,
)
from dra_driver.objects.api_time import api_seconds, api_time
from dra_driver.objects.node_predicates import pod_resource_requests
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.pod_scheduling import pod_priority, preemption_policy

log = logging.getLogger(__name__)

DISRUPTION_TARGET = "DisruptionTarget"
DISRUPTION_REASON = "PreemptionByVGPUController"
"""kube-scheduler writes PreemptionByScheduler; this names the controller instead."""
PREEMPTED = "Preempted"
PREEMPTING = "Preempting"
PREEMPTION_FAILED = "PreemptionFailed"
HELD_FOR_NOMINATED = "capacity held for a pending pod of higher priority nominated to this node"
COMPONENT = "vgpu-dra-controller"
PREEMPTED_RESULT = "preempted"
NOT_ELIGIBLE = "not_eligible"
NOT_HELPFUL = "not_helpful"
WAITING = "waiting_for_victims"
FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Nomination:
    """A pending pod's nomination, as the pod informer last showed it."""

    node: str
    priority: int
    claims: tuple[str, ...]
    """The keys of the claims the pod uses (those of ours hold the node while unallocated)."""


@dataclass(frozen=True, slots=True)
class _Cluster:
    """What one view (`ClusterView.changes`) shows preemption: who holds which share,
    and per node the lowest priority among holders that are already terminating."""

    holdings: Holdings
    terminating: Mapping[str, int]


class _Found:
    """The holders met while reading the shares, and the lowest priority among those
    already terminating per node (they free their shares without us)."""

    def __init__(self, view: ClusterView, now: float) -> None:
        self._view = view
        self._now = now
        self.holders: dict[str, Holder] = {}
        self.terminating: dict[str, int] = {}

    def note(self, key: str, uid: str, node: str | None) -> None:
        """The pod `key` with this uid holds a share on `node` (skipped if the view
        holds another pod of that name, or none)."""
        pod = self._view.pods.get(key)
        if pod is None or pod["metadata"].get("uid") != uid:
            return
        priority = pod_priority(pod)
        if pod["metadata"].get("deletionTimestamp"):
            if node is not None:
                self.terminating[node] = min(priority, self.terminating.get(node, priority))
            return
        started = api_seconds(str((pod.get("status") or {}).get("startTime") or ""))
        self.holders[uid] = Holder(uid, key, priority, self._now if started is None else started)


def legacy_share(key: str, hold: LegacyHold, uid: str) -> Share:
    """A legacy pod's HAMi hold (mixed mode) as a share only its own eviction frees."""
    return Share(
        f"legacy:{key}",
        hold.node,
        dict(hold.usage),
        frozenset({uid}),
        tuple((hold.namespace, vendor, memory, cores) for vendor, memory, cores in hold.quota_use),
    )


class Preemptions:
    """Plans and carries out preemptions; answers which nodes are held for whom."""

    def __init__(
        self,
        client: KubeClient,
        view: ClusterView,
        queue: WorkQueue,
        recorder: EventRecorder,
        metrics: ControllerMetrics,
        fence: WriteFence,
    ) -> None:
        self.client = client
        self.view = view
        self.queue = queue
        self.recorder = recorder
        self.metrics = metrics
        self.fence = fence
        self.tasks: set[asyncio.Task[None]] = set()
        self._nominated: dict[str, Nomination] = {}
        self._cluster: tuple[int, _Cluster] | None = None

    def note_pod(self, kind: str, pod: dict[str, Any]) -> None:
        """The pod informer's handler: index pending pods' nominations. One that ends
        lets the pods it held off try again."""
        key = object_key(pod)
        node = (pod.get("status") or {}).get("nominatedNodeName")
        if kind != "DELETED" and node and is_pending(pod):
            namespace = pod["metadata"].get("namespace")
            claims = tuple(f"{namespace}/{n}" for n in pod_claim_names(pod).values() if n)
            self._nominated[key] = Nomination(str(node), pod_priority(pod), claims)
            self.queue.hurry(key, True)
        elif self._nominated.pop(key, None) is not None:
            self.queue.hurry(key, False)
            self.queue.changed()

    def without_held(
        self, pod: Mapping[str, Any], candidates: Sequence[str], refused: dict[str, str]
    ) -> list[str]:
        """The candidates less the nodes held for a nominated pod of higher priority
        than `pod`; each of those is added to `refused` with the reason."""
        if not self._nominated:
            return list(candidates)
        own = object_key(pod)
        priority = pod_priority(pod)
        held = {
            nomination.node
            for key, nomination in self._nominated.items()
            if key != own and nomination.priority > priority and self._still_waits(nomination)
        }
        for node in held.intersection(candidates):
            refused[node] = HELD_FOR_NOMINATED
        return [node for node in candidates if node not in held]

    def consider(
        self,
        key: str,
        pod: Mapping[str, Any],
        variants: Sequence[PodVariant],
        nodes: Sequence[str],
        refused: Mapping[str, str],
        news: bool,
    ) -> None:
        """The pod fit on none of `nodes` (its candidates): preempt for it if that helps,
        there or on a node of `refused` that only lacks room pods there could give.
        `news`: the refusal is the first since the view changed."""
        if not news or self.queue.in_flight(key):
            return
        policy = preemption_policy(pod)
        if policy == PREEMPT_NEVER:
            self.metrics.preemption_attempts.labels(NOT_ELIGIBLE).inc()
            return
        priority = pod_priority(pod)
        cluster = self._current()
        nominated = (pod.get("status") or {}).get("nominatedNodeName")
        if nominated and cluster.terminating.get(nominated, priority) < priority:
            self.metrics.preemption_attempts.labels(WAITING).inc()
            return
        rooms = self.view.node_filter.rooms(pod, refused)
        if rooms:
            tried = set(nodes).union(rooms)
            nodes = [name for name in self.view.inventory.nodes if name in tried]
        plan = plan_preemption(
            Preemptor(priority, variants, policy, pod_resource_requests(pod)),
            self.view.engine,
            self.view.inventory,
            nodes,
            replace(cluster.holdings, rooms=rooms),
            random.randrange(len(nodes)) if nodes else 0,
            self.view.partition_usage,
        )
        if isinstance(plan, NoPreemption):
            self.metrics.preemption_attempts.labels(NOT_HELPFUL).inc()
            log.info("preemption not helpful", extra={"pod": key, "why": plan.message})
            if nominated:
                self._spawn(key, self._clear_nomination(pod))
            return
        self._spawn(key, self._carry_out(pod, plan))

    def _still_waits(self, nomination: Nomination) -> bool:
        """Some claim of ours the nominated pod uses is unallocated (or not seen yet)."""
        for key in nomination.claims:
            claim = self.view.claim_view.get(key)
            if claim is None:
                return True
            if (
                self.view.is_ours(claim)
                and allocation_of(claim) is None
                and key not in self.view.pending
            ):
                return True
        return False

    def _current(self) -> _Cluster:
        """Holdings and terminating holders, built once per view."""
        changes = self.view.changes
        if self._cluster is not None and self._cluster[0] == changes:
            return self._cluster[1]
        view = self.view
        claims = view.effective_claims()
        found = _Found(view, api_seconds(api_time()) or 0.0)
        for claim in claims:
            namespace = claim["metadata"].get("namespace", "")
            node = allocated_node(claim)
            for entry in reservations_of(claim):
                if entry.get("resource") == "pods":
                    found.note(f"{namespace}/{entry.get('name')}", str(entry.get("uid")), node)
        shares = claim_shares(claims, view.inventory, view.vendors)
        for key, hold in view.legacy_holds.items():
            pod = view.pods.get(key)
            if pod is not None:
                uid = str(pod["metadata"].get("uid") or "")
                found.note(key, uid, hold.node)
                shares.append(legacy_share(key, hold, uid))
        budgets = disruption_budgets(view.budgets.store.values(), view.pods.store.values())
        cluster = _Cluster(Holdings(found.holders, shares, budgets), found.terminating)
        self._cluster = (changes, cluster)
        return cluster

    def _spawn(self, key: str, work: Coroutine[Any, Any, None]) -> None:
        """Run the writes in a task; the pod is not decided again until they end."""
        self.queue.start(key)

        async def guarded() -> None:
            try:
                await work
            except DriverError as error:
                log.warning("preemption stopped", extra={"pod": key, "error": str(error)})
            finally:
                self.queue.finish(key)
                self.queue.poke()

        task = asyncio.create_task(guarded(), name=f"preempt for {key}")
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _carry_out(self, pod: Mapping[str, Any], plan: NodeVictims) -> None:
        """Nominate, then for each victim in order: the condition, the delete, the event."""
        preemptor = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        try:
            await self._patch_status(pod, {"status": {"nominatedNodeName": plan.node}})
        except ApiError as error:
            self._failed(pod, f"could not nominate node {plan.node}: {error}")
            return
        evicted: list[str] = []
        for victim in plan.victims:
            current = self.view.pods.get(victim.name)
            if current is None or current["metadata"].get("uid") != victim.uid:
                continue  # gone already: its share frees without us
            condition = {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "reason": DISRUPTION_REASON,
                "message": f"{COMPONENT}: preempting to accommodate a higher priority pod "
                f"{preemptor}",
                "lastTransitionTime": api_time(),
            }
            try:
                await self._patch_status(
                    current, {"status": {"conditions": [condition]}}, STRATEGIC_MERGE_PATCH
                )
                self.fence.check()
                await self.client.delete(_pod_path(current))
            except NotFoundError:
                continue
            except ApiError as error:
                self._failed(pod, f"could not preempt pod {victim.name}: {error}")
                if not evicted:
                    await self._clear_nomination(pod)
                return
            evicted.append(victim.name)
            self.metrics.preemption_victims.inc()
            self.recorder.emit(
                involved_object(current, "Pod", "v1"),
                NORMAL,
                PREEMPTED,
                f"Preempted by pod {pod['metadata'].get('uid')} on node {plan.node}",
            )
        self.metrics.preemption_attempts.labels(PREEMPTED_RESULT).inc()
        self.recorder.emit(
            involved_object(pod, "Pod", "v1"),
            NORMAL,
            PREEMPTING,
            f"preempted {len(evicted)} pod(s) of lower priority on node {plan.node}: "
            + ", ".join(evicted),
        )
        log.info("preempted", extra={"pod": preemptor, "node": plan.node, "victims": evicted})

    async def _clear_nomination(self, pod: Mapping[str, Any]) -> None:
        try:
            await self._patch_status(pod, {"status": {"nominatedNodeName": None}})
        except NotFoundError:
            return

    def _failed(self, pod: Mapping[str, Any], message: str) -> None:
        self.metrics.preemption_attempts.labels(FAILED).inc()
        self.recorder.emit(involved_object(pod, "Pod", "v1"), WARNING, PREEMPTION_FAILED, message)

    async def _patch_status(
        self, pod: Mapping[str, Any], patch: Mapping[str, Any], content_type: str = MERGE_PATCH
    ) -> None:
        self.fence.check()
        await self.client.patch(f"{_pod_path(pod)}/status", patch, content_type)


def _pod_path(pod: Mapping[str, Any]) -> str:
    metadata = pod["metadata"]
    return object_path(f"/api/v1/namespaces/{metadata['namespace']}/pods", metadata["name"])
