"""Objects, the cluster-wide resourceVersion, watch history and live watchers.

Everything here runs on the server's event loop and never awaits, so a
read-check-write sequence in a handler is atomic: two writers racing on one
resourceVersion are serialised and the second one sees the first one's write.
Stored objects are never mutated in place: a write stores a new dict, so
responses and queued watch events can share them without copying.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .conversion import SHARED_STORES
from .registry import Registry, ResourceType
from .selectors import FieldTerm, Requirement, fields_match, labels_match

ObjectKey = tuple[str, str]  # (namespace or "", name)
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
Presenter = Callable[[dict[str, Any]], dict[str, Any]]
CommitListener = Callable[[ResourceType, "WatchEvent"], None]


def _encode(event_type: str, obj: Mapping[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}, separators=(",", ":")).encode() + b"\n"


class WatchEvent:
    """One committed change; its wire line is encoded once and shared by every watcher."""

    __slots__ = ("_line", "at", "obj", "old", "rv", "type")

    def __init__(
        self, rv: int, event_type: str, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        self.rv = rv
        self.type = event_type
        self.obj = obj
        self.old = old
        self.at = time.monotonic()
        self._line: bytes | None = None

    @property
    def line(self) -> bytes:
        if self._line is None:
            self._line = _encode(self.type, self.obj)
        return self._line


@dataclass(eq=False, slots=True)
class Watcher:
    """A watch stream's filter and its bounded backlog of encoded lines."""

    resource: ResourceType
    namespace: str | None
    labels: tuple[Requirement, ...]
    fields: tuple[FieldTerm, ...]
    limit: int
    path: str = ""
    present: Presenter | None = None
    pending: deque[bytes] = field(default_factory=deque)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    closed: bool = False

    def matches(self, obj: Mapping[str, Any] | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and obj["metadata"].get("namespace") != self.namespace:
            return False
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)

    def line_for(self, event: WatchEvent) -> bytes | None:
        """The line this watcher sees: an update moving in/out of its filter is ADDED/DELETED."""
        if self.present is not None:
            return self._converted_line(event, self.present)
        now = self.matches(event.obj)
        if event.type != MODIFIED:
            return event.line if now else None
        before = self.matches(event.old)
        if now and before:
            return event.line
        if now:
            return _encode(ADDED, event.obj)
        if before:
            return _encode(DELETED, event.obj)
        return None

    def _converted_line(self, event: WatchEvent, present: Presenter) -> bytes | None:
        """The same choice for a watcher of another API version of a shared store."""
        obj = present(event.obj)
        now = self.matches(obj)
        before = event.type == MODIFIED and self.matches(
            present(event.old) if event.old is not None else None
        )
        if now and (before or event.type != MODIFIED):
            return _encode(event.type, obj)
        if now:
            return _encode(ADDED, obj)
        if before:
            return _encode(DELETED, obj)
        return None

    def offer(self, event: WatchEvent) -> bool:
        """Queue the event; False when the backlog overflowed and the stream must close."""
        line = self.line_for(event)
        if line is None:
            return True
        if len(self.pending) >= self.limit:
            self.close()
            return False
        self.pending.append(line)
        self.ready.set()
        return True

    def close(self) -> None:
        self.closed = True
        self.ready.set()


class WatcherSet:
    """A bucket's watchers, those that select one field value (`spec.nodeName=node-7`, as
    every kubelet watches its pods) indexed by it: an event is offered only to the
    watchers it can concern (its object's or old object's value, and every watcher
    without such a term), not to a thousand kubelets' watches one by one. A watcher
    skipped this way would have seen neither version match, so it gets nothing either
    way. A watcher of another API version (`present`) is never indexed."""

    __slots__ = ("_getters", "_indexed", "_keys", "_plain")

    def __init__(self) -> None:
        self._plain: set[Watcher] = set()
        self._indexed: dict[tuple[str, str], set[Watcher]] = {}
        self._keys: dict[Watcher, tuple[str, str]] = {}
        self._getters: dict[str, Callable[[Mapping[str, Any]], str]] = {}

    @staticmethod
    def _term(watcher: Watcher) -> FieldTerm | None:
        if watcher.present is not None:
            return None
        return next((t for t in watcher.fields if t.equal), None)

    def add(self, watcher: Watcher) -> None:
        term = self._term(watcher)
        if term is None:
            self._plain.add(watcher)
            return
        key = (term.path, term.value)
        self._keys[watcher] = key
        self._indexed.setdefault(key, set()).add(watcher)
        self._getters.setdefault(term.path, term.get)

    def discard(self, watcher: Watcher) -> None:
        self._plain.discard(watcher)
        key = self._keys.pop(watcher, None)
        if key is not None:
            group = self._indexed[key]
            group.discard(watcher)
            if not group:
                del self._indexed[key]

    def __iter__(self) -> Iterator[Watcher]:
        yield from list(self._plain)
        yield from list(self._keys)

    def __len__(self) -> int:
        return len(self._plain) + len(self._keys)

    def for_event(self, event: WatchEvent) -> list[Watcher]:
        """The watchers `event` may concern."""
        found = list(self._plain)
        for path, get in self._getters.items():
            values = {get(event.obj)}
            if event.old is not None:
                values.add(get(event.old))
            for value in values:
                found.extend(self._indexed.get((path, value), ()))
        return found


