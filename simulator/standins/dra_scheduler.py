"""A kube-scheduler stand-in for the DRA path, driven through the official client.

It reproduces what a real v1.36 kube-scheduler did with claims allocated by a third
party (reference kubernetes-dra.md §2, "Verified on a real ..."): the pod goes to the
node of `allocation.nodeSelector`; PreBind adds the pod to `status.reservedFor` and, in
that same write, stamps an `allocationTimestamp` the allocator left out (the API server
refuses that as "field is immutable", so such a pod never binds), and writes nothing
when the claim is already reserved for the pod; then `pods/binding`. Filter runs
kube-scheduler's default plugin order (node_fit.py): a node that fails the node
predicates (taints, selector, unschedulable, NodeResourcesFit: pods and every resource
the pod requests, 0 where the node lists none) never reaches
DynamicResources' check of the allocated claims, so when the pod fits nowhere for such
reasons the claim stays allocated and unreserved; a node that passes them but that
an allocated claim cannot reach marks the claim unavailable, and PostFilter then
clears ONE unavailable claim reserved by nobody or only by this pod. Either way the
pod gets PodScheduled=False. A pod whose claim does not exist yet (a template's claim
kube-controller-manager has not made) is kept out of the queue as DynamicResources'
PreEnqueue keeps it: nothing is tried or written until its claim or the pod changes.
A pod with scheduling gates is kept out the same way (SchedulingGates' PreEnqueue)
until its last gate goes; the queue takes pods highest `spec.priority` first.

A DRA extended resource (a DeviceClass's resource name the node does not list), which
kube-scheduler allocates through a claim of its own making, is not modelled: the node
is refused with DRA_EXTENDED_NOT_MODELLED rather than the pod placed without devices.

By default it never allocates claims itself (the controller-allocated mode: an
unallocated claim leaves the pod pending). With `SchedulerSettings(allocate=True)` it
also runs the structured-parameters allocator for the subset this driver publishes, so
the scheduler-allocated mode can be simulated. The allocation, the reservation and the
`resource.kubernetes.io/delete-protection` finalizer are written in PreBind, as
kube-scheduler does for claims it allocates.

Like kube-scheduler it reads from watch-fed caches (dra_scheduler_cache.py, fed by
watch_reflector.py: one list+watch per resource, not one list per cycle), takes pods
from a queue the watch fills (dra_scheduler_queue.py: backoff on failure, woken when
a claim the pod uses or a node changes), runs one scheduling cycle at a time (pure
over the cache) and carries out its writes asynchronously, several bindings in
flight, the placed pod assumed on its node meanwhile. `schedule()` runs one cycle on
objects read for it, for tests and one-off use. Every request goes through
dra_scheduler_api.py.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.api_time import api_time
from dra_driver.objects.node_predicates import dra_extended_resources, pod_resource_requests
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.pod_scheduling import pod_priority, scheduling_gate_names
from simulator.standins.dra_allocator import (
    Pick,
    build_allocation,
    build_requests,
    device_usage,
    node_pool_counters,
    node_pool_devices,
    plan_allocation,
)
from simulator.standins.dra_scheduler_api import SchedulerAPI, api_message
from simulator.standins.dra_scheduler_cache import (
    SchedulerCache,
    key_of,
)
from simulator.standins.dra_scheduler_queue import SchedulingQueue
from simulator.standins.node_fit import (
    CLAIM_NOT_ON_NODE,
    DRA_EXTENDED_NOT_MODELLED,
    FitFailure,
    NodeInfo,
    deallocatable,
    dra_extended_requests,
    fit_failure_on,
    pinned_nodes,
    unavailable_claims,
)
from simulator.standins.scheduler_extender import fit_error_message
from simulator.standins.watch_reflector import Reflector

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
CANNOT_ALLOCATE = "cannot allocate all claims"
PRE_ENQUEUE = "PreEnqueue"
"""The outcome's reason for a pod DynamicResources' PreEnqueue kept out of the queue
(kube-scheduler writes no condition for it)."""
GATED_MESSAGE = "waiting for scheduling gates: [{}]"
"""SchedulingGates' PreEnqueue status for a pod with gates left (Go's %v of the names)."""


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """How the stand-in behaves.

    `allocate`: allocate unallocated claims itself (scheduler-allocated mode); off by
    default, because in the controller-allocated mode the controller is the only allocator.
    `poll_interval`: seconds a failed list or watch waits before it is tried again.
    `initial_backoff` / `max_backoff`: seconds a pod that did not fit waits before its next
    attempt, doubled per failure; kube-scheduler's podInitialBackoffSeconds (1) and
    podMaxBackoffSeconds (10). A change of a claim the pod uses, or of a node, ends the
    wait early.
    `parallelism`: pods whose writes (PreBind, binding, or the PodScheduled=False
    condition) may be in flight at once; kube-scheduler binds asynchronously too.
    """

    scheduler_name: str = SCHEDULER_NAME
    allocate: bool = False
    poll_interval: float = 0.1
    initial_backoff: float = 1.0
    max_backoff: float = 10.0
    parallelism: int = 16


@dataclass(frozen=True)
class SchedulingOutcome:
    """Where the pod went, or why it did not (the PodScheduled=False reason and message)."""

    node: str | None
    reason: str | None = None
    message: str = ""


@dataclass(frozen=True)
class _Placement:
    """A cycle's choice: the node, the pod's claims, the allocations decided here (by
    claim index) and the claims as assumed with them."""

    node: str
    claims: list[dict[str, Any]]
    allocations: dict[int, dict[str, Any]] = field(default_factory=dict)

    def assumed_claims(self) -> list[dict[str, Any]]:
        return [
            {**self.claims[i], "status": {**(self.claims[i].get("status") or {}), "allocation": a}}
            for i, a in self.allocations.items()
        ]


@dataclass(frozen=True)
class _Rejection:
    """A cycle that found no node: the condition to write, and PostFilter's claim to clear."""

    reason: str
    message: str
    deallocate: dict[str, Any] | None = None


