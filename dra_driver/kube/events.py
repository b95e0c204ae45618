"""Kubernetes Events (core/v1), where users look first (`kubectl describe`).

Writing an event must never hold up the work it reports on, so `emit` only
queues it and a background task writes; a failed write is logged, not
retried forever. The same (object, reason, message) emitted again within
`repeat_window_s` is folded into one event whose `count` is patched, as
client-go's event correlator does, so a claim retried many times does not
flood the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.kube.rest import KubeClient, NotFoundError, object_path
from dra_driver.objects.api_time import api_time

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class EventSettings:
    component: str
    """`source.component` / `reportingComponent`, e.g. `vgpu-dra-controller`."""

    instance: str = ""
    """`reportingInstance`: which replica wrote the event (pod name)."""

    repeat_window_s: float = 600.0
    """A repeat within this many seconds bumps `count` instead of adding an event."""

    queue_size: int = 1000
    """Events waiting to be written beyond this are dropped (and logged)."""


def involved_object(obj: Mapping[str, Any], kind: str, api_version: str) -> dict[str, Any]:
    metadata = obj.get("metadata") or {}
    reference = {
        "apiVersion": api_version,
        "kind": kind,
        "name": metadata.get("name"),
        "uid": metadata.get("uid"),
    }
    if metadata.get("namespace"):
        reference["namespace"] = metadata["namespace"]
    return reference


class EventRecorder:
    """Queue events with `emit`; `start` the writer, `aclose` to flush and stop."""

    def __init__(
        self,
        client: KubeClient,
        settings: EventSettings,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self._queue: asyncio.Queue[tuple[dict[str, Any], str, str, str]] = asyncio.Queue(
            settings.queue_size
        )
        self._seen: dict[tuple[Any, ...], tuple[str, int, float]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="event recorder")

    async def aclose(self) -> None:
        """Write what is queued (bounded by the caller's timeout), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self._queue.join()
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    def emit(self, reference: dict[str, Any], event_type: str, reason: str, message: str) -> None:
        """Queue an event about the object `reference` (see `involved_object`)."""
        try:
            self._queue.put_nowait((reference, event_type, reason, message))
        except asyncio.QueueFull:
            log.warning("event dropped", extra={"reason": reason, "object": reference.get("name")})

    async def wait_idle(self) -> None:
        """Until every queued event has been written or given up on."""
        await self._queue.join()

    async def _run(self) -> None:
        while True:
            reference, event_type, reason, message = await self._queue.get()
            try:
                await self._write(reference, event_type, reason, message)
            except DriverError as error:
                log.warning(
                    "event not written",
                    extra={"reason": reason, "object": reference.get("name"), "error": str(error)},
                )
            finally:
                self._queue.task_done()

    async def _write(
        self, reference: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        namespace = reference.get("namespace") or "default"
        collection = f"/api/v1/namespaces/{namespace}/events"
        key = (reference.get("uid"), event_type, reason, message)
        now = self.clock()
        previous = self._seen.get(key)
        stamp = api_time()
        if previous is not None and now - previous[2] < self.settings.repeat_window_s:
            name, count, first_seen = previous
            try:
                await self.client.patch(
                    object_path(collection, name), {"count": count + 1, "lastTimestamp": stamp}
                )
            except NotFoundError:
                del self._seen[key]
            else:
                self._seen[key] = (name, count + 1, first_seen)
                return
        name = f"{reference.get('name')}.{uuid.uuid4().hex[:16]}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": reference,
            "reason": reason,
            "message": message,
            "type": event_type,
            "count": 1,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "source": {"component": self.settings.component},
            "reportingComponent": self.settings.component,
            "reportingInstance": self.settings.instance or self.settings.component,
        }
        await self.client.create(collection, body)
        self._seen[key] = (name, 1, now)
        if len(self._seen) > 10 * self.settings.queue_size:
            oldest = min(self._seen, key=lambda k: self._seen[k][2])
            del self._seen[oldest]
