"""Claim spec files in the CDI directory, replaced atomically and removed idempotently.

A runtime may read the directory at any moment (containerd and CRI-O watch
it), so a spec appears whole or not at all: it is written to a hidden temp
file whose suffix runtimes ignore, flushed, renamed over the final name, and
the directory is flushed so the rename survives a crash. Writing is split in
`stage` and `commit` because that is where a crash can fall: a staged file
never becomes visible, and `sweep_temp_files` clears what a crash left.

The calls block briefly on local files; callers on an event loop may run
them in a thread.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from cdi.naming import (
    DEFAULT_CDI_DIR,
    TEMP_FILE_SUFFIX,
    ClaimUID,
    claim_uid_of_spec_file,
    is_temp_file_name,
    spec_file_name,
    temp_file_prefix,
    validate_claim_uid,
)
from cdi.spec import CdiSpec
from cdi.validate import validate_claim_spec

SPEC_FILE_MODE = 0o644
"""Runtimes (root, but possibly another user under rootless setups) must read the spec."""

CDI_DIR_MODE = 0o755


@dataclass(frozen=True, slots=True)
class StagedSpec:
    """A spec flushed to its temp file, not yet visible to runtimes."""

    claim_uid: ClaimUID
    temp_path: Path
    final_path: Path


def _fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def _write_all(descriptor: int, content: bytes) -> None:
    view = memoryview(content)
    while view:
        view = view[os.write(descriptor, view) :]


class CdiSpecWriter:
    """Owns the driver's spec files in one CDI directory, and only those."""

    def __init__(self, cdi_dir: Path = DEFAULT_CDI_DIR) -> None:
        self.cdi_dir = cdi_dir

    def spec_path(self, claim_uid: str) -> Path:
        return self.cdi_dir / spec_file_name(claim_uid)

    def _ensure_directory(self) -> None:
        if self.cdi_dir.is_dir():
            return
        self.cdi_dir.mkdir(mode=CDI_DIR_MODE, parents=True, exist_ok=True)
        self.cdi_dir.chmod(CDI_DIR_MODE)

    def stage(self, spec: CdiSpec) -> StagedSpec:
        """Validates the spec and flushes it to a temp file beside its final name."""
        claim_uid = validate_claim_uid(spec.claim_uid)
        final_path = self.spec_path(claim_uid)
        validate_claim_spec(spec)
        content = spec.to_json().encode()
        self._ensure_directory()
        temp_name = f"{temp_file_prefix(claim_uid)}{secrets.token_hex(8)}{TEMP_FILE_SUFFIX}"
        temp_path = self.cdi_dir / temp_name
        descriptor = os.open(temp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SPEC_FILE_MODE)
        try:
            try:
                os.fchmod(descriptor, SPEC_FILE_MODE)
                _write_all(descriptor, content)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        except BaseException:
            temp_path.unlink(missing_ok=True)
            raise
        return StagedSpec(claim_uid, temp_path, final_path)

    def commit(self, staged: StagedSpec) -> Path:
        """Makes a staged spec visible under its final name, durably."""
        os.replace(staged.temp_path, staged.final_path)
        _fsync_directory(self.cdi_dir)
        return staged.final_path

    def write_claim_spec(self, spec: CdiSpec) -> Path:
        """Writes or replaces the claim's spec; readers see the old file or the new one."""
        return self.commit(self.stage(spec))

    def remove_claim_spec(self, claim_uid: str) -> None:
        """Removes the claim's spec; a spec that is already gone is not an error."""
        path = self.spec_path(claim_uid)
        try:
            path.unlink()
        except FileNotFoundError:
            return
        _fsync_directory(self.cdi_dir)

    def list_claim_specs(self) -> list[ClaimUID]:
        """Claims with a spec file here, for clean-up after a crash; other files are ignored."""
        try:
            entries = list(os.scandir(self.cdi_dir))
        except FileNotFoundError:
            return []
        uids = (
            claim_uid_of_spec_file(entry.name)
            for entry in entries
            if entry.is_file(follow_symlinks=False)
        )
        return sorted(uid for uid in uids if uid is not None)

    def sweep_temp_files(self) -> list[Path]:
        """Removes temp files a crashed write left; call it before this process writes specs."""
        try:
            entries = list(os.scandir(self.cdi_dir))
        except FileNotFoundError:
            return []
        removed = []
        for entry in entries:
            if is_temp_file_name(entry.name) and entry.is_file(follow_symlinks=False):
                path = Path(entry.path)
                path.unlink(missing_ok=True)
                removed.append(path)
        return sorted(removed)
