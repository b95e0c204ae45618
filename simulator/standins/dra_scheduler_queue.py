"""The kube-scheduler stand-in's scheduling queue: active pods, and pods backing off.

kube-scheduler's activeQ / backoffQ in small: a pod key is `add`ed when the watch
shows it pending (or an event may let it fit), popped as PrioritySort orders the
activeQ (highest `spec.priority` first, then the earliest `add`), and after a
failed attempt `back_off`s for a delay doubled per failure (podInitialBackoffSeconds
1, podMaxBackoffSeconds 10) unless an event `add`s it back sooner; `done` forgets
its failures. Pure bookkeeping on the event loop; `pop` is the only await.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable


class SchedulingQueue:
    """Keys of pods to try, at most once each at any moment."""

    def __init__(
        self, initial_backoff: float, max_backoff: float, priority_of: Callable[[str], int]
    ) -> None:
        self._initial = initial_backoff
        self._max = max_backoff
        self._priority_of = priority_of
        self._order = itertools.count()
        """The queue timestamp: PrioritySort's tie-break, taken on each `add`."""
        self._active: list[tuple[int, int, str]] = []
        self._queued: set[str] = set()
        self._delays: dict[str, float] = {}
        """key -> the backoff of its last failure (doubled on the next)."""
        self._retry_at: dict[str, float] = {}
        self._heap: list[tuple[float, str]] = []
        self._changed = asyncio.Event()

    def __len__(self) -> int:
        return len(self._active)

    def add(self, key: str) -> None:
        """Try the pod as soon as its turn comes (a pending pod appeared, or changed)."""
        self._retry_at.pop(key, None)
        if key not in self._queued:
            self._queued.add(key)
            heapq.heappush(self._active, (-self._priority_of(key), next(self._order), key))
            self._changed.set()

    def back_off(self, key: str) -> float:
        """The attempt failed: retry after the doubled delay, unless `add`ed first."""
        delay = min(self._delays.get(key, 0.0) * 2, self._max) or self._initial
        self._delays[key] = delay
        at = asyncio.get_running_loop().time() + delay
        self._retry_at[key] = at
        heapq.heappush(self._heap, (at, key))
        self._changed.set()
        return delay

    def done(self, key: str) -> None:
        """Scheduled, deleted or no longer ours: its failures are forgotten."""
        self._delays.pop(key, None)
        self._retry_at.pop(key, None)

    async def pop(self, stop: asyncio.Event) -> str | None:
        """The next pod to try, waiting for one; None once `stop` is set."""
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            now = loop.time()
            while self._heap and self._heap[0][0] <= now:
                at, key = heapq.heappop(self._heap)
                if self._retry_at.get(key) == at:
                    del self._retry_at[key]
                    self.add(key)
            if self._active:
                key = heapq.heappop(self._active)[2]
                self._queued.discard(key)
                return key
            self._changed.clear()
            wait_s = self._heap[0][0] - now if self._heap else None
            await _wait_either(stop, self._changed, wait_s)
        return None


async def _wait_either(stop: asyncio.Event, changed: asyncio.Event, wait_s: float | None) -> None:
    waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(changed.wait())]
    try:
        await asyncio.wait(waiters, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
