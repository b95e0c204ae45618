"""List-and-watch of one resource through the official `kubernetes` client, in a thread.

The kube-scheduler stand-in plays a client-go binary: it reads from watch-fed caches,
not by listing per scheduling cycle. Its client is the synchronous official one, so
each resource gets a thread that lists (`_preload_content=False`, answered as JSON),
then watches from the list's resourceVersion with bookmarks, and on `410 Gone`
relists. It calls the same generated `list_*` methods with `watch=True` that
`kubernetes.watch.Watch` calls, and splits lines with the same `iter_resp_lines`,
but keeps the streaming response itself: `stop()` shuts its socket down, so a
thread blocked on a quiet watch ends at once instead of at the watch's timeout
(`Watch.stop()` only takes effect at the next event).

Events are handed to the event loop with `call_soon_threadsafe` as
`(kind, object)`, kind ADDED / MODIFIED / DELETED; a relist is handed over as one
("LIST", items) so the owner can diff it against what it holds. Objects stay plain
JSON (no model deserialisation: at 10,000 pods that would dominate the cost).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

from kubernetes.client.rest import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

log = logging.getLogger(__name__)

EventSink = Callable[[str, Any], None]
"""(kind, object) for ADDED/MODIFIED/DELETED, ("LIST", items) after each (re)list."""

WATCH_TIMEOUT_S = 300
RETRY_S = 0.5


class WatchGoneError(Exception):
    """The watch's resourceVersion is too old (410): relist."""


class Reflector:
    """One resource's list+watch on a daemon thread, feeding `sink` on `loop`."""

    def __init__(
        self,
        name: str,
        list_method: Callable[..., Any],
        loop: asyncio.AbstractEventLoop,
        sink: EventSink,
    ) -> None:
        self.name = name
        self._list = list_method
        self._loop = loop
        self._sink = sink
        self.retry_s = RETRY_S
        """Seconds a failed list or watch waits before the next try."""
        self.synced = asyncio.Event()
        self._stopped = threading.Event()
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name=f"reflector {name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread: its blocked read returns once the socket is shut down."""
        self._stopped.set()
        response = self._response
        if response is not None:
            # The thread may be closing this very socket (its read ended): then it is gone.
            with contextlib.suppress(OSError, RuntimeError, ValueError):
                response.shutdown()

    def join(self) -> None:
        self._thread.join()

    def _deliver(self, kind: str, obj: Any) -> None:
        self._loop.call_soon_threadsafe(self._sink, kind, obj)

    def _run(self) -> None:
        version = ""
        while not self._stopped.is_set():
            try:
                if not version:
                    version = self._relist()
                version = self._watch(version)
            except WatchGoneError:
                version = ""
            except (ApiException, HTTPError, OSError, ValueError) as error:
                if self._stopped.is_set():
                    return
                log.warning("watch failed", extra={"resource": self.name, "error": str(error)})
                self._stopped.wait(self.retry_s)

    def _relist(self) -> str:
        listed = json.loads(self._list(_preload_content=False).data)
        self._deliver("LIST", listed.get("items") or [])
        self._loop.call_soon_threadsafe(self.synced.set)
        return str(listed["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        response = self._list(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_S,
            _preload_content=False,
        )
        self._response = response
        try:
            if self._stopped.is_set():
                return version
            for line in iter_resp_lines(response):
                if self._stopped.is_set():
                    break
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event["type"], event["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise WatchGoneError(obj.get("message", ""))
                    raise ValueError(f"watch error: {obj.get('message', '')}")
                version = str(obj["metadata"]["resourceVersion"])
                if kind != "BOOKMARK":
                    self._deliver(kind, obj)
        finally:
            self._response = None
            response.release_conn()
        return version