class Bucket:
    """All objects of one resource type, its bounded event history and its watchers."""

    __slots__ = ("floor", "history", "max_age_s", "objects", "resource", "watchers")

    def __init__(self, resource: ResourceType, history_size: int, max_age_s: float) -> None:
        self.resource = resource
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.history: deque[WatchEvent] = deque(maxlen=history_size)
        self.max_age_s = max_age_s
        # Events at or below `floor` have left the history: older watches get 410.
        self.floor = 0
        self.watchers = WatcherSet()

    def compact(self) -> None:
        """Forget events older than the history window, as etcd compaction does."""
        oldest = time.monotonic() - self.max_age_s
        history = self.history
        while history and history[0].at < oldest:
            self.floor = history.popleft().rv

    def record(self, event: WatchEvent) -> None:
        if len(self.history) == self.history.maxlen:
            self.floor = self.history[0].rv
        self.history.append(event)
        if self.history[0].at < event.at - self.max_age_s:
            self.compact()
        for watcher in self.watchers.for_event(event):
            if not watcher.offer(event):
                self.watchers.discard(watcher)

    def events_after(self, rv: int) -> Iterator[WatchEvent]:
        start = len(self.history)
        while start > 0 and self.history[start - 1].rv > rv:
            start -= 1
        for index in range(start, len(self.history)):
            yield self.history[index]

    def snapshot(self, rv: int) -> dict[ObjectKey, dict[str, Any]] | None:
        """The objects as they were at `rv`, undone from the history; None once compacted."""
        if rv < self.floor:
            return None
        state = dict(self.objects)
        for event in reversed(self.history):
            if event.rv <= rv:
                break
            meta = event.obj["metadata"]
            key = (meta.get("namespace", ""), meta["name"])
            if event.type == ADDED or event.old is None:
                state.pop(key, None)
            else:
                state[key] = event.old
        return state


def owner_uids(obj: Mapping[str, Any] | None) -> set[str]:
    if obj is None:
        return set()
    return {ref["uid"] for ref in obj["metadata"].get("ownerReferences") or () if ref.get("uid")}


class Storage:
    """The whole cluster state; `commit` is the only way anything changes."""

    def __init__(self, registry: Registry, history_size: int, history_s: float) -> None:
        self.registry = registry
        self.rv = 0
        self.buckets: dict[tuple[str, str, str], Bucket] = {}
        for resource in registry.resources:
            shared = SHARED_STORES.get(resource.key)
            if shared is not None and shared in self.buckets:
                self.buckets[resource.key] = self.buckets[shared]
            else:
                self.buckets[resource.key] = Bucket(resource, history_size, history_s)
        self.by_uid: dict[str, tuple[ResourceType, ObjectKey]] = {}
        self.dependents: dict[str, set[str]] = {}
        self.on_removed: Callable[[ResourceType, dict[str, Any]], None] | None = None
        self.listeners: list[CommitListener] = []

    def bucket(self, resource: ResourceType) -> Bucket:
        return self.buckets[resource.key]

    def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any] | None:
        return self.buckets[resource.key].objects.get((namespace, name))

    def get_by_uid(self, uid: str) -> tuple[ResourceType, dict[str, Any]] | None:
        found = self.by_uid.get(uid)
        if found is None:
            return None
        resource, key = found
        return resource, self.buckets[resource.key].objects[key]

    def commit(
        self,
        resource: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        event_type: str,
    ) -> dict[str, Any]:
        """Stamp the next resourceVersion on `obj` (a dict the caller owns) and publish it."""
        self.rv += 1
        meta = obj["metadata"]
        meta["resourceVersion"] = str(self.rv)
        key = (meta.get("namespace", ""), meta["name"])
        bucket = self.buckets[resource.key]
        uid = meta["uid"]
        if event_type == DELETED:
            del bucket.objects[key]
            del self.by_uid[uid]
            owners_now: set[str] = set()
        else:
            bucket.objects[key] = obj
            self.by_uid[uid] = (resource, key)
            owners_now = owner_uids(obj)
        owners_before = owner_uids(old)
        for owner in owners_before - owners_now:
            self.dependents.get(owner, set()).discard(uid)
        for owner in owners_now - owners_before:
            self.dependents.setdefault(owner, set()).add(uid)
        event = WatchEvent(self.rv, event_type, obj, old)
        bucket.record(event)
        if event_type == DELETED and self.on_removed is not None:
            self.on_removed(resource, obj)
        for listener in self.listeners:
            listener(bucket.resource, event)
        return obj
