"""Installing libvgpu.so and ld.so.preload on the host (`dra-driver install-libvgpu`).

Running containers map the host's libvgpu.so, so it is never rewritten in
place: a changed library is written to a temporary file in the same directory,
fsynced and renamed over the old one, and processes that mapped the old file
keep its inode. An unchanged library (same SHA-256) is not touched at all.

Every process in a container preloads the file, so it is checked first (see
`libvgpu.elf`): an ELF shared object, not an executable, built for the
machine this installer runs on. Any refusal or filesystem error is a
`LibraryInstallError` naming the path and the reason, never a traceback.
"""

from __future__ import annotations

import hashlib
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from dra_driver.errors import DriverError
from dra_driver.process.atomic_file import write_atomically
from libvgpu.elf import ET_DYN, ElfFormatError, ElfIdentity, elf_identity, parse_elf
from libvgpu.settings import CONTAINER_LIBRARY_PATH, LIBRARY_NAME, PRELOAD_NAME

RUNNING_EXECUTABLE = "/proc/self/exe"
"""The interpreter running this installer: its ELF identity is the host's."""


class LibraryInstallError(DriverError):
    """The library could not be installed; the message says which file and why."""


@dataclass(frozen=True)
class InstallSettings:
    source_library: str = "/usr/local/lib/hami/libvgpu.so"
    """libvgpu.so inside the driver image (HAMi's DRA image keeps it here)."""

    host_dir: str = "/usr/local/vgpu"
    """Host directory receiving libvgpu.so and ld.so.preload."""

    container_library_path: str = CONTAINER_LIBRARY_PATH
    """What ld.so.preload names: the library's path inside containers."""

    lock_dir: str = "/tmp/vgpulock"
    lock_dir_mode: int = 0o1777
    """World-writable and sticky like /tmp: containers of any UID create their lock in it."""

    library_mode: int = 0o755
    preload_mode: int = 0o644


@dataclass(frozen=True)
class InstallResult:
    library_path: str
    library_changed: bool
    preload_path: str
    preload_changed: bool
    lock_dir: str
    lock_dir_changed: bool
    """Created, or its mode corrected."""


def host_elf_identity() -> ElfIdentity:
    """The ELF identity of the processes on this host (that of the running interpreter)."""
    try:
        with open(RUNNING_EXECUTABLE, "rb") as handle:
            return elf_identity(handle.read(64))
    except (OSError, ElfFormatError) as error:
        raise LibraryInstallError(f"cannot tell this host's machine type: {error}") from error


def check_shared_object(path: str, host: ElfIdentity) -> bytes:
    """The file's bytes, after checking it is an ELF shared library `host` can load."""
    try:
        with open(path, "rb") as handle:
            content = handle.read()
    except FileNotFoundError as error:
        raise LibraryInstallError(f"source library {path} does not exist") from error
    except OSError as error:
        raise LibraryInstallError(f"cannot read source library {path}: {error}") from error
    try:
        elf = parse_elf(content)
    except ElfFormatError as error:
        raise LibraryInstallError(f"source library {path} is not an ELF file: {error}") from error
    if elf.file_type != ET_DYN:
        raise LibraryInstallError(
            f"source library {path} is not a shared object "
            f"(ELF e_type {elf.file_type}, want {ET_DYN})"
        )
    if elf.has_interpreter:
        raise LibraryInstallError(
            f"source library {path} is an executable, not a shared library "
            "(it names a program interpreter, PT_INTERP)"
        )
    if elf.identity != host:
        raise LibraryInstallError(
            f"source library {path} is built for {elf.identity.describe()}; "
            f"this host runs {host.describe()}"
        )
    return content


def _digest_of_file(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()
    except FileNotFoundError:
        return None


def _install_file(path: str, content: bytes, mode: int) -> bool:
    if _digest_of_file(path) == hashlib.sha256(content).hexdigest():
        return False
    write_atomically(Path(path), content, mode)
    return True


def _ensure_lock_dir(path: str, mode: int) -> bool:
    """Create the directory or correct its mode; True if either was needed."""
    changed = False
    try:
        os.mkdir(path, mode)
        changed = True
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise LibraryInstallError(f"lock path {path} exists and is not a directory")
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)
        changed = True
    return changed


def _check_host_dir(path: str) -> None:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise LibraryInstallError(f"host directory {path}: {error.strerror}") from error
    if not stat.S_ISDIR(info.st_mode):
        raise LibraryInstallError(f"host directory {path} exists and is not a directory")


def install_libvgpu(settings: InstallSettings) -> InstallResult:
    """Bring the host's libvgpu files up to date; a no-op when they already are."""
    library = check_shared_object(settings.source_library, host_elf_identity())
    _check_host_dir(settings.host_dir)
    library_path = os.path.join(settings.host_dir, LIBRARY_NAME)
    preload_path = os.path.join(settings.host_dir, PRELOAD_NAME)
    preload = (settings.container_library_path + "\n").encode()
    try:
        os.makedirs(settings.host_dir, exist_ok=True)
        library_changed = _install_file(library_path, library, settings.library_mode)
        preload_changed = _install_file(preload_path, preload, settings.preload_mode)
        lock_changed = _ensure_lock_dir(settings.lock_dir, settings.lock_dir_mode)
    except OSError as error:
        raise LibraryInstallError(f"installing into {settings.host_dir}: {error}") from error
    return InstallResult(
        library_path,
        library_changed,
        preload_path,
        preload_changed,
        settings.lock_dir,
        lock_changed,
    )


def run_install(
    settings: InstallSettings, out: TextIO = sys.stdout, err: TextIO = sys.stderr
) -> int:
    """CLI entry: install, print what changed, return the process exit code."""
    try:
        result = install_libvgpu(settings)
    except LibraryInstallError as error:
        print(f"install-libvgpu: {error}", file=err)
        return 1
    for path, changed in (
        (result.library_path, result.library_changed),
        (result.preload_path, result.preload_changed),
        (result.lock_dir, result.lock_dir_changed),
    ):
        print(f"{path}: {'updated' if changed else 'unchanged'}", file=out)
    return 0