@dataclass(frozen=True)
class _Gated:
    """DynamicResources' PreEnqueue refused the pod (a claim not created yet): the pod is
    not tried and nothing is written; it waits for its claim or pod to change."""

    message: str


_Decision = _Placement | _Rejection | _Gated


@dataclass
class _RunState:
    """What `run` shares with the tasks carrying out its cycles."""

    cache: SchedulerCache
    queue: SchedulingQueue
    slots: asyncio.Semaphore
    in_flight: set[str] = field(default_factory=set)
    woken: set[str] = field(default_factory=set)
    """Pods an event woke while their writes were in flight: tried again at once."""

    def wake(self, key: str) -> None:
        self.cache.parked.discard(key)
        self.queue.add(key)


class DRAScheduler:
    """Schedules pods through the API, like kube-scheduler's DRA path."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        scheduler_name: str = SCHEDULER_NAME,
        *,
        settings: SchedulerSettings | None = None,
    ) -> None:
        self.settings = settings or SchedulerSettings(scheduler_name=scheduler_name)
        self.api = SchedulerAPI(api_client, self.settings.parallelism)
        self.scheduler_name = self.settings.scheduler_name

    async def run(self, stop: asyncio.Event) -> None:
        """Schedule this scheduler's unbound pods until `stop` is set."""
        loop = asyncio.get_running_loop()
        cache = SchedulerCache(self.scheduler_name)
        queue = SchedulingQueue(
            self.settings.initial_backoff,
            self.settings.max_backoff,
            lambda key: pod_priority(cache.pods.get(key) or {}),
        )
        state = _RunState(cache, queue, asyncio.Semaphore(self.settings.parallelism))
        cache.wake = state.wake
        reflectors = [
            Reflector(name, method, loop, functools.partial(cache.apply, name))
            for name, method in self._watched().items()
        ]
        for reflector in reflectors:
            reflector.retry_s = self.settings.poll_interval
            reflector.start()
        tasks: set[asyncio.Task[None]] = set()
        try:
            await _first_of(stop.wait(), *(r.synced.wait() for r in reflectors))
            while (key := await queue.pop(stop)) is not None:
                pod = cache.pods.get(key)
                if key in state.in_flight:
                    state.woken.add(key)
                    continue
                if (
                    pod is None
                    or not cache.pending(pod)
                    or scheduling_gate_names(pod)
                    or cache.assumed(key)
                ):
                    queue.done(key)
                    continue
                await state.slots.acquire()
                decision = self._cycle(cache, pod)
                if not isinstance(decision, _Placement):
                    cache.parked.add(key)
                else:
                    cache.assume(key, decision.node, decision.assumed_claims())
                state.in_flight.add(key)
                task = asyncio.create_task(self._finish(state, pod, decision))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            for reflector in reflectors:
                reflector.stop()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for reflector in reflectors:
                await asyncio.to_thread(reflector.join)

    def _watched(self) -> dict[str, Any]:
        watched = {
            "nodes": self.api.core.list_node,
            "pods": self.api.core.list_pod_for_all_namespaces,
            "claims": self.api.resource.list_resource_claim_for_all_namespaces,
            "classes": self.api.resource.list_device_class,
        }
        if self.settings.allocate:
            watched["slices"] = self.api.resource.list_resource_slice
        return watched

    async def _finish(self, state: _RunState, pod: dict[str, Any], decision: _Decision) -> None:
        """A cycle's writes, then the pod's place in the queue."""
        key = key_of(pod)
        try:
            outcome = await self._carry_out(state.cache, pod, decision)
        except ApiException as error:
            outcome = SchedulingOutcome(None, "SchedulerError", api_message(error))
            log.warning("writing a scheduling outcome failed", extra={"pod": key, **vars(outcome)})
        finally:
            state.in_flight.discard(key)
            state.slots.release()
        woken = key in state.woken
        state.woken.discard(key)
        if outcome.node is not None:
            state.queue.done(key)
            return
        cached = state.cache.pods.get(key)
        if cached is None or not state.cache.pending(cached):
            return
        if woken:
            state.wake(key)
            return
        state.cache.parked.add(key)
        delay = state.queue.back_off(key)
        log.info("pod not scheduled", extra={"pod": key, "retry_in": delay})

    async def schedule(self, namespace: str, name: str) -> SchedulingOutcome:
        """One scheduling cycle for the pod, on objects read for it; the outcome is also
        written (binding, or PodScheduled=False)."""
        pod = await self.api.read(self.api.core.read_namespaced_pod, name, namespace)
        cache = SchedulerCache(self.scheduler_name)
        for resource, method in self._watched().items():
            cache.apply(resource, "LIST", (await self.api.read(method))["items"])
        cache.apply("pods", "MODIFIED", pod)
        if not cache.pending(pod):
            return SchedulingOutcome((pod.get("spec") or {}).get("nodeName"))
        if gates := scheduling_gate_names(pod):
            return SchedulingOutcome(None, PRE_ENQUEUE, GATED_MESSAGE.format(" ".join(gates)))
        decision = self._cycle(cache, pod)
        if isinstance(decision, _Placement):
            cache.assume(key_of(pod), decision.node, decision.assumed_claims())
        return await self._carry_out(cache, pod, decision)

    async def _carry_out(
        self, cache: SchedulerCache, pod: dict[str, Any], decision: _Decision
    ) -> SchedulingOutcome:
        if isinstance(decision, _Gated):
            return SchedulingOutcome(None, PRE_ENQUEUE, decision.message)
        if isinstance(decision, _Rejection):
            if decision.deallocate is not None:
                await self._post_filter_write(decision.deallocate)
            await self.api.write_unscheduled(pod, decision.reason, decision.message)
            return SchedulingOutcome(None, decision.reason, decision.message)
        try:
            for index, claim in enumerate(decision.claims):
                allocation = decision.allocations.get(index)
                if allocation is None:
                    await self.api.write_reservation(claim, pod)
                else:
                    await self.api.write_allocation(claim, allocation, pod)
        except ApiException as error:
            message = f'running PreBind plugin "DynamicResources": {api_message(error)}'
            return await self._bind_failed(cache, pod, decision, message)
        try:
            await self.api.write_binding(pod, decision.node)
        except ApiException as error:
            return await self._bind_failed(cache, pod, decision, api_message(error))
        return SchedulingOutcome(decision.node)

    async def _bind_failed(
        self, cache: SchedulerCache, pod: dict[str, Any], decision: _Placement, message: str
    ) -> SchedulingOutcome:
        cache.forget(key_of(pod), decision.assumed_claims())
        await self.api.write_unscheduled(pod, "SchedulerError", message)
        return SchedulingOutcome(None, "SchedulerError", message)

    async def _post_filter_write(self, claim: dict[str, Any]) -> None:
        """PostFilter's deallocation; an API error is logged (the cycle is Unschedulable
        either way, and the next one sees the claim as it is then)."""
        try:
            await self.api.write_deallocation(claim)
        except ApiException as error:
            log.warning(
                "deallocating an unavailable claim failed",
                extra={"claim": key_of(claim), "error": api_message(error)},
            )

    # ---- one scheduling cycle (no I/O) -------------------------------------------

    def _cycle(self, cache: SchedulerCache, pod: dict[str, Any]) -> _Decision:
        namespace = pod["metadata"]["namespace"]
        claims = []
        for claim_name in pod_claim_names(pod).values():
            if claim_name is None:
                return _Gated("waiting for resource claim")
            claim = cache.claim(namespace, claim_name)
            if claim is None:
                return _Gated(f'resourceclaim "{claim_name}" not found')
            claims.append(claim)
        unallocated = [
            i for i, c in enumerate(claims) if not (c.get("status") or {}).get("allocation")
        ]
        try:
            return self._filter(cache, pod, claims, unallocated)
        except InvalidParameterError as error:
            return _Rejection("SchedulerError", str(error))

    def _filter(
        self,
        cache: SchedulerCache,
        pod: dict[str, Any],
        claims: list[dict[str, Any]],
        unallocated: Sequence[int],
    ) -> _Placement | _Rejection:
        """Filter over the nodes, first feasible wins; when none is, the FitError message
        over every node and PostFilter's pick."""
        requested = pod_resource_requests(pod)
        dra_resources = dra_extended_resources(cache.classes.values())
        allocator = (
            _Allocator(cache, [claims[i] for i in unallocated])
            if (self.settings.allocate and unallocated)
            else None
        )
        nodes = cache.node_infos()
        pinned = pinned_nodes(claims)
        if pinned is not None:
            # Every feasible node is among these: try them first, and walk every node
            # only to word the failure when none of them fits.
            candidates = [cache.nodes[name] for name in sorted(pinned) if name in cache.nodes]
            placed = _first_fit(
                pod, requested, dra_resources, candidates, claims, unallocated, allocator
            )
            if placed is not None:
                return placed
        reasons: dict[str, tuple[str, ...]] = {}
        resolvable = 0
        unavailable: set[int] = set()
        for info in nodes:
            failure = fit_failure_on(pod, requested, info, dra_resources)
            if failure is None:
                failure = _dynamic_resources_failure(requested, info, dra_resources, claims)
                if failure is not None and failure.reasons == (CLAIM_NOT_ON_NODE,):
                    unavailable.update(unavailable_claims(info.node, claims))
            picks: list[Pick] = []
            if failure is None and unallocated:
                planned = allocator.plan(info) if allocator is not None else None
                if planned is None:
                    failure = FitFailure.of(CANNOT_ALLOCATE)
                else:
                    picks = planned
            if failure is None:
                allocations = allocator.allocations(info, picks, unallocated) if allocator else {}
                return _Placement(info.name, claims, allocations)
            reasons[info.name] = failure.reasons
            if failure.resolvable:
                resolvable += 1
        message = fit_error_message(len(nodes), reasons, resolvable)
        uid = pod["metadata"]["uid"]
        cleared = next(
            (claims[i] for i in sorted(unavailable) if deallocatable(claims[i], uid)), None
        )
        return _Rejection("Unschedulable", message, cleared)


