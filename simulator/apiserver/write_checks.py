"""The checks a write passes before it is stored, and the object it then stores: pure.

Owns what kube-apiserver's generic registry decides about one request without
touching storage: the body is an object of the URL's type and namespace, the delete
options and `dryRun` are ones the server accepts, preconditions hold, metadata and
the type's own rules validate, and an update or a status write yields the object
with server-owned metadata kept. cluster.py acts on these answers; this module may
call only the emulator's errors, apply, registry and validation modules.
"""

from __future__ import annotations

from typing import Any

from dra_driver.objects.api_time import api_time

from .apply import record_update
from .errors import ApiError, Target, bad_request, invalid_object, not_supported
from .registry import ResourceType
from .validation import validate_metadata

POLICIES = ("Foreground", "Background", "Orphan")
DELETE_OPTIONS = Target("meta.k8s.io", "deleteoptions", "DeleteOptions")
USER_META = ("labels", "annotations", "finalizers", "ownerReferences")
"""Metadata a client sets; a status write takes it too, unless its type ignores metadata there."""
SERVER_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
)
"""Metadata only the server sets; a client's values are dropped or replaced by the stored ones."""
_OMITTED_WHEN_EMPTY = ("data", "binaryData")


def target(resource: ResourceType, name: str) -> Target:
    """What an error names: the resource's group, plural and kind, and the object."""
    return Target(resource.group, resource.plural, resource.kind, name)


def _spec_part(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def omit_empty_maps(obj: dict[str, Any]) -> None:
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


def check_type(resource: ResourceType, body: Any) -> dict[str, Any]:
    """A shallow copy of the body as `resource`'s kind; a wrong kind or version is a 400."""
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


def check_namespace(resource: ResourceType, namespace: str, meta: dict[str, Any]) -> None:
    """The URL's namespace in the metadata (none for a cluster-scoped type); another is a 400."""
    if not resource.namespaced:
        meta.pop("namespace", None)
        return
    if meta.get("namespace") not in (None, "", namespace):
        raise bad_request(
            "the namespace of the provided object does not match the namespace sent on the request"
        )
    meta["namespace"] = namespace


def validate_write(
    resource: ResourceType,
    obj: dict[str, Any],
    old: dict[str, Any] | None,
    status_only: bool,
) -> None:
    """Metadata and the type's rules (only the status rules for a status write); 422 if not."""
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


def check_preconditions(
    resource: ResourceType, meta: dict[str, Any], preconditions: dict[str, Any]
) -> None:
    """A delete's uid and resourceVersion preconditions, with the server's 409 wording."""
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


def runs_on_node(pod: dict[str, Any]) -> bool:
    """A bound pod that has not finished: deleting it waits for its grace period."""
    phase = (pod.get("status") or {}).get("phase")
    return bool((pod.get("spec") or {}).get("nodeName")) and phase not in (
        "Succeeded",
        "Failed",
    )


def updated_object(
    resource: ResourceType,
    old: dict[str, Any],
    obj: dict[str, Any],
    subresource: str,
    manager: str,
) -> dict[str, Any]:
    """The object an update stores: a status write takes the status and the client-set
    metadata (only the status where the type ignores metadata there); a main write takes
    all but server-owned metadata and the status, and bumps the generation on a spec change."""
    old_meta = old["metadata"]
    if subresource == "status":
        new = dict(old)
        new["metadata"] = dict(old_meta)
        if not resource.status_keeps_metadata:
            for key in USER_META:
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
        for key in SERVER_META:
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
    return new
