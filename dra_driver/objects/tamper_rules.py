"""Containers that could lift a libvgpu share from inside their pod, found without I/O.

libvgpu is user space: its limits hold only while the container cannot replace the
library, its preload list, the shared regions or the lock files. A privileged
container or one with CAP_SYS_ADMIN can remount the read-only preload list; a
hostPath over the host's libvgpu, cache or lock directories (or mounted over the
container's preload list) reaches them directly. One rule for every caller: the
DRA prepare's second line now, admission later.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ADMIN_CAPABILITIES = frozenset({"SYS_ADMIN", "CAP_SYS_ADMIN", "ALL"})
CONTAINER_KINDS = ("initContainers", "containers", "ephemeralContainers")


@dataclass(frozen=True, slots=True)
class GuardedPaths:
    host: tuple[str, ...]
    """Host directories and files a hostPath volume must not overlap."""

    container: tuple[str, ...]
    """Container paths a hostPath volume must not be mounted over."""


@dataclass(frozen=True, slots=True)
class TamperFinding:
    container: str
    field: str
    """The pod spec field that allows it, e.g. `spec.containers[1].securityContext`."""

    reason: str


def tamper_findings(pod: Mapping[str, Any], guarded: GuardedPaths) -> list[TamperFinding]:
    """Every container of the pod that could reach around libvgpu, and how."""
    spec = pod.get("spec") or {}
    host_paths = _host_paths(spec)
    findings = []
    for field, container in _containers(spec):
        name = str(container.get("name", ""))
        findings += [
            TamperFinding(name, where, why)
            for where, why in _container_findings(field, container, host_paths, guarded)
        ]
    return findings


def _container_findings(
    field: str,
    container: Mapping[str, Any],
    host_paths: Mapping[str, str],
    guarded: GuardedPaths,
) -> Iterator[tuple[str, str]]:
    security = container.get("securityContext") or {}
    if security.get("privileged") is True:
        yield (
            f"{field}.securityContext.privileged",
            "a privileged container can remount libvgpu's read-only preload list",
        )
    added = {str(c).upper() for c in (security.get("capabilities") or {}).get("add") or []}
    if added & ADMIN_CAPABILITIES:
        yield (
            f"{field}.securityContext.capabilities.add",
            "CAP_SYS_ADMIN can remount libvgpu's read-only preload list",
        )
    for index, mount in enumerate(container.get("volumeMounts") or []):
        host = host_paths.get(str(mount.get("name", "")))
        if host is None:
            continue
        if reaches(host, guarded.host) or reaches(
            str(mount.get("mountPath", "")), guarded.container
        ):
            yield (
                f"{field}.volumeMounts[{index}]",
                f"hostPath {host} mounted at {mount.get('mountPath')} reaches libvgpu's "
                "library, preload list, shared regions or locks",
            )


def reaches(path: str, guarded: Sequence[str]) -> bool:
    """Whether `path` is one of `guarded`, inside one or above one: `/` or `/usr/local`
    reaches `/usr/local/vgpu`. A relative path counts from `/`, as the runtime resolves a
    mount destination against the container's root."""
    path = "/" + posixpath.normpath(path).lstrip("/")
    targets = [posixpath.normpath(other) for other in guarded]
    return any(posixpath.commonpath([path, other]) in (path, other) for other in targets)


def _host_paths(spec: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(volume.get("name", "")): str(volume["hostPath"].get("path", ""))
        for volume in spec.get("volumes") or []
        if isinstance(volume.get("hostPath"), Mapping)
    }


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for kind in CONTAINER_KINDS:
        for index, container in enumerate(spec.get(kind) or []):
            yield f"spec.{kind}[{index}]", container
