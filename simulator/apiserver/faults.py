"""Fault injection for reliability tests: failed, delayed and counted requests, dropped watches.

The handle is used from test threads while the server runs on its own loop,
so its state sits behind a lock and watch dropping is handed to the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import re
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from .errors import REASONS, ApiError


@dataclass(slots=True)
class FaultRule:
    """Matches `verb` (HTTP method, any when None) and `path` (regex searched in path?query)."""

    verb: str | None
    path: re.Pattern[str]
    remaining: int
    status: int | None = None
    delay_s: float = 0.0
    message: str = ""
    retry_after_s: int | None = None
    hits: int = 0

    def matches(self, verb: str, path: str) -> bool:
        return (self.verb is None or self.verb == verb) and self.path.search(path) is not None


class FaultInjector:
    """The handle tests hold: `fail`, `delay`, `hang`, `drop_watches`, `count`, `reset`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._counts: Counter[tuple[str, str]] = Counter()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._dropper: Callable[[re.Pattern[str] | None], int] | None = None

    def bind(
        self, loop: asyncio.AbstractEventLoop, dropper: Callable[[re.Pattern[str] | None], int]
    ) -> None:
        self._loop, self._dropper = loop, dropper

    def fail(
        self,
        path: str = "",
        *,
        verb: str | None = None,
        status: int = 500,
        times: int = 1,
        message: str = "",
        retry_after_s: int | None = None,
    ) -> FaultRule:
        """Answer the next `times` matching requests with a Status of code `status`."""
        rule = FaultRule(
            verb,
            re.compile(path),
            times,
            status=status,
            message=message,
            retry_after_s=retry_after_s,
        )
        with self._lock:
            self._rules.append(rule)
        return rule

    def delay(
        self, path: str = "", *, verb: str | None = None, seconds: float, times: int = 1
    ) -> FaultRule:
        """Hold the next `times` matching requests for `seconds` before serving them."""
        rule = FaultRule(verb, re.compile(path), times, delay_s=seconds)
        with self._lock:
            self._rules.append(rule)
        return rule

    def hang(self, path: str = "", *, verb: str | None = None, times: int = 1) -> FaultRule:
        """Never answer the next `times` matching requests: each is held until its client
        gives up (its own timeout closes the connection) or the server stops. Unlike a
        delay, no answer can ever win the race against the client's timeout."""
        return self.delay(path, verb=verb, seconds=math.inf, times=times)

    def reset(self) -> None:
        with self._lock:
            self._rules.clear()
            self._counts.clear()

    def count(self, path: str = "", *, verb: str | None = None) -> int:
        """Requests seen so far whose path (with query) matches the regex `path`."""
        pattern = re.compile(path)
        with self._lock:
            return sum(
                n
                for (seen_verb, seen_path), n in self._counts.items()
                if (verb is None or verb == seen_verb) and pattern.search(seen_path)
            )

    def drop_watches(self, path: str | None = None) -> int:
        """Close open watch streams (those whose path matches, or all); returns how many."""
        if self._loop is None or self._dropper is None:
            return 0
        pattern = re.compile(path) if path is not None else None
        dropper = self._dropper
        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            return dropper(pattern)
        result: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(lambda: result.set_result(dropper(pattern)))
        return result.result(timeout=10)

    def admit(self, verb: str, path: str) -> tuple[float, ApiError | None]:
        """Called by the server for every request: count it, return (delay, error to answer)."""
        with self._lock:
            self._counts[(verb, path)] += 1
            for rule in self._rules:
                if rule.remaining > 0 and rule.matches(verb, path):
                    rule.remaining -= 1
                    rule.hits += 1
                    if rule.status is None:
                        return rule.delay_s, None
                    message = (
                        rule.message or f"injected fault: {REASONS.get(rule.status, rule.status)}"
                    )
                    details = (
                        {"retryAfterSeconds": rule.retry_after_s} if rule.retry_after_s else None
                    )
                    return 0.0, ApiError(
                        rule.status, message, details=details, retry_after=rule.retry_after_s
                    )
        return 0.0, None