async def _first_of(stop: Coroutine[Any, Any, Any], *synced: Coroutine[Any, Any, Any]) -> None:
    """Until `stop` is done or every one of `synced` is."""
    waiters = [asyncio.ensure_future(stop), asyncio.ensure_future(asyncio.gather(*synced))]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def _dynamic_resources_failure(
    requested: Mapping[str, Decimal],
    info: NodeInfo,
    dra_resources: frozenset[str],
    claims: Sequence[Mapping[str, Any]],
) -> FitFailure | None:
    """DynamicResources' Filter on a node that passed the others: every allocated claim
    reachable from it; a DRA extended resource the stand-in cannot allocate refused."""
    if unavailable_claims(info.node, claims):
        return FitFailure.of(CLAIM_NOT_ON_NODE)
    if dra_extended_requests(requested, info, dra_resources):
        return FitFailure.of(DRA_EXTENDED_NOT_MODELLED)
    return None


def _first_fit(
    pod: dict[str, Any],
    requested: Mapping[str, Decimal],
    dra_resources: frozenset[str],
    nodes: Sequence[NodeInfo],
    claims: list[dict[str, Any]],
    unallocated: Sequence[int],
    allocator: _Allocator | None,
) -> _Placement | None:
    """The first of `nodes` that passes every Filter check, as a placement."""
    for info in nodes:
        if fit_failure_on(pod, requested, info, dra_resources) or _dynamic_resources_failure(
            requested, info, dra_resources, claims
        ):
            continue
        picks: list[Pick] = []
        if unallocated:
            planned = allocator.plan(info) if allocator is not None else None
            if planned is None:
                continue
            picks = planned
        allocations = allocator.allocations(info, picks, unallocated) if allocator else {}
        return _Placement(info.name, claims, allocations)
    return None


class _Allocator:
    """The scheduler-allocated mode's per-cycle view: requests, classes, device usage."""

    def __init__(self, cache: SchedulerCache, unallocated: list[dict[str, Any]]) -> None:
        self.cache = cache
        self.unallocated = unallocated
        self.requests = build_requests(unallocated, cache.classes)
        self.usage = device_usage(list(cache.every_claim()))

    def plan(self, info: NodeInfo) -> list[Pick] | None:
        slices = self.cache.slices_for(info.node)
        devices = node_pool_devices(slices, info.node)
        counters = node_pool_counters(slices, info.node)
        return plan_allocation(self.requests, devices, self.usage, counters)

    def allocations(
        self, info: NodeInfo, picks: Sequence[Pick], indexes: Sequence[int]
    ) -> dict[int, dict[str, Any]]:
        now = api_time()
        return {
            index: build_allocation(
                claim,
                [p for p in picks if p.request.claim == position],
                self.cache.classes,
                info.name,
                now,
            )
            for position, (index, claim) in enumerate(zip(indexes, self.unallocated, strict=True))
        }
