"""Writing a pod's decided allocations, reservations and taking allocations back, as tasks.

The decision loop charges an allocation to the engine and marks it pending in
the view before calling `write_pod`, so it never waits on the API. The writes
run concurrently (at most `write_concurrency` pods at once), each pod's claims
in order, each claim's allocation with the pod's reservation in one write; if
one fails, the ones already written are taken back and the pod is retried
after a jittered backoff. A pod of already allocated shared claims is added to
their reservations (`reserve_pod`), as kube-scheduler's PreBind would. In
mixed mode a pod's writes hold the node's lock (node_guard.py), and a lock
held by another or a legacy share that took the room fails them the same way.
Each completed write is adopted into the view before the watch shows it.
Once a pod's claims are allocated and reserved, the controller removes its own
allocation gate from the pod if that is the pod's last gate (`release_gate`,
allocation_gate.py): only then does kube-scheduler see the pod, ready to bind.
`ClaimWriter` (claim_writes.py) makes the API calls.

Owns: the write, reservation and clean-up tasks and the semaphore. Calls:
ClaimWriter, the view (adopt, pending, clearing), the work queue (in flight,
retry), the pod placements (condition as of our write), metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

from controller.allocation import describe_results
from controller.allocation_gate import ALLOCATION_GATE, gate_removal
from controller.claim_writes import ClaimWriter, Reservation
from controller.cluster_view import ClusterView
from controller.metrics import ControllerMetrics
from controller.node_guard import LegacyShareTakenError, NodeGuard, NoNodeGuard
from controller.object_state import (
    allocated_node,
    allocation_of,
    condition_signature,
    scheduled_condition,
)
from controller.pod_placements import PodPlacements
from controller.work_queue import WorkQueue, jittered
from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.events import WARNING, EventRecorder, involved_object
from dra_driver.kube.informer import object_key
from dra_driver.kube.rest import ApiError
from dra_driver.objects.node_lock import NodeLockBusyError
from dra_driver.objects.pod_claims import pod_claim_names

log = logging.getLogger(__name__)

WRITE_FAILED = "AllocationWriteFailed"
GATE_NOT_REMOVED = "AllocationGateNotRemoved"
"""The warning on a pod whose allocation gate the API refused to let the controller remove."""
HELD_BACK: dict[type[DriverError], str] = {
    NodeLockBusyError: "NodeLockHeld",
    LegacyShareTakenError: "LegacyShareTaken",
}
"""Mixed mode: the event reason on a claim whose write the node guard held back."""

ClaimWrites = list[tuple[dict[str, Any], dict[str, Any]]]
"""A pod's claims, each with the allocation to write, in the order they are written."""
RESERVE_RETRY_S = 0.5
"""After a failed reservation or gate removal the pod is synced again this much later
(jittered)."""


