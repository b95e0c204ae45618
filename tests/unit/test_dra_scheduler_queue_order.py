"""The kube-scheduler stand-in's queue orders as PrioritySort does: highest
`spec.priority` first, then the oldest entry into the queue (reference §10)."""

from __future__ import annotations

import asyncio

from simulator.standins.dra_scheduler_queue import SchedulingQueue


async def _drain(queue: SchedulingQueue) -> list[str]:
    stop = asyncio.Event()
    keys = []
    while len(queue):
        key = await queue.pop(stop)
        assert key is not None
        keys.append(key)
    return keys


async def test_priority_first_then_arrival() -> None:
    priorities = {"low-old": 0, "mid": 10, "low-new": 0, "high": 1000}
    queue = SchedulingQueue(1, 10, priority_of=priorities.__getitem__)
    for key in priorities:
        queue.add(key)
    assert await _drain(queue) == ["high", "mid", "low-old", "low-new"]


async def test_a_pod_added_again_while_queued_keeps_its_place() -> None:
    queue = SchedulingQueue(1, 10, priority_of=lambda key: 0)
    for key in ("first", "second", "first"):
        queue.add(key)
    assert await _drain(queue) == ["first", "second"]


async def test_a_pod_back_in_the_queue_goes_behind_its_equals() -> None:
    queue = SchedulingQueue(1, 10, priority_of=lambda key: 0)
    queue.add("retried")
    assert await _drain(queue) == ["retried"]
    queue.add("waiting")
    queue.add("retried")
    assert await _drain(queue) == ["waiting", "retried"]
