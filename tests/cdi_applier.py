"""A small CDI applier: what a container runtime does with the CDI ids kubelet
hands it, so tests see the container a spec would really give.

It follows the reference Go library containerd and CRI-O use
(tags.cncf.io/container-device-interface, `pkg/cdi`): specs are loaded from
every `*.json` / `*.yaml` in the spec dirs (a later dir wins a name both
define); each qualified id resolves to one device; the spec-wide edits of a
spec are appended once, when its first device is met, and each device's own
edits after them; then the merged edits are applied in order: env by key,
last value wins in the first key's place; device nodes and mounts by
container path, last one wins. Every device node is `lstat`ed on the host
(`failed to stat CDI host device`) and must be a char, block or FIFO node;
every bind-mount source must exist, as runc requires at container start.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

SPEC_SUFFIXES = (".json", ".yaml")


class CdiApplyError(Exception):
    """What the runtime would refuse, in its words where it has them."""


@dataclass(frozen=True)
class AppliedMount:
    host_path: str
    options: tuple[str, ...]


@dataclass
class AppliedContainer:
    """The parts of the OCI spec that CDI edits."""

    env: dict[str, str] = field(default_factory=dict)
    device_nodes: dict[str, str] = field(default_factory=dict)
    """Container path -> host path."""
    mounts: dict[str, AppliedMount] = field(default_factory=dict)
    """Container path -> source."""


@dataclass(frozen=True)
class _Resolved:
    spec_path: Path
    spec: Mapping[str, Any]
    device: Mapping[str, Any]


def read_spec(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def is_spec_file(path: Path) -> bool:
    return path.suffix in SPEC_SUFFIXES and path.is_file()


def qualified_ids(spec: Mapping[str, Any]) -> list[str]:
    return [f"{spec['kind']}={device['name']}" for device in spec.get("devices") or []]


def _registry(spec_dirs: Sequence[Path]) -> dict[str, _Resolved]:
    registry: dict[str, _Resolved] = {}
    for directory in spec_dirs:
        in_this_dir: dict[str, Path] = {}
        paths = sorted(directory.iterdir()) if directory.is_dir() else []
        for path in filter(is_spec_file, paths):
            spec = read_spec(path)
            for device in spec.get("devices") or []:
                qualified = f"{spec['kind']}={device['name']}"
                if qualified in in_this_dir:
                    raise CdiApplyError(
                        f"conflicting device {qualified} (specs {in_this_dir[qualified]}, {path})"
                    )
                in_this_dir[qualified] = path
                registry[qualified] = _Resolved(path, spec, device)
    return registry


def _is_device_node(path: str) -> bool:
    mode = os.lstat(path).st_mode
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)


def _apply(edits: Iterable[Mapping[str, Any]], container: AppliedContainer) -> None:
    merged: list[Mapping[str, Any]] = list(edits)
    for entry in (e for edit in merged for e in edit.get("env") or []):
        key, _, value = entry.partition("=")
        container.env[key] = value
    for node in (n for edit in merged for n in edit.get("deviceNodes") or []):
        host = node.get("hostPath") or node["path"]
        try:
            if not _is_device_node(host):
                raise CdiApplyError(f'failed to stat CDI host device "{host}": not a device node')
        except OSError as error:
            raise CdiApplyError(f'failed to stat CDI host device "{host}": {error}') from None
        container.device_nodes.pop(node["path"], None)
        container.device_nodes[node["path"]] = host
    for mount in (m for edit in merged for m in edit.get("mounts") or []):
        container.mounts.pop(mount["containerPath"], None)
        container.mounts[mount["containerPath"]] = AppliedMount(
            mount["hostPath"], tuple(mount.get("options") or ())
        )
    for target, mount in container.mounts.items():
        if not os.path.exists(mount.host_path):
            raise CdiApplyError(
                f"error mounting {mount.host_path!r} to rootfs at {target!r}: "
                "no such file or directory"
            )


def apply_devices(qualified: Sequence[str], spec_dirs: Sequence[Path]) -> AppliedContainer:
    """Inject the devices into an empty container, as the runtime would."""
    registry = _registry(spec_dirs)
    unresolved = [name for name in qualified if name not in registry]
    if unresolved:
        raise CdiApplyError(f"unresolvable CDI devices {', '.join(unresolved)}")
    edits: list[Mapping[str, Any]] = []
    specs_seen: set[Path] = set()
    for name in qualified:
        resolved = registry[name]
        if resolved.spec_path not in specs_seen:
            specs_seen.add(resolved.spec_path)
            edits.append(resolved.spec.get("containerEdits") or {})
        edits.append(resolved.device.get("containerEdits") or {})
    container = AppliedContainer()
    _apply(edits, container)
    return container


def apply_each_device(spec: Mapping[str, Any]) -> None:
    """Inject each device of one spec alone (its spec-wide edits, then its own)."""
    for device in spec.get("devices") or []:
        _apply([spec.get("containerEdits") or {}, device["containerEdits"]], AppliedContainer())


class SpecWriteWatch:
    """Applies every CDI spec this process writes, at the moment it is written.

    Writers replace a spec atomically (`os.replace` of a temp file), so an
    audit hook on `os.rename` sees each spec before it becomes visible, while
    every host path it names must already exist, and without any change to
    the writer. Problems are collected, never raised inside the hook (that
    would fail the writer's rename instead of the test).
    """

    def __init__(self) -> None:
        self.active = False
        self.applied: list[Path] = []
        self.problems: list[str] = []

    def install(self) -> None:
        sys.addaudithook(self._hook)

    def start(self) -> None:
        self.applied, self.problems, self.active = [], [], True

    def stop(self) -> list[str]:
        self.active = False
        return self.take_problems()

    def take_problems(self) -> list[str]:
        problems, self.problems = self.problems, []
        return problems

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "os.rename" or not self.active:
            return
        source, target = (os.fsdecode(arg) for arg in args[:2])
        if not target.endswith(SPEC_SUFFIXES):
            return
        try:
            spec = read_spec(Path(source))
            if not isinstance(spec, Mapping) or "cdiVersion" not in spec:
                return
            apply_each_device(spec)
        except CdiApplyError as error:
            self.problems.append(f"{target}: {error}")
        except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as error:
            self.problems.append(f"{target}: unreadable as a CDI spec: {error!r}")
        else:
            self.applied.append(Path(target))
