"""The bookkeeping behind a PostFilter takeback and a move: which PodScheduled verdict is
about the node chosen since (PodPlacements), and a deferred pod that events cannot bring
forward (WorkQueue.defer)."""

from __future__ import annotations

from controller.pod_placements import PodPlacements
from controller.work_queue import WorkQueue

AT_TAKEBACK = ("2026-01-01T00:00:00Z", "waiting")
VERDICT = ("2026-01-01T00:00:01Z", "0/2 nodes are available: 1 node(s) had untolerated taint")
LATER = ("2026-01-01T00:00:09Z", "0/2 nodes are available: 1 Insufficient cpu")


def test_the_first_verdict_after_a_takeback_is_not_about_the_new_node() -> None:
    placements = PodPlacements()
    placements.taken_back("uid", AT_TAKEBACK)
    placements.sent("uid", "node-b", AT_TAKEBACK)
    placements.written("uid", AT_TAKEBACK)
    assert placements.takeback_verdict("uid", AT_TAKEBACK)
    assert placements.takeback_verdict("uid", VERDICT)
    placed = placements.placed("uid")
    assert placed is not None and placed.condition == VERDICT
    assert not placements.takeback_verdict("uid", LATER)


def test_a_verdict_seen_before_the_new_write_completed_settles_the_takeback() -> None:
    placements = PodPlacements()
    placements.taken_back("uid", AT_TAKEBACK)
    placements.sent("uid", "node-b", AT_TAKEBACK)
    placements.written("uid", VERDICT)
    assert not placements.takeback_verdict("uid", LATER)


def test_a_forgotten_pod_has_no_takeback() -> None:
    placements = PodPlacements()
    placements.taken_back("uid", AT_TAKEBACK)
    placements.forget("uid")
    assert not placements.takeback_verdict("uid", VERDICT)


def test_a_deferred_key_is_not_due_before_its_time_whatever_enqueues_it() -> None:
    now = [100.0]
    queue = WorkQueue(lambda: now[0], retry_initial_s=0.5, retry_max_s=30.0)
    queue.defer("default/pod", 2.0)
    queue.enqueue("default/pod")
    assert queue.due(101.0) == []
    assert queue.due(102.0) == ["default/pod"]
    now[0] = 102.5
    assert queue.take("default/pod")
    queue.enqueue("default/pod")
    assert queue.due(102.5) == ["default/pod"]
