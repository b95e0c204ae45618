"""Creating and removing cache directories on the host.

Removing a directory that is still bind-mounted into a running container
leaves that container with a dangling mount (volcano-vgpu-device-plugin#138),
so removal first looks for the directory in the mount tables of every process
it can see (`/proc/[0-9]*/mountinfo`, which needs hostPID to include other
pods' containers) and refuses while any mount exposes it. The directory is
located in those tables by (filesystem device, path inside the filesystem),
worked out from our own mountinfo, because paths differ between namespaces.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import shutil
import stat
import uuid
from dataclasses import dataclass

from dra_driver.errors import DriverError
from libvgpu.cache_paths import CLAIMS_DIR, CONTAINERS_DIR, CacheLocation, owner_dir_key
from libvgpu.mountinfo import filesystem_location, mounts_exposing, parse_mountinfo
from libvgpu.settings import LibvgpuPaths


class CacheDirError(DriverError):
    """A cache directory could not be created or removed safely."""


class CacheDirInUseError(CacheDirError):
    """The directory is still mounted into some process; removing it would strand that mount."""


@dataclass(frozen=True)
class CacheDirSettings:
    self_mountinfo: str = "/proc/self/mountinfo"
    """Our own mount table, used to find the directory's filesystem and inner path."""

    mountinfo_glob: str = "/proc/[0-9]*/mountinfo"
    """Mount tables searched for users of the directory; tests point this at fixture files."""

    dir_mode: int = 0o777
    """Mode of a claim/container dir: libvgpu creates its file as the container's (any) UID."""

    parent_mode: int = 0o711
    """Mode of `claims/` and `containers/`: traversable, not listable by other users."""


def new_cache_nonce() -> str:
    """A fresh file name stem, so a re-created region never inherits old limits."""
    return uuid.uuid4().hex


def _mkdir(path: str, mode: int) -> None:
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, mode)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise CacheDirError(f"{path} exists and is not a directory")
    if stat.S_IMODE(info.st_mode) != mode:
        os.chmod(path, mode)


def ensure_cache_parents(paths: LibvgpuPaths, settings: CacheDirSettings) -> None:
    os.makedirs(paths.cache_root, exist_ok=True)
    for area in (CLAIMS_DIR, CONTAINERS_DIR):
        _mkdir(os.path.join(paths.cache_root, area), settings.parent_mode)


def create_cache_dir(
    location: CacheLocation, paths: LibvgpuPaths, settings: CacheDirSettings
) -> None:
    """Create the directory (kept if it exists: a repeated prepare reuses it)."""
    _owned_dir(location.host_dir, paths)
    ensure_cache_parents(paths, settings)
    _mkdir(location.host_dir, settings.dir_mode)


def cache_dir_users(host_dir: str, settings: CacheDirSettings) -> list[str]:
    """Mount tables (paths) that expose the directory; empty means nothing mounts it."""
    with open(settings.self_mountinfo, encoding="utf-8", errors="surrogateescape") as handle:
        location = filesystem_location(parse_mountinfo(handle.read()), os.path.abspath(host_dir))
    if location is None:
        raise CacheDirError(f"{host_dir} is on no mount listed in {settings.self_mountinfo}")
    device, inner = location
    users = []
    for table in sorted(glob.glob(settings.mountinfo_glob)):
        try:
            with open(table, encoding="utf-8", errors="surrogateescape") as handle:
                text = handle.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        except OSError as error:
            if error.errno in (errno.EINVAL, errno.ESRCH):
                continue  # the process exited while its table was being read
            raise CacheDirError(f"cannot read {table} to check {host_dir}: {error}") from error
        if mounts_exposing(parse_mountinfo(text), device, inner):
            users.append(table)
    return users


def remove_cache_dir(host_dir: str, paths: LibvgpuPaths, settings: CacheDirSettings) -> bool:
    """Remove the directory unless it is mounted somewhere; False when it was already gone."""
    _owned_dir(host_dir, paths)
    try:
        info = os.lstat(host_dir)
    except FileNotFoundError:
        return False
    if not stat.S_ISDIR(info.st_mode):
        raise CacheDirError(f"{host_dir} is not a directory")
    users = cache_dir_users(host_dir, settings)
    if users:
        raise CacheDirInUseError(f"{host_dir} is still mounted (seen in {', '.join(users)})")
    shutil.rmtree(host_dir)
    return True


def _owned_dir(host_dir: str, paths: LibvgpuPaths) -> None:
    if os.path.normpath(host_dir) != host_dir or owner_dir_key(paths.cache_root, host_dir) is None:
        raise CacheDirError(f"{host_dir} is not a claim or container dir under {paths.cache_root}")
