"""The namespace controller of the emulated cluster: terminating and finalizing namespaces.

Owns a namespace's life after its delete: it turns Terminating, refuses new content
(403 NamespaceTerminating), has every object in it deleted, drops the `kubernetes`
spec finalizer once it is empty, and goes when no finalizer is left; and
`namespaces/{name}/finalize`, which sets only `spec.finalizers`. It writes through
the Cluster (commit, delete, remove, schedule). Nothing here awaits.
"""

from __future__ import annotations

from typing import Any

from dra_driver.objects.api_time import api_time

from .errors import ApiError, not_found
from .object_writes import ObjectWrites
from .policy_matching import UPDATE
from .registry import ResourceType
from .store import MODIFIED
from .write_checks import check_type, target


class NamespaceController:
    """The namespaces being terminated and what finishes them."""

    def __init__(self, cluster: ObjectWrites) -> None:
        self._cluster = cluster
        self._namespaces = cluster.storage.registry.get("", "v1", "namespaces")
        self._terminating: set[str] = set()

    def require(self, resource: ResourceType, namespace: str, name: str) -> None:
        """A create in a namespace needs the namespace, and one that is not terminating."""
        found = self._cluster.storage.get(self._namespaces, "", namespace)
        if found is None:
            raise not_found(target(self._namespaces, namespace))
        if namespace in self._terminating:
            details = target(resource, name).details(resource.plural)
            details["causes"] = [
                {
                    "reason": "NamespaceTerminating",
                    "message": f"namespace {namespace} is being terminated",
                    "field": "metadata.namespace",
                }
            ]
            raise ApiError(
                403,
                f'{target(resource, name).qualified} "{name}" is forbidden: '
                f"unable to create new content in namespace {namespace} "
                "because it is being terminated",
                details=details,
            )

    def object_removed(self, obj: dict[str, Any]) -> None:
        """An object of a terminating namespace went: the namespace may be empty now."""
        namespace = obj["metadata"].get("namespace")
        if namespace in self._terminating:
            self._cluster.schedule(lambda: self._finish(namespace))

    def terminate(self, old: dict[str, Any]) -> dict[str, Any]:
        """The namespace controller: mark Terminating, empty the namespace, then remove it."""
        name = old["metadata"]["name"]
        if name in self._terminating:
            return old
        new = dict(old)
        new["metadata"] = {
            **old["metadata"],
            "deletionTimestamp": api_time(),
            "deletionGracePeriodSeconds": 0,
        }
        new["status"] = {**(old.get("status") or {}), "phase": "Terminating"}
        committed = self._cluster.commit(self._namespaces, new, old, MODIFIED)
        if not self._cluster.dry_run:
            self._terminating.add(name)
        self._cluster.schedule(lambda: self._purge(name))
        return committed

    def _purge(self, name: str) -> None:
        for bucket in {id(b): b for b in self._cluster.storage.buckets.values()}.values():
            if not bucket.resource.namespaced:
                continue
            for key in [k for k in bucket.objects if k[0] == name]:
                obj = bucket.objects.get(key)
                if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                    self._cluster.delete(bucket.resource, name, key[1], {"gracePeriodSeconds": 0})
        self._finish(name)

    def _finish(self, name: str) -> None:
        """Once empty: drop the `kubernetes` finalizer; the namespace goes when none is left."""
        if name not in self._terminating:
            return
        for bucket in self._cluster.storage.buckets.values():
            if bucket.resource.namespaced and any(k[0] == name for k in bucket.objects):
                return
        old = self._cluster.storage.get(self._namespaces, "", name)
        if old is None:
            self._terminating.discard(name)
            return
        spec_finalizers = (old.get("spec") or {}).get("finalizers") or []
        if "kubernetes" in spec_finalizers:
            new = dict(old)
            new["metadata"] = dict(old["metadata"])
            new["spec"] = {
                **old["spec"],
                "finalizers": [f for f in spec_finalizers if f != "kubernetes"],
            }
            if not new["spec"]["finalizers"]:
                del new["spec"]["finalizers"]
            old = self._cluster.commit(self._namespaces, new, old, MODIFIED)
        if (old.get("spec") or {}).get("finalizers") or old["metadata"].get("finalizers"):
            return
        self._terminating.discard(name)
        self._cluster.remove(self._namespaces, old)

    def finalize(self, name: str, body: Any) -> dict[str, Any]:
        """PUT namespaces/{name}/finalize: only `spec.finalizers` of the body is taken."""
        old = self._cluster.get(self._namespaces, "", name)
        obj = check_type(self._namespaces, body)
        finalizers = (obj.get("spec") or {}).get("finalizers") or []
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        spec = {k: v for k, v in (old.get("spec") or {}).items() if k != "finalizers"}
        if finalizers:
            spec["finalizers"] = list(finalizers)
        new["spec"] = spec
        self._cluster.admit(self._namespaces, UPDATE, new, old)
        if new == old:
            return old
        committed = self._cluster.commit(self._namespaces, new, old, MODIFIED)
        self._cluster.schedule(lambda: self._finish(name))
        return committed
