"""The garbage collector of the emulated cluster: owner references and their finalizers.

Owns what kube-controller-manager's garbage collector does that clients observe:
an object whose owners are all gone is deleted (Background, or Foreground when its
owner was deleted so), an object with an owner left only loses the gone owner's
reference, an Orphan delete releases the dependents before the owner goes, and a
Foreground owner goes once its last dependent has. It reads the storage's dependents
index and writes through the Cluster (commit, delete, schedule), never inside the
write that triggered it. Nothing here awaits.
"""

from __future__ import annotations

import functools
from typing import Any

from .errors import ApiError
from .object_writes import ObjectWrites
from .store import DELETED, MODIFIED, owner_uids

FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"


class GarbageCollector:
    """Collects the dependents of deleted owners; `Cluster.delete` asks it for Orphan and
    Foreground deletes, the storage's removals reach it through `object_removed`."""

    def __init__(self, cluster: ObjectWrites) -> None:
        self._cluster = cluster
        self.storage = cluster.storage

    def _orphan(self, owner_uid: str) -> None:
        for uid in list(self.storage.dependents.get(owner_uid, ())):
            self._drop_owner(uid, owner_uid)

    def finish_orphaning(self, owner_uid: str) -> None:
        """The garbage collector's part of an Orphan delete: release, then let the owner go."""
        self._orphan(owner_uid)
        self._drop_finalizer(owner_uid, ORPHAN)

    def _drop_finalizer(self, uid: str, finalizer: str) -> None:
        found = self.storage.get_by_uid(uid)
        if found is None:
            return
        resource, old = found
        finalizers = old["metadata"].get("finalizers") or []
        if finalizer not in finalizers:
            return
        new = dict(old)
        meta = new["metadata"] = dict(old["metadata"])
        meta["finalizers"] = [f for f in finalizers if f != finalizer]
        if not meta["finalizers"]:
            del meta["finalizers"]
        deleting = meta.get("deletionTimestamp") and not meta.get("finalizers")
        self._cluster.commit(resource, new, old, DELETED if deleting else MODIFIED)

    def _drop_owner(self, uid: str, owner_uid: str) -> None:
        found = self.storage.get_by_uid(uid)
        if found is None:
            return
        resource, old = found
        new = dict(old)
        meta = new["metadata"] = dict(old["metadata"])
        meta["ownerReferences"] = [
            r for r in meta.get("ownerReferences") or [] if r.get("uid") != owner_uid
        ]
        if not meta["ownerReferences"]:
            del meta["ownerReferences"]
        self._cluster.commit(resource, new, old, MODIFIED)

    def object_removed(self, obj: dict[str, Any]) -> None:
        """Collect what the object owned; let go of owners that waited for it (Foreground)."""
        uid = obj["metadata"]["uid"]
        if self.storage.dependents.get(uid):
            self._cluster.schedule(lambda: self.collect(uid, "Background"))
        for owner_uid in owner_uids(obj):
            self._cluster.schedule(functools.partial(self._release_foreground, owner_uid))

    def collect_dangling(self, uid: str) -> None:
        """The garbage collector for an object whose owners may never have existed."""
        found = self.storage.get_by_uid(uid)
        if found is None:
            return
        resource, obj = found
        owners = owner_uids(obj)
        missing = {o for o in owners if self.storage.get_by_uid(o) is None}
        if not missing:
            return
        meta = obj["metadata"]
        if missing == owners:
            if not meta.get("deletionTimestamp"):
                self._cluster.delete(resource, meta.get("namespace", ""), meta["name"], {})
            return
        for owner in missing:
            self._drop_owner(uid, owner)

    def collect(self, owner_uid: str, policy: str) -> None:
        """The garbage collector: delete dependents whose owners are all gone."""
        for uid in list(self.storage.dependents.get(owner_uid, ())):
            found = self.storage.get_by_uid(uid)
            if found is None:
                continue
            resource, obj = found
            refs = obj["metadata"].get("ownerReferences") or []
            alive = [
                r
                for r in refs
                if r.get("uid") != owner_uid
                and (owner := self.storage.get_by_uid(r["uid"])) is not None
                and not (
                    owner[1]["metadata"].get("deletionTimestamp")
                    and FOREGROUND in (owner[1]["metadata"].get("finalizers") or [])
                )
            ]
            if alive:
                self._drop_owner(uid, owner_uid)
            else:
                meta = obj["metadata"]
                try:
                    self._cluster.delete(
                        resource,
                        meta.get("namespace", ""),
                        meta["name"],
                        {"propagationPolicy": policy},
                    )
                except ApiError:
                    continue
        if self.storage.get_by_uid(owner_uid) is None:
            self.storage.dependents.pop(owner_uid, None)

    def _release_foreground(self, owner_uid: str) -> None:
        if self.storage.dependents.get(owner_uid):
            return
        self._drop_finalizer(owner_uid, FOREGROUND)
