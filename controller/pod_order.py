"""The order pending pods are decided in: kube-scheduler's, so priority means the same.

kube-scheduler's queue (the PrioritySort plugin, reference kubernetes-dra.md §10)
pops the highest `spec.priority` first (admission resolved `priorityClassName`
into it; absent counts as 0), then the pod queued first. The controller keeps
that order with `creationTimestamp` for "queued first" (one-second resolution;
the work queue breaks ties by arrival), so a restarted controller decides the
backlog in the order the first one would have.

Backoff and priority. A refused pod backs off (work_queue.py) so a stuck pod
never spins; but a backoff that outlasts the moment capacity frees would let a
lower-priority pod, due at that moment, take what the higher-priority pod
waits for. The work queue therefore lifts the backoff of a waiting pod exactly
when it matters: when the view changed since the pod was refused and a pod of
strictly lower priority is about to be decided. Lifting every waiting pod's
backoff on every capacity change was the simpler choice, but each scheduled
pod changes the view, so a cluster with many waiting pods would retry all of
them per change and the backoff would bound nothing; pods of equal priority
keep their backoff, as in kube-scheduler, and a cluster of one priority pays
nothing but the sort. Changes that arrive while a pass decides are caught at
the pass's next yield (controller.py starts a new pass then).

Pure: reads a pod's fields, nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from dra_driver.objects.pod_scheduling import pod_priority


class QueueRank(NamedTuple):
    """Where a pod stands in the queue before arrival breaks a tie: higher `priority`
    first, then the earlier `created` (RFC 3339 UTC text, which sorts as time does)."""

    priority: int
    created: str


NO_RANK = QueueRank(0, "")
"""A key whose object is gone (or a queue that ranks nothing): priority 0."""


def queue_rank(obj: Mapping[str, Any] | None) -> QueueRank:
    """A pod's rank (any object's: a standalone claim has no priority, so 0)."""
    if obj is None:
        return NO_RANK
    return QueueRank(pod_priority(obj), str(obj["metadata"].get("creationTimestamp") or ""))


def sort_key(rank: QueueRank, arrival: int) -> tuple[int, str, int]:
    """The order to decide in: highest priority, then oldest, then first queued."""
    return (-rank.priority, rank.created, arrival)
