"""The controller's work queue: which pod (or standalone claim) to sync next, and when.

A key is a pod's `namespace/name`, or STANDALONE + a claim's key. A key is due
once the time it was enqueued for has come. A key that did not fit waits
until the view changed (`changed()` bumps a version) and its backoff passed
(doubling, jittered so replicas and pods do not retry in step), and is taken
once per change, so a stuck pod never spins and a changed cluster is looked at
again at once. Due keys
are decided highest priority first, then oldest, then first queued, and a
waiting key's backoff is lifted when a key of lower priority is about to be
decided in a view that changed since it was refused (controller/pod_order.py
says why and what it costs). Keys whose writes or moves are running are in
flight and skipped until they finish. A key deferred (a pod moved, or its
allocation taken back) is not due before its time, whatever events enqueue it
meanwhile.

Owns only its own tables and the event that wakes the loop; calls nothing but the
`rank` it is given.
"""

from __future__ import annotations

import asyncio
import itertools
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from controller.pod_order import NO_RANK, QueueRank, sort_key

STANDALONE = "claim:"
"""Key prefix of a claim allocated without a pod (`allocate_standalone_claims`)."""


def jittered(delay: float) -> float:
    """The delay stretched by up to a fifth, so retries that started together spread out."""
    return delay * random.uniform(1.0, 1.2)


@dataclass(slots=True)
class _Waiting:
    """A key that did not fit: retried once the view changed and `ready_at` passed, or
    once the view changed and a key of lower `rank` is due."""

    version: int
    """The view's version when the key was refused (a refusal in a newer one is news)."""
    delay: float
    ready_at: float
    rank: QueueRank
    tried: int
    """The view's version when the key was last taken: it is due again only after a
    change since, so a sync that decides nothing (its object gone, its write in
    flight) does not make the loop spin on it."""


class WorkQueue:
    """Due keys, backed-off keys, keys in flight, and since when each key is being tried."""

    def __init__(
        self,
        clock: Callable[[], float],
        retry_initial_s: float,
        retry_max_s: float,
        rank: Callable[[str], QueueRank] = lambda key: NO_RANK,
    ) -> None:
        self.clock = clock
        self.retry_initial_s = retry_initial_s
        self.retry_max_s = retry_max_s
        self.rank = rank
        """A key's priority and age (pod_order.py), read each time the key is ordered."""
        self.wake = asyncio.Event()
        self._version = 0
        self._due: dict[str, float] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._in_flight: set[str] = set()
        self._first_tried: dict[str, float] = {}
        self._not_before: dict[str, float] = {}
        self._arrival: dict[str, int] = {}
        self._arrivals = itertools.count()
        self._eager: set[str] = set()
        """Waiting keys retried at every change, backoff or not (`hurry`)."""

    @property
    def version(self) -> int:
        """Bumped by each `changed()`: a pass compares it to see whether to start over."""
        return self._version

    def _arrive(self, key: str) -> None:
        if key not in self._arrival:
            self._arrival[key] = next(self._arrivals)

    def enqueue(self, key: str, delay: float = 0.0) -> None:
        now = self.clock()
        at = now + delay
        not_before = self._not_before.get(key)
        if not_before is not None:
            if not_before > now:
                at = max(at, not_before)
            else:
                del self._not_before[key]
        self._due[key] = min(at, self._due.get(key, at))
        self._arrive(key)
        self.wake.set()

    def defer(self, key: str, delay: float) -> None:
        """Sync the key in `delay` seconds and not earlier, even if enqueued meanwhile."""
        at = self.clock() + delay
        self._not_before[key] = at
        self._due[key] = at
        self._waiting.pop(key, None)
        self._arrive(key)
        self.wake.set()

    def changed(self) -> None:
        """Something a waiting key's fit depends on changed: let waiting keys retry."""
        self._version += 1
        self.wake.set()

    def hurry(self, key: str, eager: bool) -> None:
        """A nominated pod waits only for its victims' shares to be released: while
        `eager`, it is retried at every change, whatever its backoff (kube-scheduler pops
        a pod from its backoff queue as soon as nothing else is waiting)."""
        if eager:
            self._eager.add(key)
        else:
            self._eager.discard(key)

    def poke(self) -> None:
        """Run the loop once more although no key is due (the sweeper has work)."""
        self.wake.set()

    def due(self, now: float) -> list[str]:
        """The keys to sync now, each once, highest priority first, then oldest, then
        first queued: those enqueued for now, the waiting ones whose view changed and
        whose backoff passed, and, lest a lower-priority key take what they wait for,
        the waiting ones whose view changed and whose priority is above a due key's."""
        ranks = {key: self.rank(key) for key, at in self._due.items() if at <= now}
        changed = [(k, w) for k, w in self._waiting.items() if w.tried < self._version]
        for key, waiting in changed:
            if waiting.ready_at <= now or key in self._eager:
                ranks[key] = waiting.rank
        if not ranks:
            return []
        floor = min(rank.priority for rank in ranks.values())
        for key, waiting in changed:
            if waiting.rank.priority > floor:
                ranks.setdefault(key, waiting.rank)
        return sorted(ranks, key=lambda key: sort_key(ranks[key], self._arrival.get(key, 0)))

    def take(self, key: str) -> bool:
        """Remove a due key from the queue; False if it is in flight (not to sync now)."""
        self._due.pop(key, None)
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.tried = self._version
        return key not in self._in_flight

    def next_timeout(self, now: float, deadline: float) -> float:
        """Seconds until the next key is due, or until `deadline` if that comes first."""
        times = list(self._due.values())
        times += [
            now if key in self._eager else w.ready_at
            for key, w in self._waiting.items()
            if w.tried < self._version
        ]
        times.append(deadline)
        return max(0.0, min(times) - now)

    def back_off(self, key: str) -> bool:
        """Wait before retrying `key`, twice as long as last time. True when this is news
        (the first refusal since the view last changed), worth telling the user about."""
        previous = self._waiting.get(key)
        delay = min(previous.delay * 2, self.retry_max_s) if previous else self.retry_initial_s
        ready_at = self.clock() + jittered(delay)
        version = self._version
        self._waiting[key] = _Waiting(version, delay, ready_at, self.rank(key), version)
        self._arrive(key)
        return previous is None or previous.version != self._version

    def settle(self, key: str) -> None:
        """The key was decided: it no longer waits for a change (queued again, it
        arrives anew)."""
        self._waiting.pop(key, None)
        self._arrival.pop(key, None)

    def forget(self, key: str) -> None:
        """The pod no longer needs allocating (bound or no longer pending)."""
        self._waiting.pop(key, None)
        self._first_tried.pop(key, None)
        self._arrival.pop(key, None)

    def drop(self, key: str) -> None:
        """The pod finished or is gone: nothing of it stays queued."""
        self.forget(key)
        self._due.pop(key, None)
        self._not_before.pop(key, None)
        self._eager.discard(key)

    def start(self, key: str) -> None:
        """The key's writes or move began: skip it until `finish`."""
        self._in_flight.add(key)

    def finish(self, key: str) -> None:
        self._in_flight.discard(key)

    def in_flight(self, key: str) -> bool:
        return key in self._in_flight

    def note_first_try(self, key: str) -> None:
        """Start the key's allocation latency at its first try (later tries keep it)."""
        self._first_tried.setdefault(key, self.clock())

    def pop_first_try(self, key: str) -> float | None:
        """When the key was first tried, clearing it (its claims are allocated now)."""
        return self._first_tried.pop(key, None)

    def trying(self) -> Iterator[str]:
        """The keys tried and not yet allocated."""
        return iter(self._first_tried)
