"""Discovery documents built from the registry, so clients and kubectl find every served type."""

from __future__ import annotations

from typing import Any

from .registry import ALL_VERBS, Registry

VERSION_INFO: dict[str, str] = {
    "major": "1",
    "minor": "36",
    "gitVersion": "v1.36.2",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-07-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}


_SUBRESOURCES: dict[str, dict[str, Any]] = {
    "binding": {"kind": "Binding", "verbs": ["create"]},
    "eviction": {"group": "policy", "version": "v1", "kind": "Eviction", "verbs": ["create"]},
    "finalize": {"verbs": ["update"]},
}
"""How a subresource differs from `<plural>/status` in discovery, as the real server lists it."""


def core_versions(server_address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}
        ],
    }


def _group(registry: Registry, name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in registry.groups[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list(registry: Registry) -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(registry, name) for name in registry.groups if name],
    }


def group(registry: Registry, name: str) -> dict[str, Any] | None:
    if not name or name not in registry.groups:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(registry, name)}


def resource_list(registry: Registry, group_name: str, version: str) -> dict[str, Any] | None:
    served = registry.in_group_version(group_name, version)
    if not served:
        return None
    resources: list[dict[str, Any]] = []
    for r in served:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(ALL_VERBS),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        resources.append(entry)
        for sub in sorted(r.subresources):
            entry = {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": ["get", "patch", "update"],
            }
            entry.update(_SUBRESOURCES.get(sub, {}))
            resources.append(entry)
    group_version = f"{group_name}/{version}" if group_name else version
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": resources,
    }
