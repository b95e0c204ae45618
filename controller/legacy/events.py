"""Kubernetes Events about pods, as HAMi's scheduler records them (FilteringSucceed, ...).

An event is a courtesy to the person reading `kubectl describe pod`: it is
written in the background, like client-go's recorder, so the answer to
kube-scheduler never waits for it, and failing to write one is logged and
never fails the scheduling step it describes. `flush` waits for pending writes
(shutdown, tests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.kube.rest import KubeClient

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"


class EventRecorder:
    """Writes core/v1 Events with one reporting component."""

    def __init__(self, client: KubeClient, component: str) -> None:
        self.client = client
        self.component = component
        self._pending: set[asyncio.Task[None]] = set()

    def pod_event(self, pod: Mapping[str, Any], event_type: str, reason: str, message: str) -> None:
        """Queue an event about the pod; returns at once."""
        task = asyncio.create_task(self._write(pod, event_type, reason, message), name="event")
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def flush(self) -> None:
        """Wait until every queued event has been written (or failed)."""
        while self._pending:
            await asyncio.gather(*self._pending)

    async def _write(
        self, pod: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        metadata = pod.get("metadata") or {}
        namespace = metadata.get("namespace") or "default"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{metadata.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": metadata.get("name"),
                "uid": metadata.get("uid"),
            },
            "reason": reason,
            "message": message,
            "type": event_type,
            "source": {"component": self.component},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        try:
            await self.client.create(f"/api/v1/namespaces/{namespace}/events", body)
        except DriverError as error:
            log.warning(
                "event not recorded",
                extra={
                    "pod": f"{namespace}/{metadata.get('name')}",
                    "reason": reason,
                    "error": str(error),
                },
            )
