"""Parsing `/proc/<pid>/mountinfo`, to tell whether a host directory is bind-mounted somewhere.

A container's bind mount lives in the container's mount namespace, so it shows
up in the mountinfo of the container's processes, not in ours. What identifies
it across namespaces is the pair (filesystem device, root within that
filesystem): fields 3 and 4 of a mountinfo line.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable
from dataclasses import dataclass

_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class MountEntry:
    device: str
    """`major:minor` of the mounted filesystem."""

    root: str
    """Path inside that filesystem that is mounted (a bind mount's source)."""

    mount_point: str


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Entries of a mountinfo file; malformed lines are skipped (the kernel never writes them)."""
    entries = []
    for line in text.splitlines():
        fields = line.split(" ")
        if len(fields) < 10 or "-" not in fields[6:]:
            continue
        entries.append(MountEntry(fields[2], _unescape(fields[3]), _unescape(fields[4])))
    return entries


def _is_within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def filesystem_location(entries: Iterable[MountEntry], path: str) -> tuple[str, str] | None:
    """(device, path inside its filesystem) of an absolute path, from our own mount table."""
    path = posixpath.normpath(path)
    best: MountEntry | None = None
    for entry in entries:
        if _is_within(path, entry.mount_point) and (
            best is None or len(entry.mount_point) >= len(best.mount_point)
        ):
            best = entry
    if best is None:
        return None
    tail = posixpath.relpath(path, best.mount_point)
    inner = best.root if tail == "." else posixpath.join(best.root, tail)
    return best.device, posixpath.normpath(inner)


def mounts_exposing(
    entries: Iterable[MountEntry], device: str, inner_path: str
) -> list[MountEntry]:
    """Mounts whose source is the directory or something inside it (not a parent of it)."""
    return [
        entry
        for entry in entries
        if entry.device == device and _is_within(posixpath.normpath(entry.root), inner_path)
    ]
