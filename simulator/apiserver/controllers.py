"""The kube-controller-manager behaviour clients of a real cluster observe.

- resourceclaim controller: drops `status.reservedFor` entries naming pods that
  no longer exist or have finished (Succeeded, Failed); when that empties the
  reservations of a claim carrying the delete-protection finalizer it
  deallocates the claim and drops the finalizer;
  a deleted, unreserved claim with the finalizer is deallocated and released.
- node-lifecycle controller: lifts the not-ready taint once a node is Ready or
  reports no conditions.
- garbage collector: collects objects whose owner uid never existed.

Each reacts to committed changes after a short, configurable delay (never
inside the write that triggered it), on the server's loop, like the real
controllers that watch the API and act "within seconds".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Hashable
from typing import Any

from dra_driver.objects.resource_api import DELETE_PROTECTION

from .cluster import Cluster
from .nodes import has_not_ready_taint, is_ready_or_silent, without_not_ready_taint
from .registry import ResourceType
from .settings import APIServerSettings
from .store import DELETED, MODIFIED, WatchEvent, owner_uids

log = logging.getLogger(__name__)


class Controllers:
    """Subscribed to the storage's commits; every reaction is a timer on the loop."""

    def __init__(
        self, cluster: Cluster, settings: APIServerSettings, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.cluster = cluster
        self.storage = cluster.storage
        self.settings = settings
        self._loop = loop
        self._timers: dict[Hashable, asyncio.TimerHandle] = {}
        self._reserving: dict[str, set[tuple[str, str]]] = {}
        """pod uid -> (namespace, name) of the claims reserved for it, so a pod that
        goes costs a look at its claims, not at every claim."""
        registry = self.storage.registry
        self._claims = registry.get("resource.k8s.io", "v1", "resourceclaims")
        self._pods = registry.get("", "v1", "pods")
        self._nodes = registry.get("", "v1", "nodes")

    def start(self) -> None:
        self.storage.listeners.append(self.observe)

    def close(self) -> None:
        if self.observe in self.storage.listeners:
            self.storage.listeners.remove(self.observe)
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()

    def _after(self, delay_s: float, key: Hashable, action: Callable[[], None]) -> None:
        """Run `action` once after `delay_s`; a key already waiting is not queued twice."""
        if key in self._timers:
            return

        def fire() -> None:
            del self._timers[key]
            action()

        self._timers[key] = self._loop.call_later(delay_s, fire)

    def observe(self, resource: ResourceType, event: WatchEvent) -> None:
        """Called inside every commit: only decide what to do, and do it later."""
        obj = event.obj
        meta = obj["metadata"]
        delay = self.settings.controller_delay_s
        if resource is self._claims:
            self._index_reservations(event)
        if resource is self._claims and event.type != DELETED:
            key = (meta["namespace"], meta["name"])
            self._after(delay, ("claim", key), lambda: self._sync_claim(*key))
        elif resource is self._pods and (event.type == DELETED or _finished(obj)):
            self._after(delay, ("pod", meta["uid"]), lambda: self._pod_gone(meta))
        elif (
            resource is self._nodes
            and event.type != DELETED
            and has_not_ready_taint(obj)
            and is_ready_or_silent(obj)
        ):
            name = meta["name"]
            self._after(
                self.settings.node_ready_delay_s, ("node", name), lambda: self._untaint(name)
            )
        if event.type != DELETED and owner_uids(obj) - owner_uids(event.old):
            uid = meta["uid"]
            if any(self.storage.get_by_uid(owner) is None for owner in owner_uids(obj)):
                self._after(
                    self.settings.orphan_gc_delay_s,
                    ("dangling", uid),
                    lambda: self.cluster.garbage_collector.collect_dangling(uid),
                )

    # ---- resourceclaim controller -------------------------------------------------

    def _index_reservations(self, event: WatchEvent) -> None:
        """Keep `_reserving` (pod uid -> the claims whose reservedFor names it) current."""
        for obj, add in ((event.old, False), (None if event.type == DELETED else event.obj, True)):
            if obj is None:
                continue
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            for ref in (obj.get("status") or {}).get("reservedFor") or ():
                uid = ref.get("uid")
                if add:
                    self._reserving.setdefault(uid, set()).add(key)
                elif uid in self._reserving:
                    self._reserving[uid].discard(key)
                    if not self._reserving[uid]:
                        del self._reserving[uid]

    def _pod_gone(self, pod_meta: dict[str, Any]) -> None:
        namespace, uid = pod_meta["namespace"], pod_meta["uid"]
        for claim_ns, name in sorted(self._reserving.get(uid, ())):
            if claim_ns == namespace:
                self._sync_claim(claim_ns, name)

    def _pod_exists(self, namespace: str, ref: dict[str, Any]) -> bool:
        """The reserving pod is there and still running (a finished pod holds nothing)."""
        if ref.get("apiGroup") or ref.get("resource") != "pods":
            return True
        pod = self.storage.get(self._pods, namespace, ref.get("name", ""))
        return pod is not None and pod["metadata"]["uid"] == ref.get("uid") and not _finished(pod)

    def _sync_claim(self, namespace: str, name: str) -> None:
        claim = self.storage.get(self._claims, namespace, name)
        if claim is None:
            return
        meta = claim["metadata"]
        status = dict(claim.get("status") or {})
        reserved = status.get("reservedFor") or []
        valid = [r for r in reserved if self._pod_exists(namespace, r)]
        protected = DELETE_PROTECTION in (meta.get("finalizers") or ())
        released = len(valid) < len(reserved) and not valid
        deleted_unused = bool(meta.get("deletionTimestamp")) and not reserved
        if len(valid) == len(reserved) and not (protected and deleted_unused):
            return
        if valid:
            status["reservedFor"] = valid
        else:
            status.pop("reservedFor", None)
        if protected and (released or deleted_unused):
            status.pop("allocation", None)
            status.pop("devices", None)
        new = dict(claim)
        new["metadata"] = dict(meta)
        new["status"] = status
        log.info(
            "resourceclaim controller",
            extra={"claim": f"{namespace}/{name}", "reserved": len(valid), "was": len(reserved)},
        )
        current = self.storage.commit(self._claims, new, claim, MODIFIED)
        if protected and (released or deleted_unused):
            self._release(current)

    def _release(self, claim: dict[str, Any]) -> None:
        new = dict(claim)
        meta = new["metadata"] = dict(claim["metadata"])
        meta["finalizers"] = [f for f in meta.get("finalizers") or () if f != DELETE_PROTECTION]
        if not meta["finalizers"]:
            del meta["finalizers"]
        gone = meta.get("deletionTimestamp") and not meta.get("finalizers")
        self.storage.commit(self._claims, new, claim, DELETED if gone else MODIFIED)

    # ---- node-lifecycle controller ------------------------------------------------

    def _untaint(self, name: str) -> None:
        node = self.storage.get(self._nodes, "", name)
        if node is None or not has_not_ready_taint(node) or not is_ready_or_silent(node):
            return
        self.storage.commit(self._nodes, without_not_ready_taint(node), node, MODIFIED)


def _finished(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
