"""A list-and-watch cache of one kind of object, in asyncio.

List, then watch from the list's resourceVersion with bookmarks; on 410 Gone
relist and replay the difference as events; on transient errors back off
(`dra_driver.kube.backoff`: doubling, with jitter so replicas do not retry in
step, never longer than `max_retry_delay_s`) and resume from the last
resourceVersion seen; an informer never gives up on an API server that is
away. Handlers receive `(event_type, object)` with event types ADDED, MODIFIED,
DELETED, so libvgpu's owner indexes, the DRA controller and the legacy
extender are fed straight from it.

The public surface is small on purpose: `run()` (a task), `synced`, `store`
(key -> object, read-only for callers), `get(key)`, `wait_for(predicate)` and
the handlers; an optional `transform` says what of each object is kept.
Writes a component makes itself and must see before the watch delivers them
go through `dra_driver.kube.assume.AssumeCache`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dra_driver.errors import TransientError
from dra_driver.kube.backoff import Backoff, BackoffSettings
from dra_driver.kube.rest import GoneError, KubeClient

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]
Transform = Callable[[dict[str, Any]], dict[str, Any]]
"""What a component keeps of each listed or watched object, before it is stored and
handed to the handlers (e.g. without fields it never reads, to save memory)."""


@dataclass(frozen=True, slots=True)
class InformerSettings:
    watch_timeout_s: int = 240
    """Server-side timeoutSeconds of each watch; the informer simply rewatches."""

    retry_delay_s: float = 1.0
    """First pause after a transient error; doubles up to `max_retry_delay_s`."""

    max_retry_delay_s: float = 30.0

    jitter: float = 0.5
    """Each pause is stretched by a random factor in [1, 1 + jitter] (then capped)."""


def object_key(obj: dict[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


class Informer:
    """Keeps `store` equal to the server's objects at `path` (filtered by selectors)."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        *,
        handlers: list[Handler] | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        settings: InformerSettings | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.client = client
        self.transform = transform
        self.path = path
        self.handlers = list(handlers or [])
        self.field_selector = field_selector
        self.label_selector = label_selector
        self.settings = settings or InformerSettings()
        self.store: dict[str, dict[str, Any]] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._changed = asyncio.Condition()

    async def run(self) -> None:
        """Run until cancelled."""
        settings = self.settings
        backoff = Backoff(
            BackoffSettings(settings.retry_delay_s, settings.max_retry_delay_s, settings.jitter)
        )
        while True:
            try:
                if not self.resource_version:
                    await self._relist()
                await self._watch()
                backoff.reset()
            except GoneError:
                log.info("watch expired, relisting", extra={"path": self.path})
                self.resource_version = ""
            except TransientError as error:
                delay = backoff.next_delay()
                log.warning(
                    "watch interrupted, retrying",
                    extra={"path": self.path, "error": str(error), "retry_in_s": round(delay, 3)},
                )
                await asyncio.sleep(delay)

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached object at `key` (`namespace/name`, or `name` when cluster-scoped)."""
        return self.store.get(key)

    async def wait_for(self, predicate: Callable[[dict[str, dict[str, Any]]], bool]) -> None:
        """Wait until `predicate(store)` holds (checked after every change)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self.store))

    async def _relist(self) -> None:
        listing = await self.client.list(
            self.path, field_selector=self.field_selector, label_selector=self.label_selector
        )
        items = listing.get("items") or []
        if self.transform is not None:
            items = [self.transform(item) for item in items]
        fresh = {object_key(item): item for item in items}
        for key, old in list(self.store.items()):
            if key not in fresh:
                await self._apply("DELETED", old)
        for key, item in fresh.items():
            previous = self.store.get(key)
            if previous is None:
                await self._apply("ADDED", item)
            elif _version(previous) != _version(item):
                await self._apply("MODIFIED", item)
        self.resource_version = (listing.get("metadata") or {}).get("resourceVersion", "")
        self.synced.set()

    async def _watch(self) -> None:
        async for event in self.client.watch(
            self.path,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self.settings.watch_timeout_s,
            field_selector=self.field_selector,
            label_selector=self.label_selector,
        ):
            kind, obj = event.get("type"), event.get("object") or {}
            if kind == "ERROR":
                if obj.get("code") == 410:
                    raise GoneError(410, obj.get("reason", "Expired"), obj.get("message", ""))
                raise _watch_error(obj)
            version = _version(obj)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                await self._apply(kind, obj if self.transform is None else self.transform(obj))
            if version:
                self.resource_version = version

    async def _apply(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        if kind == "DELETED":
            self.store.pop(key, None)
        else:
            self.store[key] = obj
        for handler in self.handlers:
            handler(kind, obj)
        async with self._changed:
            self._changed.notify_all()


def _version(obj: dict[str, Any]) -> str:
    return (obj.get("metadata") or {}).get("resourceVersion", "")


def _watch_error(status: dict[str, Any]) -> TransientError:
    return TransientError(f"watch error: {status.get('message', status)}")
