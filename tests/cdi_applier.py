"""A small CDI applier: what a container runtime does with the CDI ids kubelet
hands it, so tests see the container a spec would really give.

Specs are loaded from every `*.json` / `*.yaml` in the spec dirs (a later dir
wins a name both define), as the reference Go library containerd and CRI-O
use does (tags.cncf.io/container-device-interface, `pkg/cdi`); ids are
resolved and edits merged by `cdi.resolve`, the same code the simulator
shows. Then the host is checked as the runtime checks it: every device node
is `lstat`ed (`failed to stat CDI host device`) and must be a char, block or
FIFO node, and every bind-mount source must exist, as runc requires at
container start.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from cdi.resolve import (
    ResolvedEdits,
    SpecDevice,
    UnresolvableDeviceError,
    index_devices,
    merge_edits,
    qualified_id,
    resolve_container,
)

SPEC_SUFFIXES = (".json", ".yaml")


class CdiApplyError(Exception):
    """What the runtime would refuse, in its words where it has them."""


def read_spec(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


def is_spec_file(path: Path) -> bool:
    return path.suffix in SPEC_SUFFIXES and path.is_file()


def load_specs(spec_dirs: Sequence[Path]) -> dict[str, SpecDevice]:
    """Every device of every spec file, by qualified id; a later dir wins, while
    two files of one dir defining the same device is a conflict."""
    loaded: list[tuple[str, Mapping[str, Any]]] = []
    for directory in spec_dirs:
        in_this_dir: dict[str, str] = {}
        paths = sorted(directory.iterdir()) if directory.is_dir() else []
        for path in filter(is_spec_file, paths):
            spec = read_spec(path)
            for device in spec.get("devices") or []:
                name = qualified_id(spec, device)
                if name in in_this_dir:
                    raise CdiApplyError(
                        f"conflicting device {name} (specs {in_this_dir[name]}, {path})"
                    )
                in_this_dir[name] = str(path)
            loaded.append((str(path), spec))
    return index_devices(loaded)


def _is_device_node(path: str) -> bool:
    mode = os.lstat(path).st_mode
    return stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISFIFO(mode)


def check_host(edits: ResolvedEdits) -> ResolvedEdits:
    """What the runtime and runc look for on the host before the container starts."""
    for host in edits.device_nodes.values():
        try:
            if not _is_device_node(host):
                raise CdiApplyError(f'failed to stat CDI host device "{host}": not a device node')
        except OSError as error:
            raise CdiApplyError(f'failed to stat CDI host device "{host}": {error}') from None
    for target, mount in edits.mounts.items():
        if not os.path.exists(mount.host_path):
            raise CdiApplyError(
                f"error mounting {mount.host_path!r} to rootfs at {target!r}: "
                "no such file or directory"
            )
    return edits


def apply_devices(qualified: Sequence[str], spec_dirs: Sequence[Path]) -> ResolvedEdits:
    """Inject the devices into an empty container, as the runtime would."""
    try:
        edits = resolve_container(qualified, load_specs(spec_dirs))
    except UnresolvableDeviceError as error:
        raise CdiApplyError(error.reason) from None
    return check_host(edits)


def container_env(
    own_env: Mapping[str, str], qualified: Sequence[str], spec_dirs: Sequence[Path]
) -> dict[str, str]:
    """The env a container ends with: its own (kubelet's merge of `env` and `envFrom`),
    then the CDI edits. The CDI library applies env through runtime-tools' generator
    (`AddMultipleProcessEnv` -> `addEnv`), which replaces the entry of a name the
    spec already holds, so a spec's value wins over the pod's."""
    return {**own_env, **apply_devices(qualified, spec_dirs).env}


def apply_each_device(spec: Mapping[str, Any]) -> None:
    """Inject each device of one spec alone (its spec-wide edits, then its own)."""
    for device in spec.get("devices") or []:
        check_host(merge_edits([spec.get("containerEdits") or {}, device["containerEdits"]]))


def apply_spec_files(directory: Path) -> int:
    """Apply each device of every spec in `directory` (specs another process
    wrote, which the in-process watch cannot see); returns how many specs."""
    paths = [p for p in sorted(directory.iterdir()) if is_spec_file(p)]
    for path in paths:
        apply_each_device(read_spec(path))
    return len(paths)


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
