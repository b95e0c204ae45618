"""REST semantics over the storage: create, update, patch, delete, bind, list, GC.

This is what kube-apiserver's generic registry and the garbage and namespace
controllers do, reduced to what clients can observe: metadata stamping,
optimistic concurrency, status separation, finalizers, owner-reference
collection. Nothing here awaits; see store.py for why that matters.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Callable
from typing import Any

from dra_driver.objects.api_time import api_time

from .apply import ApplyConflictError, apply, dotted, record_update
from .conversion import PRESENTERS
from .errors import (
    STALE,
    ApiError,
    Target,
    already_exists,
    bad_request,
    conflict,
    forbidden,
    invalid_object,
    not_found,
    not_supported,
    required,
)
from .listing import list_page
from .nodes import taint_new_node
from .patch import PatchError, json_merge_patch, json_patch, strategic_merge_patch
from .registry import ResourceType
from .rules import binding_node
from .selectors import FieldTerm, Requirement
from .store import ADDED, DELETED, MODIFIED, Storage, owner_uids
from .validation import validate_metadata

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    JSON_PATCH: json_patch,
    MERGE_PATCH: json_merge_patch,
    STRATEGIC_PATCH: strategic_merge_patch,
}
FOREGROUND = "foregroundDeletion"
ORPHAN = "orphan"
POLICIES = ("Foreground", "Background", "Orphan")
DELETE_OPTIONS = Target("meta.k8s.io", "deleteoptions", "DeleteOptions")
PATCH_OPTIONS = Target("meta.k8s.io", "patchoptions", "PatchOptions")
_USER_META = ("labels", "annotations", "finalizers", "ownerReferences")
_OMITTED_WHEN_EMPTY = ("data", "binaryData")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)


def target(resource: ResourceType, name: str) -> Target:
    return Target(resource.group, resource.plural, resource.kind, name)


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _omit_empty_maps(obj: dict[str, Any]) -> None:
    """Go's `omitempty` drops empty maps: the real server never answers `labels: {}`."""
    meta = obj["metadata"]
    for key in ("labels", "annotations"):
        if meta.get(key) == {}:
            del meta[key]
    for key in _OMITTED_WHEN_EMPTY:
        if obj.get(key) == {}:
            del obj[key]


def check_delete_options(options: dict[str, Any]) -> None:
    """Refuse options the real server refuses before it looks the object up."""
    policy = options.get("propagationPolicy")
    if policy is not None and policy not in POLICIES:
        raise invalid_object(
            DELETE_OPTIONS, [not_supported("propagationPolicy", policy, list(POLICIES))]
        )


def check_dry_run(values: list[str], options_kind: str) -> bool:
    """`dryRun=All` or nothing: True when the request must not be stored."""
    if any(v != "All" for v in values):
        target_ = Target("meta.k8s.io", options_kind.lower(), options_kind)
        raise invalid_object(target_, [not_supported("dryRun", values, ["All"])])
    return bool(values)


