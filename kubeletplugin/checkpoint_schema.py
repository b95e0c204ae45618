"""What a checkpoint file promises to the releases before and after the one that wrote it.

The kubelet plugin's checkpoint (`checkpoint`) and its journal
(`checkpoint_journal`) outlive the process that wrote them: an upgrade hands
them to the next release, a rollback to the previous one. So the format has a
rule, kept by every release from 0.1.0 on:

- **Fixed forever:** the envelope `{"checksum": sha256(canonical data), "data": {...}}`
  and `data.version`, the schema version. Any release can always tell a file it
  cannot read from a damaged one, and say which version it found.
- **Added without a bump:** new keys in `data` (the body) and in a claim's
  record. 0.1.0 ignores both, and so does every later reader. The body's
  `writer` (the release that wrote the file, e.g. `0.2.0`) is such a key.
  A key added this way must stay true when an older release carries it over
  unchanged while changing everything else, because that is what an older
  release does with it.
- **Needs a bump:** a new key in a `devices[]` or `mig[]` entry (0.1.0 builds
  those entries with `PreparedDevice(**entry)` / `MigRecord(**entry)` and fails
  on any key it does not know), a new value of `state`, a key whose absence
  would make an older reader do something wrong, any change of meaning of an
  existing key, and any change of the journal's line format. Once 0.1.0 is
  more than one release behind (the supported downgrade), `devices[]` and
  `mig[]` entries may grow without a bump as well: from the release after
  0.1.0 on, readers keep unknown keys at every level.
- **Unknown keys are kept:** this reader keeps every key it does not know (the
  body's in `Checkpoint.unknown`, a record's, device's or MIG entry's in its
  own `unknown`) and writes them back as read, so a release that rewrites a
  newer release's file never drops what it does not understand.
- **A newer version is refused:** a file whose `data.version` is above what
  this release reads raises `CheckpointTooNewError`, naming the file, the
  version, the release that wrote it and the versions read here; a damaged
  one raises `CheckpointCorruptError`. Neither is ever replaced by an empty
  checkpoint: the plugin refuses to work instead (`state_refusal`).

The journal has no version of its own: a line is appended only by the process
that wrote the snapshot it names (after a load the first store rewrites the
snapshot), so the snapshot's version is the journal's.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.version import build_info

CHECKPOINT_VERSION = 1
"""The schema version this release writes; bumped only for a change older readers cannot read."""

READABLE_VERSIONS = (1,)
"""Every schema version this release reads; a later release migrates older ones on load."""

VERSION_KEY = "version"
WRITER_KEY = "writer"
"""The body key naming the release that wrote the file; absent in files of 0.1.0."""

NO_UNKNOWN: Mapping[str, Any] = MappingProxyType({})
"""The `unknown` of a record read with no unknown key, or made by this release."""


def no_unknown() -> Mapping[str, Any]:
    """The default of every `unknown` field (a shared, read-only empty mapping)."""
    return NO_UNKNOWN


UPGRADING_DOC = "docs/upgrading.md"


def this_release() -> str:
    """The release of the running code (`writer`), from the package metadata."""
    return build_info().version


class CheckpointError(DriverError):
    """The checkpoint (or its journal) exists but cannot be used; `path` names the file."""

    reason = "corrupt"
    """The `reason` label of `vgpu_dra_state_refused`."""

    def __init__(self, path: Path | str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = str(path)


class CheckpointCorruptError(CheckpointError):
    """Truncated, not JSON, a checksum that does not match, a key missing or of the wrong
    type: the file was damaged or edited after it was written."""


class CheckpointTooNewError(CheckpointError):
    """Written by a newer release in a schema version this release does not read."""

    reason = "newer_version"

    def __init__(self, path: Path | str, version: int, writer: str | None) -> None:
        self.version = version
        self.writer = writer
        by = f"release {writer}" if writer else "a newer release"
        target = writer or "the release that wrote it"
        super().__init__(
            path,
            f"schema version {version}, written by {by}; this release ({this_release()}) "
            f"reads {readable_versions_text()}. Nothing on this node is prepared, unprepared "
            f"or cleaned up until the kubelet plugin is rolled forward to {target} or later "
            f"(see {UPGRADING_DOC}); the file is left as it is",
        )


def readable_versions_text() -> str:
    versions = ", ".join(str(v) for v in READABLE_VERSIONS)
    return f"schema version{'s' if len(READABLE_VERSIONS) > 1 else ''} {versions}"


def corrupt_problem(problem: str) -> str:
    """`problem` and what an operator does about it."""
    return (
        f"{problem}. Nothing on this node is prepared, unprepared or cleaned up until the "
        f"file is restored or removed (see {UPGRADING_DOC}); the file is left as it is"
    )


def check_version(body: Mapping[str, Any], path: Path | str) -> None:
    """Refuse a body whose schema version this release does not read (before its checksum
    is checked: a newer release may check differently, and "too new" is what to say)."""
    version = body.get(VERSION_KEY)
    if isinstance(version, bool) or not isinstance(version, int):
        raise CheckpointCorruptError(
            path, corrupt_problem(f"data.version is {version!r}, not an integer")
        )
    if version > CHECKPOINT_VERSION:
        writer = body.get(WRITER_KEY)
        raise CheckpointTooNewError(path, version, writer if isinstance(writer, str) else None)
    if version not in READABLE_VERSIONS:
        raise CheckpointCorruptError(
            path,
            corrupt_problem(
                f"schema version {version}, which no release wrote "
                f"(this release reads {readable_versions_text()})"
            ),
        )


def split_known(
    data: Mapping[str, Any], known: frozenset[str]
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """`data`'s keys this release knows, and the others (kept to be written back)."""
    if data.keys() <= known:
        return data, NO_UNKNOWN
    return (
        {key: value for key, value in data.items() if key in known},
        MappingProxyType({key: value for key, value in data.items() if key not in known}),
    )
