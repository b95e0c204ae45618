"""Waiting for the API server, where exiting would keep a component down longer.

A component that exits because the API server did not answer is restarted by
kubelet under CrashLoopBackOff, whose delay grows to five minutes: an outage of
a minute keeps it down for minutes after the API server is back. So a
component that needs the API server to start waits for it instead: it retries
with a bounded backoff (`dra_driver.kube.backoff`), logs each failed attempt
with the error and the pause before the next one, and reports not ready
(`problem`, which its readiness endpoint answers) until an attempt succeeds.

Only a transient error (no answer, 429, 5xx: `TransientError`) is waited out.
A refusal that no waiting cures (the API lacks a group the component needs, a
403) ends the wait with that error, so the process still exits with its
message. Stopping the component cancels the wait
(`dra_driver.process.runtime.finished_before_stop`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dra_driver.errors import TransientError
from dra_driver.kube.backoff import Backoff, BackoffSettings
from dra_driver.kube.rest import KubeClient

log = logging.getLogger(__name__)

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]

VERSION_PATH = "/version"
"""What `until_serving` asks: answered by every API server to every client that
reaches it, whatever its RBAC, so an answer means the server is there."""

NOT_CHECKED = "the API server has not been reached yet"


class ApiWait:
    """One component's wait for the API server, and what its readiness says meanwhile."""

    def __init__(
        self,
        component: str,
        settings: BackoffSettings | None = None,
        *,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.component = component
        self.settings = settings or BackoffSettings()
        self.sleep = sleep
        """Pauses between attempts; tests pass one that does not sleep."""
        self.problem: str | None = NOT_CHECKED
        """Why the component is not ready, None once an attempt succeeded: its
        readiness endpoint answers this."""

    def readiness(self) -> str | None:
        """None when ready, else why not: the readiness endpoints' callback."""
        return self.problem

    async def until_reachable(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`attempt()`'s result, retried while it fails with a transient error."""
        backoff = Backoff(self.settings)
        failures = 0
        while True:
            try:
                result = await attempt()
            except TransientError as error:
                failures += 1
                delay = backoff.next_delay()
                self.problem = f"waiting for the API server: {error}"
                log.warning(
                    "API server unavailable, waiting",
                    extra={
                        "component": self.component,
                        "attempt": failures,
                        "error": str(error),
                        "retry_in_s": round(delay, 3),
                    },
                )
                await self.sleep(delay)
                continue
            if failures:
                log.info(
                    "API server available again",
                    extra={"component": self.component, "failed_attempts": failures},
                )
            self.problem = None
            return result

    async def until_serving(self, client: KubeClient) -> dict[str, Any]:
        """Wait until the API server answers at all (its version, which is returned)."""
        return await self.until_reachable(lambda: client.get(VERSION_PATH))
