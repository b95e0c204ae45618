"""Server-side apply, reduced: field ownership per manager, conflicts, force, removal.

What is modelled: each manager owns the leaf fields it applied (maps recurse; a
list is one atomic field), recorded in `metadata.managedFields` in the real
FieldsV1 shape. Applying a field another manager owns with a different value
is a conflict (409) unless `force=true`, which takes the field over. A field a
manager applied before and leaves out of its next apply is removed when nobody
else owns it. Not modelled: keyed merging inside lists, `Update` ownership of
writers that name no field manager. Pure functions: no I/O.
"""

from __future__ import annotations

import copy
from typing import Any

Path = tuple[str, ...]
_IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}
_SERVER_OWNED = ("status", "metadata.managedFields", "metadata.resourceVersion")


class ApplyConflictError(Exception):
    """Fields other managers own with other values: (manager, path) pairs."""

    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        self.conflicts = conflicts
        super().__init__(conflict_message(conflicts))


def dotted(path: Path) -> str:
    return "".join(f".{part}" for part in path)


def conflict_message(conflicts: list[tuple[str, Path]]) -> str:
    """The real server's text: `Apply failed with 1 conflict: conflict with "probe": .data.a`."""
    if len(conflicts) == 1:
        manager, path = conflicts[0]
        return f'Apply failed with 1 conflict: conflict with "{manager}": {dotted(path)}'
    lines = "\n".join(f'- conflict with "{m}": {dotted(p)}' for m, p in conflicts)
    return f"Apply failed with {len(conflicts)} conflicts: \n{lines}"


def leaf_paths(obj: Any, prefix: Path = ()) -> set[Path]:
    """Every leaf field of an applied configuration (a non-empty map is not a leaf)."""
    if isinstance(obj, dict) and obj:
        out: set[Path] = set()
        for key, value in obj.items():
            out |= leaf_paths(value, (*prefix, key))
        return out
    return {prefix} if prefix else set()


def _applied_paths(config: dict[str, Any]) -> set[Path]:
    return {
        p
        for p in leaf_paths(config)
        if p not in _IDENTITY and not any(dotted(p)[1:].startswith(s) for s in _SERVER_OWNED)
    }


def to_fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for part in path:
            node = node.setdefault(f"f:{part}", {})
    return tree


def from_fields_v1(tree: Any, prefix: Path = ()) -> set[Path]:
    if not isinstance(tree, dict) or not tree:
        return {prefix} if prefix else set()
    out: set[Path] = set()
    for key, value in tree.items():
        if key.startswith("f:"):
            out |= from_fields_v1(value, (*prefix, key[2:]))
    return out


def _get(obj: Any, path: Path) -> Any:
    for part in path:
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _set(obj: dict[str, Any], path: Path, value: Any) -> None:
    for part in path[:-1]:
        child = obj.get(part)
        if not isinstance(child, dict):
            child = obj[part] = {}
        obj = child
    obj[path[-1]] = copy.deepcopy(value)


def _remove(obj: dict[str, Any], path: Path) -> None:
    parents = [obj]
    for part in path[:-1]:
        child = parents[-1].get(part)
        if not isinstance(child, dict):
            return
        parents.append(child)
    parents[-1].pop(path[-1], None)
    for depth in range(len(path) - 1, 0, -1):
        if parents[depth]:
            break
        parents[depth - 1].pop(path[depth - 1], None)


def _overlaps(a: Path, b: Path) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def ownership(managed: list[dict[str, Any]]) -> dict[tuple[str, str], set[Path]]:
    """(manager, operation) -> owned paths, from `metadata.managedFields`."""
    return {
        (entry.get("manager", ""), entry.get("operation", "Update")): from_fields_v1(
            entry.get("fieldsV1") or {}
        )
        for entry in managed
    }


def managed_fields(
    owners: dict[tuple[str, str], set[Path]], api_version: str, now: str
) -> list[dict[str, Any]]:
    return [
        {
            "manager": manager,
            "operation": operation,
            "apiVersion": api_version,
            "time": now,
            "fieldsType": "FieldsV1",
            "fieldsV1": to_fields_v1(paths),
        }
        for (manager, operation), paths in owners.items()
        if paths
    ]


def apply(
    current: dict[str, Any] | None,
    config: dict[str, Any],
    manager: str,
    force: bool,
    now: str,
) -> dict[str, Any]:
    """The object after `manager` applies `config` to `current` (None: create)."""
    base: dict[str, Any] = copy.deepcopy(current) if current is not None else {}
    meta = base.setdefault("metadata", {})
    owners = ownership(meta.get("managedFields") or [])
    mine = (manager, "Apply")
    wanted = _applied_paths(config)
    conflicts: set[tuple[str, Path]] = set()
    for (other, _), paths in owners.items():
        if other == manager:
            continue
        for theirs in paths:
            conflicts |= {
                (other, path)
                for path in wanted
                if _overlaps(theirs, path) and _get(base, path) != _get(config, path)
            }
    if conflicts and not force:
        raise ApplyConflictError(sorted(conflicts))
    taken = {path for _, path in conflicts}
    for key, paths in owners.items():
        if key[0] != manager:
            owners[key] = {p for p in paths if not any(_overlaps(p, t) for t in taken)}
    previously = owners.get(mine, set())
    others = set().union(*(p for k, p in owners.items() if k != mine)) if owners else set()
    for path in previously - wanted:
        if not any(_overlaps(path, o) for o in others):
            _remove(base, path)
    for path in wanted:
        _set(base, path, _get(config, path))
    owners[mine] = wanted
    for key in ("apiVersion", "kind"):
        if key in config:
            base[key] = config[key]
    meta = base["metadata"]
    for key in ("name", "namespace"):
        if key in (config.get("metadata") or {}):
            meta[key] = config["metadata"][key]
    meta["managedFields"] = managed_fields(owners, str(base.get("apiVersion", "")), now)
    return base


def record_update(
    old: dict[str, Any], new: dict[str, Any], manager: str, now: str
) -> list[dict[str, Any]]:
    """managedFields after a non-apply write by `manager`: it takes the fields it changed."""
    owners = ownership(old["metadata"].get("managedFields") or [])
    before, after = _applied_paths(old), _applied_paths(new)
    changed = {p for p in before | after if _get(old, p) != _get(new, p)}
    for key, paths in owners.items():
        owners[key] = {p for p in paths if not any(_overlaps(p, c) for c in changed)}
    mine = (manager, "Update")
    owners[mine] = (owners.get(mine, set()) | changed) & after
    return managed_fields(owners, str(new.get("apiVersion", "")), now)
