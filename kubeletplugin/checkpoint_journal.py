"""The checkpoint's journal: the changes since the last full snapshot, appended.

With hundreds of claims prepared, rewriting the whole checkpoint (and fsyncing
it) twice per prepare makes prepare slower the more the node holds. Past a
size, the checkpoint file keeps its snapshot and each store appends one line
to `<checkpoint>.journal` with what changed (records put, uids deleted), then
fsyncs it; the snapshot is rewritten (and the journal dropped) once the
journal outgrows it. Each line is `<sha256 hex> <canonical JSON>` and names
the snapshot it applies to by its checksum, so a journal left from before a
newer snapshot is ignored. A store is one line written with one write, so a
crash can tear only the last line: that one is ignored (its store never
returned), any other line that does not check out is corruption.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.errors import DriverError


class JournalError(DriverError):
    """A journal line other than the last does not check out."""


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One store's changes: records by uid (as JSON objects), uids deleted."""

    put: dict[str, dict[str, Any]]
    delete: tuple[str, ...]


def journal_line(base_checksum: str, puts: list[bytes], deletes: list[str]) -> bytes:
    """One line; `puts` are `"<uid>":{record}` members in canonical JSON."""
    body = (
        b'{"base":'
        + json.dumps(base_checksum).encode()
        + b',"delete":'
        + json.dumps(sorted(deletes), separators=(",", ":")).encode()
        + b',"put":{'
        + b",".join(puts)
        + b"}}"
    )
    return hashlib.sha256(body).hexdigest().encode() + b" " + body + b"\n"


def _entry(line: bytes, base_checksum: str) -> JournalEntry | None:
    """The line's entry; None when it does not check out or names another snapshot."""
    checksum, _, body = line.partition(b" ")
    if hashlib.sha256(body).hexdigest().encode() != checksum:
        return None
    try:
        data = json.loads(body)
        if data["base"] != base_checksum:
            return None
        return JournalEntry(dict(data["put"]), tuple(data["delete"]))
    except (ValueError, KeyError, TypeError):
        return None


def read_journal(raw: bytes, base_checksum: str) -> list[JournalEntry]:
    """The entries that apply to the snapshot with `base_checksum`, in order.

    A journal of another snapshot (its first line names another checksum) is
    stale: nothing of it applies."""
    lines = raw.split(b"\n")
    if lines and not lines[-1]:
        lines.pop()
    entries = []
    for number, line in enumerate(lines):
        entry = _entry(line, base_checksum)
        if entry is not None:
            entries.append(entry)
            continue
        if number == 0 and _names_other_snapshot(line, base_checksum):
            return []
        if number == len(lines) - 1:
            break
        raise JournalError(
            f"checkpoint journal line {number + 1} of {len(lines)} is corrupt (its checksum "
            "or JSON does not check out, and only the last line can be torn by a crash)"
        )
    return entries


def _names_other_snapshot(line: bytes, base_checksum: str) -> bool:
    checksum, _, body = line.partition(b" ")
    if hashlib.sha256(body).hexdigest().encode() != checksum:
        return False
    try:
        return json.loads(body)["base"] != base_checksum
    except (ValueError, KeyError, TypeError):
        return False


def append_durably(path: Path, data: bytes, mode: int) -> None:
    """Append `data` and fsync it; a new file's directory entry is fsynced too."""
    created = not path.exists()
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        written = 0
        while written < len(data):
            written += os.write(descriptor, data[written:])
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    if created:
        fsync_directory(path.parent)


def remove_durably(path: Path) -> bool:
    """Remove `path` and fsync its directory; False when it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    fsync_directory(path.parent)
    return True


def fsync_directory(directory: Path) -> None:
    """Make the directory's entries (a file created, renamed or removed) durable."""
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