class AllocationWriter:
    """Runs the writes of decided allocations and the taking back of allocations."""

    def __init__(
        self,
        writer: ClaimWriter,
        view: ClusterView,
        queue: WorkQueue,
        placements: PodPlacements,
        metrics: ControllerMetrics,
        *,
        concurrency: int,
        retry_initial_s: float,
        guard: NodeGuard | None = None,
        recorder: EventRecorder | None = None,
    ) -> None:
        self.writer = writer
        self.view = view
        self.queue = queue
        self.placements = placements
        self.metrics = metrics
        self.retry_initial_s = retry_initial_s
        self.guard: NodeGuard = guard or NoNodeGuard()
        """Mixed mode: the node lock and the legacy re-check around a pod's writes."""
        self.recorder = recorder
        """Where a claim is told why the guard held its write back (mixed mode)."""
        self.tasks: set[asyncio.Task[None]] = set()
        """Writes and clean-ups still running (cancelled when the controller stops)."""
        self._semaphore = asyncio.Semaphore(concurrency)

    def write_pod(self, key: str, writes: ClaimWrites, reservation: Reservation | None) -> None:
        """Write the pod's allocations (each with `reservation`, None for a standalone
        claim) in a task; the key is in flight until it ends."""
        self.queue.start(key)
        self._track(
            asyncio.create_task(self._write_pod(key, writes, reservation), name=f"allocate {key}")
        )

    def reserve_pod(self, key: str, claims: list[dict[str, Any]], reservation: Reservation) -> None:
        """Add the pod to the reservations of its allocated claims, one write per claim,
        in a task; the key is in flight until it ends."""
        self.queue.start(key)
        self._track(
            asyncio.create_task(self._reserve_pod(key, claims, reservation), name=f"reserve {key}")
        )

    def spawn(self, work: Coroutine[Any, Any, None], name: str) -> None:
        """Run a clean-up in a task; an API failure is logged (the sweeper tries again)."""

        async def guarded() -> None:
            try:
                await work
            except DriverError as error:
                log.warning("clean-up failed", extra={"task": name, "error": str(error)})

        self._track(asyncio.create_task(guarded(), name=name))

    async def clear_allocation(self, claim: dict[str, Any], pod_uid: str = "") -> None:
        """Take an allocation back (unless a pod other than `pod_uid` reserved it
        meanwhile) and free it here."""
        key = object_key(claim)
        self.view.clearing.add(key)
        try:
            stored = await self.writer.deallocate(claim, pod_uid)
        finally:
            self.view.clearing.discard(key)
        if stored is not None:
            self.view.adopt_cleared(stored)
            self.queue.changed()

    def _track(self, task: asyncio.Task[None]) -> None:
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _write_pod(
        self, key: str, writes: ClaimWrites, reservation: Reservation | None
    ) -> None:
        written: list[dict[str, Any]] = []
        pod_uid = str(reservation.get("uid")) if reservation is not None else ""
        try:
            node = allocated_node({"status": {"allocation": writes[0][1]}}) if writes else None
            async with self._semaphore, self.guard.hold(node, [c for c, _ in writes]):
                for claim, allocation in writes:
                    stored = await self.writer.allocate(claim, allocation, reservation)
                    self.view.adopt(stored)
                    written.append(stored)
                    self.metrics.allocations.inc()
            self._record_condition(key)
            first = self.queue.pop_first_try(key)
            if first is not None:
                self.metrics.allocation_latency.observe(self.queue.clock() - first)
            log.info(
                "claims allocated",
                extra={
                    "pod": key,
                    "node": allocated_node(written[0]) if written else None,
                    "claims": {
                        object_key(c): describe_results(allocation_of(c) or {}) for c in written
                    },
                },
            )
            await self.release_gate(key)
        except DriverError as error:
            log.warning("allocation not written", extra={"pod": key, "error": str(error)})
            self.metrics.failures.labels(WRITE_FAILED).inc()
            self._tell_held_back(writes, error)
            for stored in written:
                with contextlib.suppress(DriverError):
                    await self.clear_allocation(stored, pod_uid)
            self.queue.enqueue(key, jittered(self.retry_initial_s))
        finally:
            for claim, _ in writes:
                self.view.pending.pop(object_key(claim), None)
            self.view.touch()
            self.queue.finish(key)
            if len(written) < len(writes):
                self.view.mark_usage_stale()
                self.queue.changed()
            self.queue.poke()

    async def _reserve_pod(
        self, key: str, claims: list[dict[str, Any]], reservation: Reservation
    ) -> None:
        try:
            async with self._semaphore:
                for claim in claims:
                    stored = await self.writer.reserve(claim, reservation)
                    if stored is None:
                        log.info(
                            "pod not added to a claim's reservations: left to kube-scheduler",
                            extra={"pod": key, "claim": object_key(claim)},
                        )
                        return
                    self.view.adopt(stored)
            log.info(
                "pod added to its claims' reservations",
                extra={"pod": key, "claims": [object_key(c) for c in claims]},
            )
            await self.release_gate(key)
        except DriverError as error:
            log.warning("reservation not written", extra={"pod": key, "error": str(error)})
            self.queue.enqueue(key, jittered(RESERVE_RETRY_S))
        finally:
            self.queue.finish(key)
            self.queue.poke()

    async def release_gate(self, key: str) -> None:
        """Remove the controller's allocation gate from the pod if the view shows it is
        the pod's last gate and every claim of ours allocated and reserved for it. A
        refusal that may pass retries the pod later; one that will not is told on the pod."""
        pod = self.view.pods.get(key)
        if pod is None:
            return
        namespace = pod["metadata"]["namespace"]
        claims = [
            self.view.claim_view.get(f"{namespace}/{name}") if name else None
            for name in pod_claim_names(pod).values()
        ]
        patch = gate_removal(pod, claims, self.view.settings.device_classes)
        if patch is None:
            return
        try:
            removed = await self.writer.remove_gate(pod, patch)
        except DriverError as error:
            log.warning("allocation gate not removed", extra={"pod": key, "error": str(error)})
            if isinstance(error, TransientError):
                self.queue.enqueue(key, jittered(RESERVE_RETRY_S))
            elif isinstance(error, ApiError) and self.recorder is not None:
                self.recorder.emit(
                    involved_object(pod, "Pod", "v1"),
                    WARNING,
                    GATE_NOT_REMOVED,
                    f"claims allocated, but the scheduling gate {ALLOCATION_GATE} was not "
                    f"removed: {error}",
                )
            return
        if removed:
            log.info("allocation gate removed", extra={"pod": key})

    def _tell_held_back(self, writes: ClaimWrites, error: DriverError) -> None:
        """A claim waiting on a legacy pod's node lock or share says so on `kubectl
        describe` (repeats fold into one event); other write failures only log."""
        reason = HELD_BACK.get(type(error))
        if reason is None or self.recorder is None:
            return
        for claim, _ in writes:
            self.recorder.emit(
                involved_object(claim, "ResourceClaim", "resource.k8s.io/v1"),
                WARNING,
                reason,
                f"allocation retried later: {error}",
            )

    def _record_condition(self, key: str) -> None:
        """Remember the pod's PodScheduled condition as of our completed write: only a
        later one can be kube-scheduler's verdict on the node we chose."""
        pod = self.view.pods.get(key)
        if pod is not None:
            uid = pod["metadata"].get("uid", "")
            self.placements.written(uid, condition_signature(scheduled_condition(pod)))
