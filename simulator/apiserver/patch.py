"""The three patch formats the real server accepts for built-in types.

Merge functions never mutate their inputs: stored objects are shared with
in-flight responses and watch events, so a patch always builds a new tree.
"""

from __future__ import annotations

import copy
from typing import Any

# Lists the driver and its stand-ins patch, merged by key as the Go types'
# `patchMergeKey` tags say; every other list is replaced whole.
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "conditions": "type",
    "reservedFor": "uid",
    "ownerReferences": "uid",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "addresses": "type",
    "resourceClaims": "name",
}
# Lists of scalars with `patchStrategy:"merge"`: merged as sets.
SET_LISTS = frozenset({"finalizers"})
_DIRECTIVE_PREFIXES = ("$setElementOrder/", "$retainKeys")
_DELETE_FROM = "$deleteFromPrimitiveList/"


class PatchError(ValueError):
    """The patch cannot be applied; `code` is the HTTP status the real server answers."""

    def __init__(self, message: str, code: int = 422) -> None:
        super().__init__(message)
        self.code = code


def json_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = json_merge_patch(result.get(key), value)
    return result


_DELETED = object()


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes strategic merge patch for the lists named in MERGE_KEYS / SET_LISTS."""
    merged = _merge_map(target if isinstance(target, dict) else {}, patch)
    return {} if merged is _DELETED else merged


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _merge_map(original: dict[str, Any], patch: Any) -> Any:
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", 400)
    directive = patch.get("$patch")
    if directive == "delete":
        return _DELETED
    if directive == "replace":
        return _strip(patch)
    if directive is not None:
        raise PatchError(f"Unknown patch type: {directive}", 400)
    result = dict(original)
    removals: list[tuple[str, list[Any]]] = []
    for key, value in patch.items():
        if key == "$patch" or key.startswith(_DIRECTIVE_PREFIXES):
            continue
        if key.startswith(_DELETE_FROM):
            removals.append((key[len(_DELETE_FROM) :], value or []))
        elif value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            current = result.get(key)
            merged = _merge_map(current if isinstance(current, dict) else {}, value)
            if merged is _DELETED:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            result[key] = value
    for key, values in removals:
        if isinstance(result.get(key), list):
            result[key] = [item for item in result[key] if item not in values]
    return result


def _merge_list(key: str, original: Any, patch: list[Any]) -> list[Any]:
    """New items go before the existing ones, as on the real server (finalizers `[b]` onto
    `[a]` give `[b, a]`); items already there are merged in place."""
    current = original if isinstance(original, list) else []
    if key in SET_LISTS:
        return [item for item in patch if item not in current] + current
    merge_key = MERGE_KEYS.get(key)
    if merge_key is None or not all(isinstance(item, dict) for item in patch):
        return _strip(patch)
    if any(item.get("$patch") == "replace" for item in patch):
        return [_strip(item) for item in patch if item.get("$patch") != "replace"]
    result = list(current)
    added: list[Any] = []
    for item in patch:
        if merge_key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {merge_key}", 400)
        index = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, dict) and old.get(merge_key) == item[merge_key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if index is not None:
                del result[index]
        elif index is None:
            added.append(_strip(item))
        else:
            result[index] = _merge_map(result[index], item)
    return added + result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}", 400)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    parts = _pointer(path)
    if not parts:
        raise PatchError(f"cannot operate on the whole document: {path!r}")
    node = doc
    for part in parts[:-1]:
        node = _child(node, part, path)
    return node, parts[-1]


def _child(node: Any, part: str, path: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise PatchError(f'doc is missing path: "{path}": missing value')


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        node = _child(node, part, path)
    return node


def _add(doc: Any, path: str, value: Any) -> None:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else _index(last, len(parent) + 1, path)
        parent.insert(index, value)
    else:
        raise PatchError(f'doc is missing path: "{path}": missing value')


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(last, len(parent), path))
    raise PatchError(f'doc is missing path: "{path}": missing value')


def _index(part: str, bound: int, path: str) -> int:
    if not part.isdigit() or int(part) >= bound:
        raise PatchError(f'unable to access invalid index: "{path}"')
    return int(part)


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a copy of target: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise PatchError("json patch must be a JSON array of operations", 400)
    doc = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"invalid json patch operation: {operation!r}", 400)
        op, path = operation["op"], operation["path"]
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"missing value for {op} operation at {path!r}", 400)
        if op == "add":
            _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            _remove(doc, path)
        elif op == "replace":
            _remove(doc, path)
            _add(doc, path, copy.deepcopy(operation["value"]))
        elif op == "move":
            _add(doc, path, _remove(doc, operation.get("from", "")))
        elif op == "copy":
            _add(doc, path, copy.deepcopy(_get(doc, operation.get("from", ""))))
        elif op == "test":
            try:
                current = _get(doc, path)
            except PatchError:
                current = _DELETED
            if current != operation["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise PatchError(f"Unexpected kind: {op}", 400)
    return doc
