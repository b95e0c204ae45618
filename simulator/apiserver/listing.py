"""Lists as the real server pages them: one snapshot per walk, versions checked.

Every page of a paginated list shows the cluster as of the first page's
resourceVersion (rebuilt from the watch history: objects created mid-walk are
absent, deleted ones still present), so a walk is consistent until that
history is compacted (410). A resourceVersion from the future is 504; an
`Exact` one older than the history is 410; `limit` is ignored at version 0.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from .conversion import PRESENTERS
from .errors import ApiError, bad_request, gone
from .registry import ResourceType
from .selectors import FieldTerm, Requirement, fields_match, labels_match
from .store import ObjectKey, Storage

EXPIRED_CONTINUE = (
    "The provided continue parameter is too old to display a consistent list result. "
    "You can start a new list without the continue parameter, or use the continue token "
    "in this response to retrieve the remainder of the results. Continuing with the provided "
    "token results in an inconsistent list - objects that were created, modified, or deleted "
    "between the time the first chunk was returned and now may show up in the list."
)
MATCHES = ("", "Exact", "NotOlderThan")


def _same(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def list_page(
    storage: Storage,
    resource: ResourceType,
    namespace: str | None,
    labels: tuple[Requirement, ...],
    fields: tuple[FieldTerm, ...],
    limit: int = 0,
    token: str = "",
    version: str = "",
    match: str = "",
) -> dict[str, Any]:
    """One page of `resource` in `namespace` (all when None) matching the selectors."""
    storage.bucket(resource).compact()
    objects, list_rv, start = _source(storage, resource, token, version, match)
    if version == "0" and not token:
        limit = 0
    keys = sorted(
        (k for k in objects if namespace is None or k[0] == namespace),
        key=lambda k: f"{k[0]}/{k[1]}",
    )
    present = PRESENTERS.get(resource.key) or _same
    items: list[dict[str, Any]] = []
    meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
    matching = (
        obj
        for key in keys
        if f"{key[0]}/{key[1]}" > start
        and labels_match(labels, obj := present(objects[key]))
        and fields_match(fields, obj)
    )
    for obj in matching:
        if limit and len(items) == limit:
            last = items[-1]["metadata"]
            meta["continue"] = _encode_continue(
                list_rv, f"{last.get('namespace', '')}/{last['name']}"
            )
            if not labels and not fields:
                meta["remainingItemCount"] = 1 + sum(1 for _ in matching)
            break
        items.append(obj)
    return {
        "kind": f"{resource.kind}List",
        "apiVersion": resource.group_version,
        "metadata": meta,
        "items": items,
    }


def _source(
    storage: Storage, resource: ResourceType, token: str, version: str, match: str
) -> tuple[dict[ObjectKey, dict[str, Any]], int, str]:
    """(objects, the list's resourceVersion, the key to continue after)."""
    bucket = storage.bucket(resource)
    if token:
        if version:
            raise bad_request("specifying resource version is not allowed when using continue")
        list_rv, start = _decode_continue(token)
        snapshot = bucket.snapshot(list_rv) if list_rv <= storage.rv else None
        if snapshot is None:
            raise gone(EXPIRED_CONTINUE)
        return snapshot, list_rv, start
    if match not in MATCHES:
        raise bad_request(
            f'resourceVersionMatch: Unsupported value: "{match}": '
            'supported values: "Exact", "NotOlderThan"'
        )
    if match and not version:
        raise bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
    if not version:
        return bucket.objects, storage.rv, ""
    wanted = _resource_version(version)
    if wanted > storage.rv:
        raise too_large(wanted, storage.rv)
    if match != "Exact":
        return bucket.objects, storage.rv, ""
    snapshot = bucket.snapshot(wanted)
    if snapshot is None:
        raise gone("The resourceVersion for the provided list is too old.")
    return snapshot, wanted, ""


def too_large(wanted: int, current: int) -> ApiError:
    """What a list or watch from a resourceVersion the server has not reached yet gets."""
    return ApiError(
        504,
        f"Timeout: Too large resource version: {wanted}, current: {current}",
        details={
            "causes": [
                {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
            ],
            "retryAfterSeconds": 1,
        },
        retry_after=1,
    )


def _resource_version(text: str) -> int:
    try:
        value = int(text)
    except ValueError as error:
        raise bad_request(
            f'resourceVersion: Invalid value: "{text}": must be an integer'
        ) from error
    if value < 0:
        raise bad_request(f'resourceVersion: Invalid value: "{text}": must not be negative')
    return value


def _encode_continue(list_rv: int, start: str) -> str:
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": list_rv, "start": start})
    return base64.urlsafe_b64encode(raw.encode()).decode()


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(data["rv"]), str(data["start"])
    except (ValueError, KeyError, TypeError, binascii.Error) as error:
        raise bad_request(f"continue key is not valid: {error}") from error
