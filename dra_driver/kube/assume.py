"""Objects this process wrote, seen before the watch delivers them.

A controller that writes a claim's allocation and then decides the next claim
from its informer would not yet see that write and could hand out the same
capacity twice. kube-scheduler solves this with an assume cache: after a
successful write the returned object is kept as an overlay on the informer's
store until the informer holds that version or a newer one. Reads go through
`get` / `values`, which prefer the newer of the two.

resourceVersions are compared as integers, as kube-scheduler's assume cache
does; a version that is not an integer is treated as older than any assumed
one, so the overlay is only dropped once the informer catches up or the
object is deleted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from dra_driver.kube.informer import Informer, object_key


def _version_number(obj: dict[str, Any] | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion", ""))
    except ValueError:
        return -1


class AssumeCache:
    """An overlay of assumed objects on one informer's store.

    `assume(obj)` after each successful write (the object the server returned);
    `forget(key)` when a write is undone or the object is to be read afresh.
    The informer's handler drops an assumed object once the store has caught up.
    """

    def __init__(self, informer: Informer) -> None:
        self.informer = informer
        self._assumed: dict[str, dict[str, Any]] = {}
        informer.handlers.append(self._on_event)

    def assume(self, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        stored = self.informer.get(key)
        if stored is not None and _version_number(stored) >= _version_number(obj):
            self._assumed.pop(key, None)
            return
        self._assumed[key] = obj

    def forget(self, key: str) -> None:
        self._assumed.pop(key, None)

    def get(self, key: str) -> dict[str, Any] | None:
        assumed = self._assumed.get(key)
        return assumed if assumed is not None else self.informer.get(key)

    def values(self) -> Iterator[dict[str, Any]]:
        """Every object: the assumed version where one is pending, else the stored one."""
        for key, obj in self.informer.store.items():
            yield self._assumed.get(key, obj)
        for key, obj in self._assumed.items():
            if key not in self.informer.store:
                yield obj

    @property
    def pending(self) -> int:
        """How many writes the watch has not delivered yet (for tests and metrics)."""
        return len(self._assumed)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        key = object_key(obj)
        assumed = self._assumed.get(key)
        if assumed is None:
            return
        if kind == "DELETED" or _version_number(obj) >= _version_number(assumed):
            del self._assumed[key]
