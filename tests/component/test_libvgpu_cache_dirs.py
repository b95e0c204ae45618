"""Cache dir creation and in-use-aware removal, with mountinfo fixture files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from libvgpu.cache_dirs import (
    CacheDirError,
    CacheDirInUseError,
    CacheDirSettings,
    create_cache_dir,
    new_cache_nonce,
    remove_cache_dir,
)
from libvgpu.cache_paths import claim_cache_location, legacy_cache_location
from libvgpu.settings import LibvgpuPaths

CLAIM_UID = "6f1d2b9e-7c1a-4d5e-8f90-123456789abc"
POD_UID = "aa1d2b9e-7c1a-4d5e-8f90-123456789abc"


@pytest.fixture
def env(tmp_path: Path):
    root = tmp_path / "vgpu"
    tables = tmp_path / "proc"
    tables.mkdir()
    # Our namespace sees the host's /var/lib/vgpu (device 8:1) at `root`.
    own = tables / "self-mountinfo"
    own.write_text(
        "22 1 0:20 / / rw - overlay overlay rw\n"
        f"41 22 8:1 /var/lib/vgpu {root} rw,relatime - ext4 /dev/sda1 rw\n"
    )
    (tables / "1").mkdir()
    (tables / "1" / "mountinfo").write_text(own.read_text())
    settings = CacheDirSettings(
        self_mountinfo=str(own), mountinfo_glob=str(tables / "[0-9]*" / "mountinfo")
    )
    return LibvgpuPaths(cache_root=str(root)), settings, tables


def mount_into_container(tables: Path, pid: int, source_inside_fs: str) -> None:
    (tables / str(pid)).mkdir()
    (tables / str(pid) / "mountinfo").write_text(
        "500 400 0:90 / / rw - overlay overlay rw\n"
        f"501 500 8:1 {source_inside_fs} /usr/local/vgpu/x rw,nosuid,nodev - ext4 /dev/sda1 rw\n"
    )


def test_create_makes_a_writable_dir_with_tight_parents(env):
    paths, settings, _ = env
    location = claim_cache_location(paths, CLAIM_UID, new_cache_nonce())

    create_cache_dir(location, paths, settings)
    create_cache_dir(location, paths, settings)

    assert stat.S_IMODE(os.stat(location.host_dir).st_mode) == 0o777
    assert stat.S_IMODE(os.stat(os.path.dirname(location.host_dir)).st_mode) == 0o711


def test_nonces_are_fresh_and_valid(env):
    paths, _, _ = env
    first, second = new_cache_nonce(), new_cache_nonce()
    assert first != second
    claim_cache_location(paths, CLAIM_UID, first)


def test_unmounted_dir_is_removed(env):
    paths, settings, _ = env
    location = legacy_cache_location(paths, POD_UID, "main", new_cache_nonce())
    create_cache_dir(location, paths, settings)
    Path(location.host_file).write_bytes(b"region")

    assert remove_cache_dir(location.host_dir, paths, settings) is True
    assert not os.path.exists(location.host_dir)
    assert remove_cache_dir(location.host_dir, paths, settings) is False


def test_dir_mounted_into_a_container_is_kept(env):
    paths, settings, tables = env
    location = claim_cache_location(paths, CLAIM_UID, new_cache_nonce())
    create_cache_dir(location, paths, settings)
    mount_into_container(tables, 4242, f"/var/lib/vgpu/claims/{CLAIM_UID}")

    with pytest.raises(CacheDirInUseError, match="4242"):
        remove_cache_dir(location.host_dir, paths, settings)
    assert os.path.isdir(location.host_dir)

    (tables / "4242" / "mountinfo").unlink()
    (tables / "4242").rmdir()
    assert remove_cache_dir(location.host_dir, paths, settings) is True


def test_mount_of_a_file_inside_the_dir_counts_as_in_use(env):
    paths, settings, tables = env
    location = claim_cache_location(paths, CLAIM_UID, new_cache_nonce())
    create_cache_dir(location, paths, settings)
    mount_into_container(tables, 77, f"/var/lib/vgpu/claims/{CLAIM_UID}/{location.file_name}")
    with pytest.raises(CacheDirInUseError):
        remove_cache_dir(location.host_dir, paths, settings)


def test_mount_of_a_sibling_or_parent_does_not_block_removal(env):
    paths, settings, tables = env
    location = claim_cache_location(paths, CLAIM_UID, new_cache_nonce())
    create_cache_dir(location, paths, settings)
    mount_into_container(tables, 78, "/var/lib/vgpu")
    mount_into_container(tables, 79, f"/var/lib/vgpu/claims/{CLAIM_UID}x")
    assert remove_cache_dir(location.host_dir, paths, settings) is True


@pytest.mark.parametrize(
    "directory",
    [
        "/etc",
        "{root}",
        "{root}/claims",
        "{root}/claims/not-a-uid",
        "{root}/claims/" + CLAIM_UID + "/..",
    ],
)
def test_paths_outside_the_naming_scheme_are_refused(env, directory):
    paths, settings, _ = env
    with pytest.raises(CacheDirError):
        remove_cache_dir(directory.format(root=paths.cache_root), paths, settings)


def test_symlinked_cache_dir_is_not_followed(env, tmp_path):
    paths, settings, _ = env
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("x")
    location = claim_cache_location(paths, CLAIM_UID, new_cache_nonce())
    os.makedirs(os.path.dirname(location.host_dir))
    os.symlink(victim, location.host_dir)
    with pytest.raises(CacheDirError):
        remove_cache_dir(location.host_dir, paths, settings)
    with pytest.raises(CacheDirError):
        create_cache_dir(location, paths, settings)
    assert (victim / "keep").exists()


def test_dir_on_no_known_mount_is_refused(env, tmp_path):
    paths, settings, _ = env
    location = claim_cache_location(paths, CLAIM_UID, new_cache_nonce())
    create_cache_dir(location, paths, settings)
    Path(settings.self_mountinfo).write_text("")
    with pytest.raises(CacheDirError, match="no mount"):
        remove_cache_dir(location.host_dir, paths, settings)
