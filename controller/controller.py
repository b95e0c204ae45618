"""The DRA claim allocator: watch, decide with the HAMi engine, write, clean up.

One task decides, serially, from the controller's own view (cluster_view.py):
the informers' objects, overlaid with the allocations this process wrote or
is writing. Decisions (decide.py, pure) are charged to the engine at once, so
the next pod is decided without waiting for any write; the writes run
concurrently (allocation_writer.py), each pod's claims in order, undone
together if one fails. Nothing in here blocks on the API while deciding.

Work is per pod (work_queue.py): a pending pod whose claims of our
DeviceClasses are not yet allocated. A pod that fits nowhere gets events with
the engine's reasons and waits until the cluster changes (event_handlers.py
say when) and at least its backoff, so a stuck pod never spins. Allocations
no pod will use are cleared, and pods kube-scheduler could not put on the
chosen node are moved (sweeper.py). Each claim's allocation is written with the
pod's reservation, so kube-scheduler only binds; a pending pod whose claims
were all allocated already (shared claims) is added to their reservations.
In mixed mode legacy pods' HAMi annotations count as usage, a refusal for room
names the legacy pods holding the node's GPUs, and writes hold HAMi's node
lock (node_guard.py). A pod that fits nowhere may preempt pods of lower priority,
and the node it is nominated to is held from those until it is allocated
(preemptor.py).

This module composes those parts and runs the loop: sync each due key, then
sleep until the next one is due or something changed. Keys are synced in the
order kube-scheduler's queue would pop them (pod_order.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.allocation import build_allocation
from controller.allocation_gate import ALLOCATION_GATE
from controller.allocation_writer import AllocationWriter
from controller.burst_end import BurstEnd
from controller.claim_writes import (
    MAX_RESERVATIONS,
    ClaimWriter,
    WriteSettings,
    pod_reservation,
    reserved_for,
)
from controller.cluster_view import ClusterView
from controller.decide import NoFit, PodAllocation, bounded_message, decide_pod, partition_quota
from controller.event_handlers import ClusterEventHandlers
from controller.metrics import ControllerMetrics, ViewSnapshot
from controller.mixed_usage import legacy_holders, short_of_room, with_holders
from controller.node_guard import MixedNodeGuard, NodeGuard, NoNodeGuard
from controller.object_state import (
    allocated_node,
    allocation_of,
    condition_signature,
    is_pending,
    scheduled_condition,
)
from controller.pod_order import QueueRank, queue_rank
from controller.pod_placements import PodPlacements
from controller.preemptor import Preemptions
from controller.requests import pod_variants
from controller.settings import ControllerSettings
from controller.sweeper import Sweeper
from controller.view_snapshot import SnapshotBuilder
from controller.work_queue import STANDALONE, WorkQueue
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.events import WARNING, EventRecorder, involved_object
from dra_driver.kube.informer import object_key
from dra_driver.kube.leader import NO_FENCE, WriteFence
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.api_time import api_time
from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.pod_scheduling import scheduling_gate_names
from dra_driver.process.runtime import cancel_and_wait

log = logging.getLogger(__name__)

FILTERING_FAILED = "FilteringFailed"
INVALID_PARAMETERS = "InvalidParameters"
SNAPSHOT_PERIOD_S = 1.0
SYNCS_BETWEEN_YIELDS = 32
"""Keys synced before the loop lets the informers and writes run (a long queue)."""


class Controller:
    """Allocates the claims of pending pods; `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        recorder: EventRecorder,
        *,
        vendors: VendorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        after_sync: Callable[[], None] | None = None,
        release_memory: Callable[[], bool] | None = None,
        fence: WriteFence = NO_FENCE,
    ) -> None:
        # Its own User-Agent: the RBAC audit checks these calls against its ClusterRole.
        client = client.for_component("controller")
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.recorder = recorder
        self.vendors = vendors or dra_vendor_registry()
        self.clock = clock
        self.after_sync = after_sync
        """Called once the informers listed everything, before the first decision."""
        self.release_memory = release_memory
        """Called once a burst's pods and claims are gone (burst_end.py): gives the freed
        memory back to the system; True if some went back."""
        self._burst_end = BurstEnd(settings.release_after_freed_objects)
        self.ready = asyncio.Event()
        self.view = ClusterView(client, settings, self.vendors, recorder)
        self.queue = WorkQueue(
            clock, settings.retry_initial_s, settings.retry_max_s, rank=self._rank
        )
        self.placements = PodPlacements()
        guard: NodeGuard = (
            MixedNodeGuard(client, self.view, NodeLocker(client, claim_holders=True))
            if settings.mixed_mode
            else NoNodeGuard()
        )
        self.writer = AllocationWriter(
            ClaimWriter(
                client,
                WriteSettings(
                    settings.write_attempts, settings.write_retry_s, settings.write_retry_max_s
                ),
                fence,
            ),
            self.view,
            self.queue,
            self.placements,
            metrics,
            concurrency=settings.write_concurrency,
            retry_initial_s=settings.retry_initial_s,
            guard=guard,
            recorder=recorder,
        )
        self.sweeper = Sweeper(
            self.view, self.writer, self.queue, self.placements, recorder, settings, clock
        )
        self.view.subscribe(
            ClusterEventHandlers(
                self.view,
                self.queue,
                self.sweeper,
                self.placements,
                allocate_standalone_claims=settings.allocate_standalone_claims,
            )
        )
        self.preemptions = Preemptions(client, self.view, self.queue, recorder, metrics, fence)
        self.view.pods.handlers.append(self.preemptions.note_pod)
        self._snapshot = ViewSnapshot()
        self._snapshot_at = float("-inf")
        self._snapshots = SnapshotBuilder()
        self._snapshot_changes = -1

    async def run(self) -> None:
        """Start from a fresh list of everything, then allocate until cancelled."""
        informers = self.view.informers
        tasks = [asyncio.create_task(i.run(), name=f"informer {i.path}") for i in informers]
        self.metrics.attach_view(lambda: self._snapshot)
        try:
            await asyncio.gather(*(informer.synced.wait() for informer in informers))
            for pod in list(self.view.pods.store.values()):
                if is_pending(pod):
                    self.queue.enqueue(object_key(pod))
            self.sweeper.check_later(self.view.claims.store)
            if self.settings.allocate_standalone_claims:
                for claim_key in self.view.claims.store:
                    if not self.view.pods_referring(claim_key):
                        self.queue.enqueue(STANDALONE + claim_key)
            if self.after_sync is not None:
                self.after_sync()
            self.ready.set()
            await self._loop()
        finally:
            self.metrics.detach_view()
            await cancel_and_wait([*tasks, *self.writer.tasks, *self.preemptions.tasks])

    def publish_view(self) -> None:
        """Refresh what /metrics shows (done every second; scrapes read this copy, from
        their own thread, so they never walk the live view). Built again only when the
        view changed since: walking every claim cost ~160 ms at 10,000 claims."""
        self._snapshot_at = self.clock()
        if self.view.changes == self._snapshot_changes:
            return
        self._snapshot_changes = self.view.changes
        self._snapshot = self._snapshots.build(self.view)

    async def _loop(self) -> None:
        while True:
            self.queue.wake.clear()
            now = self.clock()
            self.view.refresh()
            self.sweeper.sweep()
            version = self.queue.version
            for position, key in enumerate(self.queue.due(now)):
                if not self.queue.take(key):
                    continue
                self.view.refresh()
                if key.startswith(STANDALONE):
                    self._sync_standalone(key)
                else:
                    self._sync_pod(key)
                if position % SYNCS_BETWEEN_YIELDS == SYNCS_BETWEEN_YIELDS - 1:
                    await asyncio.sleep(0)
                    if self.queue.version != version:
                        break  # a waiting key may outrank the rest now (pod_order.py)
            self._update_gauges(now)
            timeout = self.queue.next_timeout(self.clock(), self._snapshot_at + SNAPSHOT_PERIOD_S)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self.queue.wake.wait()

    def _rank(self, key: str) -> QueueRank:
        if key.startswith(STANDALONE):
            return queue_rank(self.view.claim_view.get(key.removeprefix(STANDALONE)))
        return queue_rank(self.view.pods.get(key))

    def _update_gauges(self, now: float) -> None:
        pending = sum(len(self.view.claims_of_pod(key)) for key in self.queue.trying())
        self.metrics.pending_claims.set(pending)
        held = len(self.view.pods.store) + len(self.view.claims.store)
        self._burst_end.observe(held)
        if now - self._snapshot_at >= SNAPSHOT_PERIOD_S:
            self.publish_view()
            self._release_after_burst(held)

    def _release_after_burst(self, held: int) -> None:
        if not self._burst_end.over(held, self.view.changes):
            return
        self.view.forget_burst_memos()
        if self.release_memory is None:
            return
        released = self.release_memory()
        self.metrics.memory_releases.inc()
        log.info(
            "freed memory given back after a burst", extra={"held": held, "released": released}
        )

    def _sync_pod(self, key: str) -> None:
        pod = self.view.pods.get(key)
        if pod is None or not is_pending(pod) or self.queue.in_flight(key):
            return
        namespace = pod["metadata"]["namespace"]
        names = list(pod_claim_names(pod).values())
        if any(name is None for name in names):
            return
        claims = [self.view.claim_view.get(f"{namespace}/{name}") for name in names]
        if any(claim is None for claim in claims):
            return
        ours = [c for c in claims if c is not None and self.view.is_ours(c)]
        unallocated = [
            c for c in ours if allocation_of(c) is None and object_key(c) not in self.view.pending
        ]
        if not unallocated:
            self.queue.pop_first_try(key)
            if not self._reserve(key, pod, ours):
                if ALLOCATION_GATE in scheduling_gate_names(pod):
                    self.writer.spawn(self.writer.release_gate(key), f"release gate {key}")
                self.sweeper.check_moved(key, pod, ours)
            return
        if any(c["metadata"].get("deletionTimestamp") for c in unallocated):
            return
        pinned = {
            node
            for c in claims
            if c is not None and (node := allocated_node(c) or self.view.pending_node(c))
        }
        self._allocate(key, pod, unallocated, pinned)

    def _reserve(self, key: str, pod: Mapping[str, Any], ours: list[dict[str, Any]]) -> bool:
        """Add the pod to the reservations of its allocated claims that do not list it, as
        kube-scheduler's PreBind would, when their node passes the pod's node predicates
        here (else kube-scheduler decides); True if the writes started."""
        uid = pod["metadata"].get("uid", "")
        missing = [c for c in ours if not reserved_for(c, uid)]
        if not missing or any(
            object_key(c) in self.view.pending
            or c["metadata"].get("deletionTimestamp")
            or len(c["status"].get("reservedFor") or []) >= MAX_RESERVATIONS
            for c in missing
        ):
            return False
        nodes = {allocated_node(c) for c in ours}
        if len(nodes) != 1 or None in nodes:
            return False
        avoided = self.placements.avoided(uid, self.clock())
        node = str(next(iter(nodes)))
        candidates, _ = self.view.node_filter.candidates(pod, [node], {node}, avoided)
        if node not in candidates:
            return False
        self.writer.reserve_pod(key, missing, pod_reservation(pod))
        return True

    def _sync_standalone(self, key: str) -> None:
        """A claim of ours no pod refers to (when configured): any node that fits."""
        claim_key = key.removeprefix(STANDALONE)
        claim = self.view.claim_view.get(claim_key)
        if (
            claim is None
            or self.queue.in_flight(key)
            or allocation_of(claim) is not None
            or claim_key in self.view.pending
            or claim["metadata"].get("deletionTimestamp")
            or self.view.pods_referring(claim_key)
            or not self.view.is_ours(claim)
        ):
            return
        metadata = claim["metadata"]
        holder = {
            "metadata": {
                "name": metadata["name"],
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
            },
            "spec": {},
        }
        self._allocate(key, holder, [claim], set())

    def _allocate(
        self,
        key: str,
        pod: Mapping[str, Any],
        unallocated: list[dict[str, Any]],
        pinned: set[str],
    ) -> None:
        """Decide for the unallocated claims, then commit and write, or report why not."""
        self.queue.note_first_try(key)
        view = self.view
        avoided = self.placements.avoided(pod["metadata"].get("uid", ""), self.clock())
        candidates, refused = view.node_filter.candidates(
            pod, view.inventory.nodes, pinned, avoided
        )
        candidates = self.preemptions.without_held(pod, candidates, refused)
        context = view.request_context()
        started = time.perf_counter()
        try:
            variants = pod_variants(pod, unallocated, context)
            outcome = decide_pod(
                view.engine, variants, view.inventory, candidates, refused, view.partition_usage
            )
        except InvalidParameterError as error:
            self._refuse(key, pod, unallocated, INVALID_PARAMETERS, str(error))
            return
        finally:
            self.metrics.decision_latency.observe(time.perf_counter() - started)
        if isinstance(outcome, NoFit):
            holders = legacy_holders(view.legacy_holds, short_of_room(outcome.reasons))
            message = bounded_message(with_holders(outcome.message, holders))
            news = self._refuse(key, pod, unallocated, FILTERING_FAILED, message)
            if not key.startswith(STANDALONE):
                self.preemptions.consider(key, pod, variants, candidates, refused, news)
            return
        self._commit(key, pod, unallocated, outcome)

    def _refuse(
        self,
        key: str,
        pod: Mapping[str, Any],
        claims: Iterable[Mapping[str, Any]],
        reason: str,
        message: str,
    ) -> bool:
        """Back the key off; tell the pod and its claims why, once per change of the view
        (True then)."""
        self.metrics.failures.labels(reason).inc()
        if not self.queue.back_off(key):
            return False
        if not key.startswith(STANDALONE):
            self.recorder.emit(involved_object(pod, "Pod", "v1"), WARNING, reason, message)
        for claim in claims:
            self.recorder.emit(
                involved_object(claim, "ResourceClaim", "resource.k8s.io/v1"),
                WARNING,
                reason,
                message,
            )
        log.info("pod's claims not allocated", extra={"pod": key, "why": message[:300]})
        return True

    def _commit(
        self, key: str, pod: Mapping[str, Any], claims: list[dict[str, Any]], chosen: PodAllocation
    ) -> None:
        """Charge the engine, mark the allocations pending in the view, start the writes."""
        self.view.engine.commit(chosen.variant.request, chosen.placement)
        quota = partition_quota(self.view.engine, chosen.variant, self.view.inventory)
        for results in chosen.results:
            for planned in results:
                partition = self.view.inventory.partitions.get(planned.device.key)
                if partition is not None:
                    self.view.partition_usage.charge(partition)
                    if quota is not None:
                        quota.charge(partition)
        self.view.touch()
        self.queue.settle(key)
        now = api_time()
        writes = []
        for claim, variant, results in zip(
            claims, chosen.variant.claims, chosen.results, strict=True
        ):
            allocation = build_allocation(
                variant, results, self.view.classes.store, chosen.node, now
            )
            self.view.pending[object_key(claim)] = allocation
            writes.append((claim, allocation))
        self.placements.sent(
            pod["metadata"].get("uid", ""),
            chosen.node,
            condition_signature(scheduled_condition(pod)),
        )
        reservation = None if key.startswith(STANDALONE) else pod_reservation(pod)
        self.writer.write_pod(key, writes, reservation)
