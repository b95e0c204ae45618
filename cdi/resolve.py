"""What a container gets from a set of CDI device ids: the runtime's merge of spec edits.

It follows the reference Go library containerd and CRI-O use
(tags.cncf.io/container-device-interface, `pkg/cdi`): every qualified id
resolves to one device of the loaded specs; the spec-wide edits of a spec are
taken once, when its first device is met, and each device's own edits after
them; the merged edits then apply in order: env by key (the last value wins),
device nodes and mounts by container path (the last one wins). Pure: the
caller loads the specs, so the simulator and the tests' runtime check share it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.errors import InvalidParameterError


class UnresolvableDeviceError(InvalidParameterError):
    """A qualified id that no loaded spec defines."""

    def __init__(self, missing: Sequence[str]) -> None:
        super().__init__("cdiDevices", f"unresolvable CDI devices {', '.join(missing)}")


@dataclass(frozen=True)
class ResolvedMount:
    host_path: str
    options: tuple[str, ...]


@dataclass
class ResolvedEdits:
    """The parts of a container's OCI spec that CDI edits."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: dict[str, str] = field(default_factory=dict)
    """Container path -> host path."""
    mounts: dict[str, ResolvedMount] = field(default_factory=dict)
    """Container path -> source."""


@dataclass(frozen=True)
class SpecDevice:
    """One device of a loaded spec; `source` names the spec (its file) for messages."""

    source: str
    spec: Mapping[str, Any]
    device: Mapping[str, Any]


def qualified_id(spec: Mapping[str, Any], device: Mapping[str, Any]) -> str:
    return f"{spec['kind']}={device['name']}"


def index_devices(specs: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, SpecDevice]:
    """Qualified id -> device, over `(source, spec)` pairs in priority order (later wins)."""
    registry: dict[str, SpecDevice] = {}
    for source, spec in specs:
        for device in spec.get("devices") or []:
            registry[qualified_id(spec, device)] = SpecDevice(source, spec, device)
    return registry


def ordered_edits(
    qualified: Sequence[str], registry: Mapping[str, SpecDevice]
) -> list[Mapping[str, Any]]:
    """The edits to apply, in the runtime's order: each spec's common edits before its devices."""
    missing = [name for name in qualified if name not in registry]
    if missing:
        raise UnresolvableDeviceError(missing)
    edits: list[Mapping[str, Any]] = []
    specs_seen: set[str] = set()
    for name in qualified:
        resolved = registry[name]
        if resolved.source not in specs_seen:
            specs_seen.add(resolved.source)
            edits.append(resolved.spec.get("containerEdits") or {})
        edits.append(resolved.device.get("containerEdits") or {})
    return edits


def merge_edits(edits: Iterable[Mapping[str, Any]]) -> ResolvedEdits:
    merged = ResolvedEdits()
    for edit in edits:
        for entry in edit.get("env") or []:
            key, _, value = entry.partition("=")
            merged.env[key] = value
        for node in edit.get("deviceNodes") or []:
            merged.device_nodes.pop(node["path"], None)
            merged.device_nodes[node["path"]] = node.get("hostPath") or node["path"]
        for mount in edit.get("mounts") or []:
            merged.mounts.pop(mount["containerPath"], None)
            merged.mounts[mount["containerPath"]] = ResolvedMount(
                mount["hostPath"], tuple(mount.get("options") or ())
            )
    return merged


def resolve_container(
    qualified: Sequence[str], registry: Mapping[str, SpecDevice]
) -> ResolvedEdits:
    """What a container started with these CDI ids gets."""
    return merge_edits(ordered_edits(qualified, registry))
