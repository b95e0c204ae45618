"""The controller's work queue hands keys out in kube-scheduler's order and lifts a
waiting key's backoff only when a key of lower priority would be decided in a view
that changed since it was refused (controller/pod_order.py). A fake clock."""

from __future__ import annotations

from controller.pod_order import QueueRank, queue_rank
from controller.work_queue import WorkQueue

EARLY = "2026-01-01T00:00:00Z"
LATE = "2026-01-01T00:00:01Z"


def make_queue(ranks: dict[str, QueueRank]) -> tuple[WorkQueue, list[float]]:
    now = [100.0]
    return WorkQueue(lambda: now[0], 10.0, 60.0, rank=ranks.__getitem__), now


def test_due_keys_go_highest_priority_then_oldest_then_first_queued() -> None:
    ranks = {
        "late-low": QueueRank(0, LATE),
        "early-low": QueueRank(0, EARLY),
        "late-high": QueueRank(5, LATE),
        "tie-second": QueueRank(0, LATE),
    }
    queue, now = make_queue(ranks)
    for key in ("late-low", "early-low", "late-high", "tie-second"):
        queue.enqueue(key)
    assert queue.due(now[0]) == ["late-high", "early-low", "late-low", "tie-second"]


def test_a_backoff_is_lifted_only_for_a_lower_priority_key_in_a_changed_view() -> None:
    ranks = {"high": QueueRank(5, EARLY), "peer": QueueRank(5, LATE), "low": QueueRank(0, LATE)}
    queue, now = make_queue(ranks)
    for key in ("high", "peer"):
        queue.enqueue(key)
        queue.take(key)
        queue.back_off(key)
    queue.enqueue("low")
    assert queue.due(now[0]) == ["low"]  # the view did not change: they would not fit
    queue.changed()
    assert queue.due(now[0]) == ["high", "peer", "low"]
    queue.take("low")
    queue.enqueue("peer")
    assert queue.due(now[0]) == ["peer"]  # equal priority keeps its backoff


def test_a_pod_without_priority_ranks_as_zero() -> None:
    pod = {"metadata": {"creationTimestamp": EARLY}, "spec": {}}
    assert queue_rank(pod) == QueueRank(0, EARLY)
    assert queue_rank({**pod, "spec": {"priority": -7}}) == QueueRank(-7, EARLY)


def test_a_waiting_key_taken_after_a_change_is_not_due_again_until_the_next_change() -> None:
    """A retry that decides nothing (its object gone, its write in flight) leaves the
    key waiting; it must not come due on every pass, or the loop spins."""
    queue, now = make_queue({"gone": QueueRank(0, EARLY)})
    queue.enqueue("gone")
    queue.take("gone")
    queue.back_off("gone")
    now[0] += 3600.0
    queue.changed()
    assert queue.due(now[0]) == ["gone"]
    queue.take("gone")
    assert queue.due(now[0]) == []
    assert queue.next_timeout(now[0], now[0] + 1.0) == 1.0
    queue.changed()
    assert queue.due(now[0]) == ["gone"]


def test_a_refusal_after_a_retry_in_a_changed_view_is_news() -> None:
    queue, now = make_queue({"pod": QueueRank(0, EARLY)})
    queue.enqueue("pod")
    queue.take("pod")
    assert queue.back_off("pod")
    now[0] += 3600.0
    queue.changed()
    queue.take("pod")
    assert queue.back_off("pod")
    assert not queue.back_off("pod")


def test_a_hurried_key_is_retried_at_every_change_whatever_its_backoff() -> None:
    """A nominated pod waits for its victims' shares only: each change brings it back,
    once, even while its backoff runs; unhurried, it waits for the backoff again."""
    queue, now = make_queue({"nominated": QueueRank(5, EARLY)})
    queue.enqueue("nominated")
    queue.take("nominated")
    queue.back_off("nominated")
    queue.hurry("nominated", True)
    assert queue.due(now[0]) == []
    queue.changed()
    assert queue.next_timeout(now[0], now[0] + 1.0) == 0.0
    assert queue.due(now[0]) == ["nominated"]
    queue.take("nominated")
    assert queue.due(now[0]) == []
    queue.hurry("nominated", False)
    queue.changed()
    assert queue.due(now[0]) == []