class Cluster:
    """The object API the HTTP layer calls; `schedule` runs controller work after the response."""

    def __init__(self, storage: Storage, schedule: Callable[[Callable[[], None]], Any]) -> None:
        self.storage = storage
        self._schedule_now = schedule
        self._namespaces = storage.registry.get("", "v1", "namespaces")
        self._nodes = storage.registry.get("", "v1", "nodes")
        self._terminating: set[str] = set()
        # Set by the HTTP layer around one `dryRun=All` call: validate, answer, store nothing.
        self.dry_run = False
        storage.on_removed = self._removed

    def _schedule(self, callback: Callable[[], None]) -> None:
        if not self.dry_run:
            self._schedule_now(callback)

    def _commit(
        self,
        resource: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        event_type: str,
    ) -> dict[str, Any]:
        _omit_empty_maps(obj)
        if self.dry_run:
            if old is not None:
                obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return obj
        return self.storage.commit(resource, obj, old, event_type)

    # ---- reads -----------------------------------------------------------------

    @staticmethod
    def present(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as `resource`'s API version shows it (differs only for shared stores)."""
        presenter = PRESENTERS.get(resource.key)
        return obj if presenter is None else presenter(obj)

    def exists(self, resource: ResourceType, namespace: str, name: str) -> bool:
        return self.storage.get(resource, namespace, name) is not None

    def get(self, resource: ResourceType, namespace: str, name: str) -> dict[str, Any]:
        obj = self.storage.get(resource, namespace, name)
        if obj is None:
            raise not_found(target(resource, name))
        return self.present(resource, obj)

    def list(
        self,
        resource: ResourceType,
        namespace: str | None,
        labels: tuple[Requirement, ...],
        fields: tuple[FieldTerm, ...],
        limit: int = 0,
        token: str = "",
        version: str = "",
        match: str = "",
    ) -> dict[str, Any]:
        return list_page(
            self.storage, resource, namespace, labels, fields, limit, token, version, match
        )

    # ---- writes ----------------------------------------------------------------

    def _check_type(self, resource: ResourceType, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise bad_request(f"the body of the request must be a {resource.kind} object")
        api_version, kind = body.get("apiVersion"), body.get("kind")
        if api_version and api_version != resource.group_version:
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected "
                f"API version ({resource.group_version})"
            )
        if kind and kind != resource.kind:
            raise bad_request(
                f'{kind} in version "{resource.version}" cannot be handled as a {resource.kind}'
            )
        obj = dict(body)
        obj["apiVersion"], obj["kind"] = resource.group_version, resource.kind
        meta = obj.get("metadata")
        obj["metadata"] = dict(meta) if isinstance(meta, dict) else {}
        return obj

    def _check_namespace(
        self, resource: ResourceType, namespace: str, meta: dict[str, Any]
    ) -> None:
        if not resource.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") not in (None, "", namespace):
            raise bad_request(
                "the namespace of the provided object does not match "
                "the namespace sent on the request"
            )
        meta["namespace"] = namespace

    def _validate(
        self,
        resource: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        status_only: bool,
    ) -> None:
        if status_only:
            errors = resource.validate_status(obj, old) if resource.validate_status else []
        else:
            errors = validate_metadata(obj, resource.name_rule, old)
            if resource.validate is not None:
                errors += resource.validate(obj, old)
            if old is None and resource.validate_status is not None and obj.get("status"):
                errors += resource.validate_status(obj, None)
        if errors:
            raise invalid_object(target(resource, obj["metadata"].get("name", "")), errors)

    def create(
        self,
        resource: ResourceType,
        namespace: str,
        body: Any,
        manager: str = "",
        managed: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """`manager` (a `fieldManager`) takes every field; `managed` is apply's own record."""
        obj = self._check_type(resource, body)
        meta = obj["metadata"]
        self._check_namespace(resource, namespace, meta)
        if resource.namespaced:
            self._require_namespace(
                resource, namespace, meta.get("name") or meta.get("generateName", "")
            )
        bucket = self.storage.bucket(resource)
        if not meta.get("name") and meta.get("generateName"):
            while True:
                name = meta["generateName"] + "".join(random.choices(_SUFFIX_ALPHABET, k=5))
                if (namespace if resource.namespaced else "", name) not in bucket.objects:
                    break
            meta["name"] = name
        for key in (*_SERVER_META, "resourceVersion", "managedFields", "selfLink"):
            meta.pop(key, None)
        if managed is None and manager:
            managed = record_update({"metadata": {}}, obj, manager, api_time())
        if managed:
            meta["managedFields"] = managed
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = api_time()
        if resource.tracks_generation:
            meta["generation"] = 1
        if resource.on_create is not None:
            resource.on_create(obj)
        if resource is self._nodes:
            taint_new_node(obj)
        if resource.normalize is not None:
            resource.normalize(obj, None)
        self._validate(resource, obj, None, status_only=False)
        if (meta.get("namespace", ""), meta["name"]) in bucket.objects:
            raise already_exists(target(resource, meta["name"]))
        return self._commit(resource, obj, None, ADDED)

    def _require_namespace(self, resource: ResourceType, namespace: str, name: str) -> None:
        found = self.storage.get(self._namespaces, "", namespace)
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

    def update(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        body: Any,
        subresource: str = "",
        manager: str = "",
    ) -> dict[str, Any]:
        stored = self.storage.get(resource, namespace, name)
        if stored is None:
            if resource.create_on_update and not subresource:
                return self.create(resource, namespace, body, manager)
            raise not_found(target(resource, name))
        old = self.present(resource, stored)
        obj = self._check_type(resource, body)
        meta = obj["metadata"]
        if meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match "
                f"the name on the URL ({name})"
            )
        self._check_namespace(resource, namespace, meta)
        return self._replace(resource, old, obj, subresource, manager)

    def _replace(
        self,
        resource: ResourceType,
        old: dict[str, Any],
        obj: dict[str, Any],
        subresource: str,
        manager: str = "",
    ) -> dict[str, Any]:
        old_meta = old["metadata"]
        wanted_rv = obj["metadata"].get("resourceVersion")
        if wanted_rv and wanted_rv != old_meta["resourceVersion"]:
            raise conflict(target(resource, old_meta["name"]), STALE)
        if resource.normalize is not None:
            resource.normalize(obj, old)
        if subresource == "status":
            new = dict(old)
            new["metadata"] = dict(old_meta)
            if not resource.status_keeps_metadata:
                for key in _USER_META:
                    if key in obj["metadata"]:
                        new["metadata"][key] = obj["metadata"][key]
                    else:
                        new["metadata"].pop(key, None)
            if obj.get("status") is None:
                new.pop("status", None)
            else:
                new["status"] = obj["status"]
        else:
            new = obj
            meta = new["metadata"]
            meta["name"] = old_meta["name"]
            if not meta.get("managedFields") and old_meta.get("managedFields"):
                meta["managedFields"] = old_meta["managedFields"]
            if manager:
                meta["managedFields"] = record_update(old, new, manager, api_time())
            if not meta.get("managedFields"):
                meta.pop("managedFields", None)
            meta.pop("selfLink", None)
            for key in _SERVER_META:
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            if resource.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if resource.tracks_generation and _spec_part(new) != _spec_part(old):
                meta["generation"] = old_meta.get("generation", 1) + 1
        self._validate(resource, new, old, status_only=subresource == "status")
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if new == old:
            return old
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._commit(resource, new, old, DELETED)
        return self._commit(resource, new, old, MODIFIED)

    def patch(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        content_type: str,
        patch: Any,
        subresource: str = "",
        manager: str = "",
        force: bool = False,
    ) -> dict[str, Any]:
        if content_type == APPLY_PATCH:
            return self._apply(resource, namespace, name, patch, subresource, manager, force)
        if force:
            raise invalid_object(
                PATCH_OPTIONS, [forbidden("force", "may not be specified for non-apply patch")]
            )
        patcher = PATCHERS.get(content_type)
        if patcher is None:
            raise ApiError(
                415,
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}, {APPLY_PATCH}",
            )
        old = self.get(resource, namespace, name)
        try:
            patched = patcher(old, patch)
        except PatchError as error:
            raise ApiError(error.code, str(error)) from error
        obj = self._check_type(resource, patched)
        self._check_namespace(resource, namespace, obj["metadata"])
        return self._replace(resource, old, obj, subresource, manager)

    def _apply(
        self,
        resource: ResourceType,
        namespace: str,
        name: str,
        config: Any,
        subresource: str,
        manager: str,
        force: bool,
    ) -> dict[str, Any]:
        """Server-side apply (see apply.py for what is modelled); creates a missing object."""
        if not manager:
            raise invalid_object(
                PATCH_OPTIONS, [required("fieldManager", "is required for apply patch")]
            )
        checked = self._check_type(resource, config)
        if checked["metadata"].get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({checked['metadata'].get('name')}) does not match "
                f"the name on the URL ({name})"
            )
        stored = self.storage.get(resource, namespace, name)
        if stored is None:
            if subresource:
                raise not_found(target(resource, name))
            created = apply(None, config, manager, force, api_time())
            created["metadata"]["name"] = name
            managed = created["metadata"].get("managedFields")
            return self.create(resource, namespace, created, managed=managed)
        old = self.present(resource, stored)
        try:
            merged = apply(old, config, manager, force, api_time())
        except ApplyConflictError as error:
            causes = [
                {
                    "reason": "FieldManagerConflict",
                    "message": f'conflict with "{m}"',
                    "field": dotted(p),
                }
                for m, p in error.conflicts
            ]
            details = target(resource, name).details(resource.plural)
            details["causes"] = causes
            raise ApiError(409, str(error), details=details) from error
        obj = self._check_type(resource, merged)
        self._check_namespace(resource, namespace, obj["metadata"])
        return self._replace(resource, old, obj, subresource)

    def bind(self, namespace: str, name: str, body: Any) -> None:
        pods = self.storage.registry.get("", "v1", "pods")
        binding_target = Target("", "pods/binding", "Binding", name)
        node = binding_node(name, body)
        old = self.get(pods, namespace, name)
        spec = old.get("spec") or {}
        if old["metadata"].get("deletionTimestamp"):
            raise conflict(
                binding_target, f"pod {name} is being deleted, cannot be assigned to a host"
            )
        if spec.get("nodeName"):
            raise conflict(
                binding_target, f'pod {name} is already assigned to node "{spec["nodeName"]}"'
            )
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        new["spec"] = {**spec, "nodeName": node}
        status = dict(old.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": api_time(),
            }
        )
        status["conditions"] = conditions
        new["status"] = status
        self._commit(pods, new, old, MODIFIED)

    # ---- deletion, finalizers, garbage collection ------------------------------

    def delete(
        self, resource: ResourceType, namespace: str, name: str, options: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """(the object as last stored, True when it is gone now rather than terminating)."""
        check_delete_options(options)
        old = self.get(resource, namespace, name)
        meta = old["metadata"]
        self._check_preconditions(resource, meta, options.get("preconditions") or {})
        policy = options.get("propagationPolicy") or "Background"
        if resource is self._namespaces:
            return self._terminate_namespace(old), False
        grace = options.get("gracePeriodSeconds")
        if resource.graceful_deletion and self._runs_on_node(old):
            if grace is None:
                grace = (old.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
            if grace > 0:
                if meta.get("deletionTimestamp"):
                    return old, False
                return self._mark_deleting(resource, old, grace, []), False
        finalizers = meta.get("finalizers") or []
        added = []
        if policy == "Orphan" and ORPHAN not in finalizers:
            added = [ORPHAN]
            self._schedule(functools.partial(self._finish_orphaning, meta["uid"]))
        elif (
            policy == "Foreground"
            and self.storage.dependents.get(meta["uid"])
            and FOREGROUND not in finalizers
        ):
            added = [FOREGROUND]
            self._schedule(functools.partial(self._collect, meta["uid"], "Foreground"))
        if finalizers or added:
            if meta.get("deletionTimestamp") and not added:
                return old, False
            return self._mark_deleting(resource, old, 0, added), False
        return self._remove(resource, old), True

    @staticmethod
    def _check_preconditions(
        resource: ResourceType, meta: dict[str, Any], preconditions: dict[str, Any]
    ) -> None:
        subject = f'Operation cannot be fulfilled on {resource.kind} "{meta["name"]}"'
        details = target(resource, meta["name"]).details(resource.plural)
        uid = preconditions.get("uid")
        if uid and uid != meta["uid"]:
            raise ApiError(
                409,
                f"{subject}: the UID in the precondition ({uid}) does not match the UID in "
                f"record ({meta['uid']}). The object might have been deleted and then recreated",
                details=details,
            )
        version = preconditions.get("resourceVersion")
        if version and version != meta["resourceVersion"]:
            raise ApiError(
                409,
                f"{subject}: the ResourceVersion in the precondition ({version}) does not match "
                f"the ResourceVersion in record ({meta['resourceVersion']}). "
                "The object might have been modified",
                details=details,
            )

    @staticmethod
    def _runs_on_node(pod: dict[str, Any]) -> bool:
        phase = (pod.get("status") or {}).get("phase")
        return bool((pod.get("spec") or {}).get("nodeName")) and phase not in (
            "Succeeded",
            "Failed",
        )

    def _mark_deleting(
        self, resource: ResourceType, old: dict[str, Any], grace: int, finalizers: list[str]
    ) -> dict[str, Any]:
        new = dict(old)
        meta = new["metadata"] = dict(old["metadata"])
        meta.setdefault("deletionTimestamp", api_time(grace))
        meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            meta["finalizers"] = [*(meta.get("finalizers") or []), *finalizers]
        return self._commit(resource, new, old, MODIFIED)

    def _remove(self, resource: ResourceType, old: dict[str, Any]) -> dict[str, Any]:
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        if resource.graceful_deletion:
            # Pods answer a delete with the pod itself, stamped as deleted now.
            new["metadata"].setdefault("deletionTimestamp", api_time())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
        return self._commit(resource, new, old, DELETED)

    def delete_collection(
        self,
        resource: ResourceType,
        namespace: str | None,
        labels: tuple[Requirement, ...],
        fields: tuple[FieldTerm, ...],
        options: dict[str, Any],
    ) -> dict[str, Any]:
        """Delete every match; the answer lists them as the single deletes left them."""
        check_delete_options(options)
        listed = self.list(resource, namespace, labels, fields)
        deleted = []
        for obj in listed["items"]:
            meta = obj["metadata"]
            current = self.storage.get(resource, meta.get("namespace", ""), meta["name"])
            if current is not None and current["metadata"]["uid"] == meta["uid"]:
                last, _ = self.delete(resource, meta.get("namespace", ""), meta["name"], options)
                deleted.append(last)
        return {**listed, "metadata": {"resourceVersion": str(self.storage.rv)}, "items": deleted}

    def evict(self, namespace: str, name: str) -> None:
        """The eviction subresource without disruption budgets: a plain pod delete."""
        pods = self.storage.registry.get("", "v1", "pods")
        self.delete(pods, namespace, name, {})

    def _orphan(self, owner_uid: str) -> None:
        for uid in list(self.storage.dependents.get(owner_uid, ())):
            self._drop_owner(uid, owner_uid)

    def _finish_orphaning(self, owner_uid: str) -> None:
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
        self._commit(resource, new, old, DELETED if deleting else MODIFIED)

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
        self._commit(resource, new, old, MODIFIED)

    def _removed(self, resource: ResourceType, obj: dict[str, Any]) -> None:
        uid = obj["metadata"]["uid"]
        if self.storage.dependents.get(uid):
            self._schedule(lambda: self._collect(uid, "Background"))
        for owner_uid in owner_uids(obj):
            self._schedule(functools.partial(self._release_foreground, owner_uid))
        namespace = obj["metadata"].get("namespace")
        if namespace in self._terminating:
            self._schedule(lambda: self._finish_namespace(namespace))

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
                self.delete(resource, meta.get("namespace", ""), meta["name"], {})
            return
        for owner in missing:
            self._drop_owner(uid, owner)

    def _collect(self, owner_uid: str, policy: str) -> None:
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
                    self.delete(
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

    # ---- namespaces ----------------------------------------------------------------

    def _terminate_namespace(self, old: dict[str, Any]) -> dict[str, Any]:
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
        committed = self._commit(self._namespaces, new, old, MODIFIED)
        if not self.dry_run:
            self._terminating.add(name)
        self._schedule(lambda: self._purge_namespace(name))
        return committed

    def _purge_namespace(self, name: str) -> None:
        for bucket in {id(b): b for b in self.storage.buckets.values()}.values():
            if not bucket.resource.namespaced:
                continue
            for key in [k for k in bucket.objects if k[0] == name]:
                obj = bucket.objects.get(key)
                if obj is not None and not obj["metadata"].get("deletionTimestamp"):
                    self.delete(bucket.resource, name, key[1], {"gracePeriodSeconds": 0})
        self._finish_namespace(name)

    def _finish_namespace(self, name: str) -> None:
        """Once empty: drop the `kubernetes` finalizer; the namespace goes when none is left."""
        if name not in self._terminating:
            return
        for bucket in self.storage.buckets.values():
            if bucket.resource.namespaced and any(k[0] == name for k in bucket.objects):
                return
        old = self.storage.get(self._namespaces, "", name)
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
            old = self._commit(self._namespaces, new, old, MODIFIED)
        if (old.get("spec") or {}).get("finalizers") or old["metadata"].get("finalizers"):
            return
        self._terminating.discard(name)
        self._remove(self._namespaces, old)

    def finalize_namespace(self, name: str, body: Any) -> dict[str, Any]:
        """PUT namespaces/{name}/finalize: only `spec.finalizers` of the body is taken."""
        old = self.get(self._namespaces, "", name)
        obj = self._check_type(self._namespaces, body)
        finalizers = (obj.get("spec") or {}).get("finalizers") or []
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        spec = {k: v for k, v in (old.get("spec") or {}).items() if k != "finalizers"}
        if finalizers:
            spec["finalizers"] = list(finalizers)
        new["spec"] = spec
        if new == old:
            return old
        committed = self._commit(self._namespaces, new, old, MODIFIED)
        self._schedule(lambda: self._finish_namespace(name))
        return committed
