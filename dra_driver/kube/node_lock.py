"""Taking and releasing HAMi's node lock on the API server.

The rules are in `dra_driver.objects.node_lock` (pure); this module reads the node,
asks whether a contending holder still exists, and writes with the node's
resourceVersion as precondition, so two writers never both believe they hold
the lock. A conflict or a lost answer is retried a few times with doubling
pauses, as HAMi does (5 tries, 100 ms doubling); a retry that finds the pod's
own lock treats it as held, which is how a lost patch response is survived.
Used by the extender's Bind and by the device plugin's Allocate (release).
A vendor with a lock of its own (Cambricon's `cambricon.com/dsmlu.lock`, a bare
time) gets a locker on its key that records no owner.

In a mixed cluster the DRA controller takes the same lock around writing a
claim's allocation, with the claim's namespace/name as holder. A locker made
with `claim_holders=True` (both allocators' in mixed mode) then reads a holder
that is no pod as that claim: it holds the lock while it exists, is not being
deleted and is not yet allocated, so a contender waits for the controller's
write instead of taking the lock over as dangling.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from api.hami_annotations import NODE_LOCK, NodeLock, encode_node_lock
from dra_driver.kube.rest import (
    ConflictError,
    KubeClient,
    NotFoundError,
    TransientApiError,
    object_path,
)
from dra_driver.objects.node_lock import (
    DEFAULT_LOCK_TIMEOUT,
    LockState,
    NodeLockBusyError,
    NodeLockError,
    lock_value,
    may_acquire,
    may_release,
    view_lock,
)
from dra_driver.objects.resource_api import RESOURCE_API

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
ATTEMPTS = 5
FIRST_PAUSE_S = 0.1
TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


def _now() -> datetime:
    return datetime.now(UTC)


class NodeLocker:
    """Acquire/release a node lock annotation (`hami.io/mutex.lock` unless told another
    `key`) for one pod at a time; `records_owner=False` writes a bare time."""

    def __init__(
        self,
        client: KubeClient,
        *,
        timeout: timedelta = DEFAULT_LOCK_TIMEOUT,
        clock: Callable[[], datetime] = _now,
        attempts: int = ATTEMPTS,
        first_pause_s: float = FIRST_PAUSE_S,
        key: str = NODE_LOCK,
        records_owner: bool = True,
        claim_holders: bool = False,
    ) -> None:
        self.client = client
        self.claim_holders = claim_holders
        self.key = key
        self.records_owner = records_owner
        self.timeout = timeout
        self.clock = clock
        self.attempts = attempts
        self.first_pause_s = first_pause_s

    async def acquire(self, node: str, namespace: str, pod: str) -> None:
        """Hold the lock of `node` for `namespace/pod`, or raise NodeLockError
        (NodeLockBusyError when another pod holds it)."""
        await self._retry(node, lambda: self._try_acquire(node, namespace, pod))

    async def release(self, node: str, namespace: str, pod: str) -> bool:
        """Remove the lock if this pod holds it (or it has no owner); True if removed."""
        removed = [False]

        async def attempt() -> None:
            removed[0] = await self._try_release(node, namespace, pod)

        await self._retry(node, attempt)
        return removed[0]

    async def _retry(self, node: str, attempt: Callable[[], Any]) -> None:
        pause = self.first_pause_s
        for number in range(1, self.attempts + 1):
            try:
                await attempt()
                return
            except (ConflictError, TransientApiError) as error:
                if number == self.attempts:
                    raise NodeLockError(
                        node, f"lock not written after {self.attempts} tries: {error}"
                    ) from error
                log.info("node lock write retried", extra={"node": node, "error": str(error)})
                await asyncio.sleep(pause)
                pause *= 2

    async def _try_acquire(self, node: str, namespace: str, pod: str) -> None:
        current = await self._get_node(node)
        metadata = current.get("metadata") or {}
        value = (metadata.get("annotations") or {}).get(self.key)
        now = self.clock()
        view = view_lock(node, value, namespace, pod, now, self.timeout)
        if view.state is LockState.OWN:
            return
        alive = True
        if view.state is LockState.CONTENDED and view.holder is not None:
            alive = await self._pod_alive(view.holder.namespace, view.holder.pod)
        if not may_acquire(view, alive):
            raise NodeLockBusyError(
                node,
                f"{view.describe()}; binding waits until that pod is allocated "
                f"or the lock is older than {self.timeout}",
            )
        if view.state is not LockState.FREE:
            log.info(
                "taking over node lock",
                extra={"node": node, "pod": f"{namespace}/{pod}", "was": view.describe()},
            )
        value = (
            lock_value(namespace, pod, now)
            if self.records_owner
            else encode_node_lock(NodeLock(now))
        )
        await self._write(node, metadata.get("resourceVersion"), value)

    async def _try_release(self, node: str, namespace: str, pod: str) -> bool:
        current = await self._get_node(node)
        metadata = current.get("metadata") or {}
        value = (metadata.get("annotations") or {}).get(self.key)
        if not may_release(node, value, namespace, pod):
            return False
        await self._write(node, metadata.get("resourceVersion"), None)
        return True

    async def _get_node(self, node: str) -> dict[str, Any]:
        try:
            return await self.client.get(object_path(NODES, node))
        except NotFoundError as error:
            raise NodeLockError(node, "node not found") from error

    async def _pod_alive(self, namespace: str, pod: str) -> bool:
        path = object_path(f"/api/v1/namespaces/{namespace}/pods", pod)
        try:
            holder = await self.client.get(path)
        except NotFoundError:
            return self.claim_holders and await self._claim_being_allocated(namespace, pod)
        return (holder.get("status") or {}).get("phase") not in TERMINATED_PHASES

    async def _claim_being_allocated(self, namespace: str, name: str) -> bool:
        """Whether the DRA controller may still be writing this claim's allocation."""
        path = object_path(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims", name)
        try:
            claim = await self.client.get(path)
        except NotFoundError:
            return False
        metadata = claim.get("metadata") or {}
        allocated = (claim.get("status") or {}).get("allocation")
        return not metadata.get("deletionTimestamp") and not allocated

    async def _write(self, node: str, resource_version: str | None, value: str | None) -> None:
        body = {"metadata": {"resourceVersion": resource_version, "annotations": {self.key: value}}}
        await self.client.patch(object_path(NODES, node), body)
