"""Taking back the allocations no pod will use, so their capacity is not lost.

Three cases. A claim of ours allocated but reserved by no pod and referred to
by no pending one is cleared, unless standalone claims are allocated on
purpose: its pod was deleted while pending, or the pods that reserved it are
gone or finished and kube-controller-manager dropped their reservations (it
deallocates only claims with the delete-protection finalizer, which ours do
not carry). A pod that cannot go where its claims are (the node is gone, or
kube-scheduler refused it there with the claims allocated) has them moved
when nobody but the pod reserves them: allocation and reservation cleared in
one write, the node avoided for `moved_node_memory_s`, and the pod allocated
again after a doubling delay, with a Warning event saying why. When
kube-scheduler's PostFilter cleared a claim itself (the pod fit no node), the
pod is treated the same way, without a write: the node avoided, the backoff,
a Normal event, and allocated again when it can fit.

Owns: the claim keys to check on the next sweep. Calls: the view (reads),
the allocation writer (clear, spawn), the work queue (in flight, retry),
the pod placements, the event recorder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from controller.allocation_writer import AllocationWriter
from controller.cluster_view import ClusterView, LastAllocation
from controller.object_state import (
    allocated_node,
    allocation_of,
    condition_signature,
    refused_with_claims_allocated,
    reservations_of,
    scheduled_condition,
)
from controller.pod_placements import PodPlacements
from controller.settings import ControllerSettings
from controller.work_queue import WorkQueue, jittered
from dra_driver.kube.events import NORMAL, WARNING, EventRecorder, involved_object

log = logging.getLogger(__name__)

MOVED = "AllocationMoved"
TAKEN_BACK = "AllocationTakenBack"


class Sweeper:
    """Clears never-reserved allocations and moves the claims of pods that cannot stay."""

    def __init__(
        self,
        view: ClusterView,
        writer: AllocationWriter,
        queue: WorkQueue,
        placements: PodPlacements,
        recorder: EventRecorder,
        settings: ControllerSettings,
        clock: Callable[[], float],
    ) -> None:
        self.view = view
        self.writer = writer
        self.queue = queue
        self.placements = placements
        self.recorder = recorder
        self.settings = settings
        self.clock = clock
        self._to_check: set[str] = set()

    def check_later(self, claim_keys: Iterable[str]) -> None:
        """Look at these claims on the next sweep (their pods or allocations changed)."""
        self._to_check.update(claim_keys)

    def sweep(self) -> None:
        """Clear allocations of ours that no pod reserves and no pending pod will (none
        when standalone claims are allocated on purpose)."""
        keys, self._to_check = self._to_check, set()
        if self.settings.allocate_standalone_claims:
            return
        for key in keys:
            claim = self.view.claim_view.get(key)
            if (
                claim is None
                or key in self.view.pending
                or allocation_of(claim) is None
                or reservations_of(claim)
                or not self.view.is_ours(claim)
                or self.view.pending_pods_referring(key)
                or claim["metadata"].get("deletionTimestamp")
            ):
                continue
            log.info("clearing an allocation no pod uses", extra={"claim": key})
            self.writer.spawn(self.writer.clear_allocation(claim), f"clear {key}")

    def check_moved(self, key: str, pod: Mapping[str, Any], ours: list[dict[str, Any]]) -> None:
        """The pod cannot go where its claims are (kube-scheduler said so, or the node is
        gone): clear them, avoid that node for a while, allocate again. Claims another
        pod reserved stay (and so do the pod's others: they share that node)."""
        uid = pod["metadata"].get("uid", "")
        if not ours or any(r.get("uid") != uid for c in ours for r in reservations_of(c)):
            return
        node = allocated_node(ours[0]) or ""
        if self.view.nodes.get(node) is None:
            self._move(key, pod, ours, node, f"node {node} no longer exists")
            return
        condition = scheduled_condition(pod)
        signature = condition_signature(condition)
        if not refused_with_claims_allocated(condition) or signature is None:
            return
        if self.placements.takeback_verdict(uid, signature):
            return
        placed = self.placements.placed(uid)
        if placed is not None:
            if placed.condition == signature:
                return
            node = placed.node
        else:
            stamps = [str((allocation_of(c) or {}).get("allocationTimestamp", "")) for c in ours]
            if signature[0] <= max(stamps):
                return
        self._move(
            key, pod, ours, node, f"kube-scheduler could not put the pod there ({signature[1]})"
        )

    def taken_back(self, claim: dict[str, Any], last: LastAllocation) -> None:
        """kube-scheduler's PostFilter cleared the claim (reserved by nobody or only by the
        pod, which fit no node): the pod could not go to that node. Avoid it, take the
        pod's other claims there back too (unless another pod reserved one: then the pod
        stays bound to that node), back off as after a move, and allocate again; the
        claims of a pod that is gone or finished (kube-controller-manager's clean-up)
        need nothing."""
        if not self.view.is_ours(claim):
            return
        claim_key = f"{claim['metadata'].get('namespace', '')}/{claim['metadata'].get('name')}"
        for pod_key in self.view.pending_pods_referring(claim_key):
            pod = self.view.pods.get(pod_key)
            if pod is None:
                continue
            uid = pod["metadata"].get("uid", "")
            if last.reserved and last.reserved != {uid}:
                continue
            others = [
                other
                for key in self.view.claims_of_pod(pod_key)
                if key != claim_key
                and (other := self.view.claim_view.get(key)) is not None
                and self.view.is_ours(other)
                and allocation_of(other) is not None
            ]
            pinned = any(r.get("uid") != uid for c in others for r in reservations_of(c))
            delay = self.placements.moved(
                uid,
                None if pinned else last.node,
                avoid_until=self.clock() + self.settings.moved_node_memory_s,
                initial_delay=self.settings.retry_initial_s,
                max_delay=self.settings.retry_max_s,
            )
            self.placements.taken_back(uid, condition_signature(scheduled_condition(pod)))
            message = (
                f"kube-scheduler took back the allocation of claim {claim['metadata'].get('name')} "
                f"on {last.node} (the pod fit no node with it); it will be allocated again"
            )
            self.recorder.emit(involved_object(pod, "Pod", "v1"), NORMAL, TAKEN_BACK, message)
            log.info(
                "kube-scheduler took an allocation back",
                extra={"pod": pod_key, "claim": claim_key, "node": last.node},
            )
            self._clear_then_retry(pod_key, uid, [] if pinned else others, delay)

    def _move(
        self,
        key: str,
        pod: Mapping[str, Any],
        ours: list[dict[str, Any]],
        node: str,
        why: str,
    ) -> None:
        delay = self.placements.moved(
            pod["metadata"].get("uid", ""),
            node,
            avoid_until=self.clock() + self.settings.moved_node_memory_s,
            initial_delay=self.settings.retry_initial_s,
            max_delay=self.settings.retry_max_s,
        )
        message = f"claims allocated on {node} are allocated again elsewhere: {why}"
        self.recorder.emit(involved_object(pod, "Pod", "v1"), WARNING, MOVED, message)
        log.info("moving a pod's claims", extra={"pod": key, "node": node, "why": why})
        self._clear_then_retry(key, pod["metadata"].get("uid", ""), ours, delay)

    def _clear_then_retry(
        self, key: str, uid: str, claims: list[dict[str, Any]], delay: float
    ) -> None:
        """Take the pod's claims back (the pod in flight meanwhile), then sync it again
        after `delay`, not earlier."""
        if not claims:
            self.queue.defer(key, jittered(delay))
            return
        self.queue.start(key)

        async def clear() -> None:
            try:
                for claim in claims:
                    await self.writer.clear_allocation(claim, uid)
            finally:
                self.queue.finish(key)
                self.queue.defer(key, jittered(delay))

        self.writer.spawn(clear(), f"move {key}")
