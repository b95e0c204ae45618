"""What each watched change means for the controller's work. Synchronous and cheap.

The informers call these after storing the object; they update the view's
indexes, say which pods (or standalone claims) to sync again, which claims the
sweeper should look at, and when waiting pods may fit now (the view changed:
inventory, usage, nodes, classes, quotas), and hand an allocation that
vanished without this process clearing it to the sweeper (kube-scheduler's
PostFilter took it back). They never decide and never write.

Calls: the view (note_*, allocation_vanished), the work queue, the sweeper
(check_later, taken_back), the pod placements (forget a finished pod).
"""

from __future__ import annotations

from typing import Any

from controller.cluster_view import ClusterView
from controller.object_state import allocation_of, is_pending, is_terminal
from controller.pod_placements import PodPlacements
from controller.sweeper import Sweeper
from controller.work_queue import STANDALONE, WorkQueue
from dra_driver.kube.informer import object_key


class ClusterEventHandlers:
    """One handler per watched kind; see `ClusterView.subscribe`."""

    def __init__(
        self,
        view: ClusterView,
        queue: WorkQueue,
        sweeper: Sweeper,
        placements: PodPlacements,
        *,
        allocate_standalone_claims: bool,
    ) -> None:
        self.view = view
        self.queue = queue
        self.sweeper = sweeper
        self.placements = placements
        self.allocate_standalone_claims = allocate_standalone_claims

    def on_quota(self, kind: str, obj: dict[str, Any]) -> None:
        """Quota limits live in the engine's ledger, built with the usage."""
        self.view.mark_usage_stale()
        self.queue.changed()

    def on_class(self, kind: str, obj: dict[str, Any]) -> None:
        self.view.note_class()
        self.queue.changed()

    def on_node(self, kind: str, obj: dict[str, Any]) -> None:
        """Predicates are re-evaluated per decision (cached by node resourceVersion); a
        deleted node strands the allocations of pending pods on it (rare: look at all)."""
        self.queue.changed()
        if kind == "DELETED":
            for key, pod in self.view.pods.store.items():
                if is_pending(pod):
                    self.queue.enqueue(key)

    def on_slice(self, kind: str, obj: dict[str, Any]) -> None:
        self.view.note_slice(kind, obj)
        self.queue.changed()

    def on_claim(self, kind: str, claim: dict[str, Any]) -> None:
        key = object_key(claim)
        vanished = self.view.allocation_vanished(kind, claim)
        if vanished is not None:
            self.sweeper.taken_back(claim, vanished)
        if self.view.note_claim(kind, claim):
            self.queue.changed()
        for pod_key in self.view.pods_referring(key):
            self.queue.enqueue(pod_key)
        allocated = allocation_of(claim) is not None
        if kind == "DELETED":
            self.queue.drop(STANDALONE + key)
            return
        if self.allocate_standalone_claims and not allocated and not self.view.pods_referring(key):
            self.queue.enqueue(STANDALONE + key)
        if allocated:
            self.sweeper.check_later([key])
            self.queue.poke()

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key = object_key(pod)
        gone = kind == "DELETED"
        claims = self.view.note_pod(key, pod, gone)
        if self.view.note_legacy_pod(key, pod, gone):
            self.queue.changed()
        finished = gone or is_terminal(pod)
        node = None if finished else (pod.get("spec") or {}).get("nodeName")
        if self.view.node_filter.place(key, node):
            self.queue.changed()
        if finished:
            self.placements.forget(pod["metadata"].get("uid", ""))
            self.queue.drop(key)
            if claims:
                self.sweeper.check_later(claims)
                self.view.mark_usage_stale()
                self.queue.changed()
            return
        if is_pending(pod):
            self.queue.enqueue(key)
        else:
            self.queue.forget(key)
