"""The part of the Cluster that the emulator's own controllers write through.

The garbage collector and the namespace controller react to the Cluster's deletes
and make their writes through the Cluster (commit, delete, remove, schedule). They
are typed against this protocol, which the Cluster meets, so they depend on this
module and the Cluster depends on them: one direction, no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from .policy_matching import GroupVersionKind
from .registry import ResourceType
from .store import Storage


class ObjectWrites(Protocol):
    """Writes as the Cluster makes them: dry-run aware, admitted, one door to storage."""

    storage: Storage
    dry_run: bool

    def schedule(self, callback: Callable[[], None]) -> None: ...

    def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any]: ...

    def commit(
        self,
        resource: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        event_type: str,
    ) -> dict[str, Any]: ...

    def admit(
        self,
        resource: ResourceType,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        name: str | None = None,
        kind: GroupVersionKind | None = None,
    ) -> None: ...

    def delete(
        self, resource: ResourceType, namespace: str, name: str, options: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]: ...

    def remove(self, resource: ResourceType, old: dict[str, Any]) -> dict[str, Any]: ...
