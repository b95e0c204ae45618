"""REST semantics over the storage: create, update, patch, delete, bind, list.

This is what kube-apiserver's generic registry does, reduced to what clients can
observe: metadata stamping, optimistic concurrency, status separation, finalizers,
graceful deletion. Cluster is the object API the HTTP layer calls, and the one door
to storage for writes (`commit`, dry-run aware). A write made for an HTTP request
(`request` set) passes the ValidatingAdmissionPolicies (`admit`, admission_policies.py)
once its object is decided and before it is stored; the emulator's own writes do not.
The checks each write passes and the object an update stores are decided in
write_checks.py; the garbage collector (garbage_collector.py) and the namespace
controller (namespace_controller.py) react to deletes through this class. Nothing
here awaits; see store.py for why that matters.
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Callable
from typing import Any

from dra_driver.objects.api_time import api_time

from .admission_policies import PolicyAdmission, RequestContext
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
    required,
)
from .garbage_collector import FOREGROUND, ORPHAN, GarbageCollector
from .listing import list_page
from .namespace_controller import NamespaceController
from .nodes import taint_new_node
from .patch import PatchError, json_merge_patch, json_patch, strategic_merge_patch
from .policy_matching import CREATE, DELETE, UPDATE, GroupVersionKind, Request
from .registry import ResourceType
from .rules import binding_node
from .rules_scheduling import admit_pod_priority, admit_priority_class
from .selectors import FieldTerm, Requirement
from .store import ADDED, DELETED, MODIFIED, Storage
from .write_checks import (
    SERVER_META,
    check_delete_options,
    check_namespace,
    check_preconditions,
    check_type,
    omit_empty_maps,
    runs_on_node,
    target,
    updated_object,
    validate_write,
)

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PATCHERS: dict[str, Callable[[Any, Any], Any]] = {
    JSON_PATCH: json_patch,
    MERGE_PATCH: json_merge_patch,
    STRATEGIC_PATCH: strategic_merge_patch,
}
PATCH_OPTIONS = Target("meta.k8s.io", "patchoptions", "PatchOptions")
BINDING_KIND = GroupVersionKind("", "v1", "Binding")
EVICTION_KIND = GroupVersionKind("policy", "v1", "Eviction")
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class Cluster:
    """The object API the HTTP layer calls; `schedule` runs controller work after the response."""

    def __init__(self, storage: Storage, schedule: Callable[[Callable[[], None]], Any]) -> None:
        self.storage = storage
        self._schedule_now = schedule
        self._namespaces = storage.registry.get("", "v1", "namespaces")
        self._nodes = storage.registry.get("", "v1", "nodes")
        self._pods = storage.registry.get("", "v1", "pods")
        self._priority_classes = storage.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        self.garbage_collector = GarbageCollector(self)
        self.namespaces = NamespaceController(self)
        # Set by the HTTP layer around one `dryRun=All` call: validate, answer, store nothing.
        self.dry_run = False
        # Set by the HTTP layer around one write: who makes it, for the admission policies.
        self.request: RequestContext | None = None
        self.admission = PolicyAdmission(storage, storage.registry)
        storage.on_removed = self._removed

    def schedule(self, callback: Callable[[], None]) -> None:
        """Controller work after the response on the server's loop; none for a dry run."""
        if not self.dry_run:
            self._schedule_now(callback)

    def commit(
        self,
        resource: ResourceType,
        obj: dict[str, Any],
        old: dict[str, Any] | None,
        event_type: str,
    ) -> dict[str, Any]:
        """Every write's one way into storage; a dry run answers the object unstored."""
        omit_empty_maps(obj)
        if self.dry_run:
            if old is not None:
                obj["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
            return obj
        return self.storage.commit(resource, obj, old, event_type)

    def admit(
        self,
        resource: ResourceType,
        operation: str,
        obj: dict[str, Any] | None,
        old: dict[str, Any] | None,
        name: str | None = None,
        kind: GroupVersionKind | None = None,
    ) -> None:
        """The admission policies on this write of the current request: a denial raises,
        warnings go to the request. Nothing for the emulator's own writes or no policy."""
        context = self.request
        if context is None or not self.admission.active():
            return
        meta = (obj if obj is not None else old or {}).get("metadata") or {}
        subject = meta.get("name", "") if name is None else name
        namespace = meta.get("namespace", "")
        if resource is self._namespaces and operation != CREATE:
            namespace = subject
        request = Request(
            resource.group,
            resource.version,
            resource.plural,
            context.subresource,
            kind or GroupVersionKind(resource.group, resource.version, resource.kind),
            operation,
            subject,
            namespace,
            obj,
            old,
            not resource.namespaced,
        )
        self.admission.review(request, context, self.dry_run)

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

    def _stored_priority_classes(self) -> list[dict[str, Any]]:
        """What the Priority plugin's lister sees (nothing where the type is not served)."""
        if self._priority_classes is None:
            return []
        return list(self.storage.bucket(self._priority_classes).objects.values())

    def create(
        self,
        resource: ResourceType,
        namespace: str,
        body: Any,
        manager: str = "",
        managed: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """`manager` (a `fieldManager`) takes every field; `managed` is apply's own record."""
        obj = check_type(resource, body)
        meta = obj["metadata"]
        check_namespace(resource, namespace, meta)
        asked_name = meta.get("name") or ""
        if resource.namespaced:
            self.namespaces.require(
                resource, namespace, meta.get("name") or meta.get("generateName", "")
            )
        bucket = self.storage.bucket(resource)
        if not meta.get("name") and meta.get("generateName"):
            while True:
                name = meta["generateName"] + "".join(random.choices(_SUFFIX_ALPHABET, k=5))
                if (namespace if resource.namespaced else "", name) not in bucket.objects:
                    break
            meta["name"] = name
        for key in (*SERVER_META, "resourceVersion", "managedFields", "selfLink"):
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
        if resource is self._pods:
            admit_pod_priority(obj, asked_name, self._stored_priority_classes())
        if resource.normalize is not None:
            resource.normalize(obj, None)
        validate_write(resource, obj, None, status_only=False)
        if resource is self._priority_classes:
            admit_priority_class(obj, None, self._stored_priority_classes())
        self.admit(resource, CREATE, obj, None, asked_name)
        if (meta.get("namespace", ""), meta["name"]) in bucket.objects:
            raise already_exists(target(resource, meta["name"]))
        return self.commit(resource, obj, None, ADDED)

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
        obj = check_type(resource, body)
        meta = obj["metadata"]
        if meta.get("name") not in (None, name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match "
                f"the name on the URL ({name})"
            )
        check_namespace(resource, namespace, meta)
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
        new = updated_object(resource, old, obj, subresource, manager)
        validate_write(resource, new, old, status_only=subresource == "status")
        if resource is self._priority_classes:
            admit_priority_class(new, old, self._stored_priority_classes())
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        self.admit(resource, UPDATE, new, old)
        if new == old:
            return old
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self.commit(resource, new, old, DELETED)
        return self.commit(resource, new, old, MODIFIED)

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
        obj = check_type(resource, patched)
        check_namespace(resource, namespace, obj["metadata"])
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
        checked = check_type(resource, config)
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
        obj = check_type(resource, merged)
        check_namespace(resource, namespace, obj["metadata"])
        return self._replace(resource, old, obj, subresource)

    def bind(self, namespace: str, name: str, body: Any) -> None:
        pods = self.storage.registry.get("", "v1", "pods")
        binding_target = Target("", "pods/binding", "Binding", name)
        node = binding_node(name, body)
        binding = {**body, "apiVersion": "v1", "kind": "Binding"}
        binding["metadata"] = {**body["metadata"], "namespace": namespace}
        self.admit(pods, CREATE, binding, None, name, BINDING_KIND)
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
        if spec.get("schedulingGates"):
            raise conflict(binding_target, f"pod {name} has non-empty .spec.schedulingGates")
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        new["spec"] = {**spec, "nodeName": node}
        status = dict(old.get("status") or {})
        status.pop("nominatedNodeName", None)
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
        self.commit(pods, new, old, MODIFIED)

    # ---- deletion and finalizers ----------------------------------------------

    def delete(
        self, resource: ResourceType, namespace: str, name: str, options: dict[str, Any]
    ) -> tuple[dict[str, Any], bool]:
        """(the object as last stored, True when it is gone now rather than terminating)."""
        check_delete_options(options)
        old = self.get(resource, namespace, name)
        meta = old["metadata"]
        check_preconditions(resource, meta, options.get("preconditions") or {})
        self.admit(resource, DELETE, None, old)
        policy = options.get("propagationPolicy") or "Background"
        if resource is self._namespaces:
            return self.namespaces.terminate(old), False
        grace = options.get("gracePeriodSeconds")
        if resource.graceful_deletion and runs_on_node(old):
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
            self.schedule(functools.partial(self.garbage_collector.finish_orphaning, meta["uid"]))
        elif (
            policy == "Foreground"
            and self.storage.dependents.get(meta["uid"])
            and FOREGROUND not in finalizers
        ):
            added = [FOREGROUND]
            self.schedule(
                functools.partial(self.garbage_collector.collect, meta["uid"], "Foreground")
            )
        if finalizers or added:
            if meta.get("deletionTimestamp") and not added:
                return old, False
            return self._mark_deleting(resource, old, 0, added), False
        return self.remove(resource, old), True

    def _mark_deleting(
        self, resource: ResourceType, old: dict[str, Any], grace: int, finalizers: list[str]
    ) -> dict[str, Any]:
        new = dict(old)
        meta = new["metadata"] = dict(old["metadata"])
        meta.setdefault("deletionTimestamp", api_time(grace))
        meta["deletionGracePeriodSeconds"] = grace
        if finalizers:
            meta["finalizers"] = [*(meta.get("finalizers") or []), *finalizers]
        return self.commit(resource, new, old, MODIFIED)

    def remove(self, resource: ResourceType, old: dict[str, Any]) -> dict[str, Any]:
        """The object leaves storage now (no finalizer or grace period holds it)."""
        new = dict(old)
        new["metadata"] = dict(old["metadata"])
        if resource.graceful_deletion:
            # Pods answer a delete with the pod itself, stamped as deleted now.
            new["metadata"].setdefault("deletionTimestamp", api_time())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
        return self.commit(resource, new, old, DELETED)

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

    def evict(self, namespace: str, name: str, body: Any = None) -> None:
        """The eviction subresource without disruption budgets: a plain pod delete, which
        the admission policies see as the Eviction's create only (as the real one)."""
        pods = self.storage.registry.get("", "v1", "pods")
        eviction = {**(body if isinstance(body, dict) else {})}
        eviction.update(apiVersion="policy/v1", kind="Eviction")
        eviction["metadata"] = {**(eviction.get("metadata") or {}), "namespace": namespace}
        eviction["metadata"].setdefault("name", name)
        self.admit(pods, CREATE, eviction, None, name, EVICTION_KIND)
        request, self.request = self.request, None
        try:
            self.delete(pods, namespace, name, {})
        finally:
            self.request = request

    def _removed(self, resource: ResourceType, obj: dict[str, Any]) -> None:
        """The storage let an object go: its dependents and its namespace may follow."""
        self.garbage_collector.object_removed(obj)
        self.namespaces.object_removed(obj)
