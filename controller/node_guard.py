"""Writing a pod's allocations under HAMi's node lock, in a mixed cluster.

The controller decides from its informers, which may not yet show a legacy pod
the extender has just filtered onto the same GPU. Both allocators therefore
serialise per node on `hami.io/mutex.lock`: the extender holds it from Bind
until the device plugin's Allocate; this controller takes it (holder: the last
claim it is about to write, so a contender sees the holder as alive until that
write is done, `NodeLocker(claim_holders=True)`), re-reads the legacy pods of
the node from the API, checks that the node's GPUs carry every DRA allocation
(its own pending ones included) plus every legacy share, writes, and releases.
A lock held by someone else, or a share that no longer fits, fails the write:
the caller takes back what was written and retries the pod later, never
waiting on the lock. Writes of this process to one node queue behind each
other first, so they never contend for the lock among themselves.

`NoNodeGuard` is the guard outside mixed mode: it holds nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from api.hami_annotations import VGPU_NODE
from controller.cluster_view import PODS, ClusterView
from controller.inventory import usage_by_node
from controller.mixed_usage import add_holds, legacy_backends, legacy_hold, over_commits
from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient

RECHECK_RETRY_S = 0.5
"""A share that no longer fits is retried after the pod's backoff; this is its hint."""


class LegacyShareTakenError(TransientError):
    """Under the node lock, the legacy pods of the node leave no room for the allocation."""


class NodeGuard(Protocol):
    def hold(
        self, node: str | None, claims: Sequence[dict[str, Any]]
    ) -> contextlib.AbstractAsyncContextManager[None]: ...


class NoNodeGuard:
    """Outside mixed mode: the controller is the only allocator of its devices."""

    @contextlib.asynccontextmanager
    async def hold(self, node: str | None, claims: Sequence[dict[str, Any]]) -> AsyncIterator[None]:
        yield


class MixedNodeGuard:
    """Holds a node's lock around the writes to it, after re-checking the legacy pods."""

    def __init__(self, client: KubeClient, view: ClusterView, locker: NodeLocker) -> None:
        self.client = client
        self.view = view
        self.locker = locker
        self._backends = legacy_backends()
        self._queues: dict[str, asyncio.Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, node: str | None, claims: Sequence[dict[str, Any]]) -> AsyncIterator[None]:
        """Raises NodeLockBusyError (another holder) or LegacyShareTakenError (no room)."""
        if node is None or not claims:
            yield
            return
        metadata = claims[-1]["metadata"]
        namespace, name = str(metadata["namespace"]), str(metadata["name"])
        queue = self._queues.setdefault(node, asyncio.Lock())
        async with queue:
            await self.locker.acquire(node, namespace, name)
            try:
                await self._recheck(node)
                yield
            finally:
                with contextlib.suppress(DriverError):
                    await self.locker.release(node, namespace, name)

    async def _recheck(self, node: str) -> None:
        """The node's GPUs must carry what the view's claims hold plus the legacy pods
        the API shows now (annotated for the node by Filter, or bound to it)."""
        engine_node = self.view.inventory.nodes.get(node)
        if engine_node is None:
            return
        pods: dict[str, dict[str, Any]] = {}
        queries = (
            {"label_selector": f"{VGPU_NODE}={node}"},
            {"field_selector": f"spec.nodeName={node}"},
        )
        for query in queries:
            for pod in (await self.client.list(PODS, **query)).get("items") or []:
                pods[str(pod["metadata"].get("uid"))] = pod
        holds = [
            hold
            for pod in pods.values()
            if (hold := legacy_hold(pod, self._backends)) is not None and hold.node == node
        ]
        claims = usage_by_node(self.view.effective_claims(), self.view.inventory)
        total = add_holds({node: claims.get(node, {})}, holds).get(node, {})
        problems = over_commits(engine_node, total)
        if problems:
            raise LegacyShareTakenError(
                f"node {node}: with the legacy pods there now, {'; '.join(problems)}",
                RECHECK_RETRY_S,
            )
