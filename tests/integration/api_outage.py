"""What the tests of components started during an API server outage share.

`Pauses` stands in for the sleep of a component's `ApiWait`: no test sleeps, and
each pause is where the test looks at the waiting component (its readiness, its
liveness) and, when it has seen enough, brings the API server back.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from dra_driver.kube.api_wait import ApiWait

WAIT_S = 30.0
"""Bounds only a test that would otherwise hang on broken code; never reached when it works."""

WAITING_LOG = "API server unavailable, waiting"


class Pauses:
    """The injected sleep: records each pause and runs `during(n)` (n = 1, 2, ...) instead."""

    def __init__(self, during: Callable[[int], Awaitable[None]]) -> None:
        self.delays: list[float] = []
        self._during = during

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        await self._during(len(self.delays))

    def api_wait(self, component: str) -> ApiWait:
        return ApiWait(component, sleep=self)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def http_get(url: str, **options: Any) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.get(url, **options) as response:
        return response.status, await response.text()


async def http_post(url: str, body: Any) -> tuple[int, str]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        return response.status, await response.text()


async def until_set(event: asyncio.Event, task: asyncio.Task[Any]) -> None:
    """Wait for `event`; if `task` ends first, raise its error (or say it ended)."""
    waiter = asyncio.create_task(event.wait())
    try:
        async with asyncio.timeout(WAIT_S):
            await asyncio.wait({waiter, task}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
    if not event.is_set():
        task.result()
        raise AssertionError(f"{task.get_name()} ended before {event!r} was set")
