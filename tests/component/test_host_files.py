"""The host-file check both node plugins run before handing out libvgpu's mounts
(DRA prepare, device plugin Allocate), on real files: the preload list must name
the library where containers see it, read as glibc's loader reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeletplugin.host_files import HostSetupError, check_libvgpu_files, preload_entries
from libvgpu.settings import CONTAINER_LIBRARY_PATH, LibvgpuPaths


def installed(root: Path, preload: str) -> LibvgpuPaths:
    """A host dir as install-libvgpu leaves it, with the given preload list."""
    (root / "vgpu").mkdir()
    (root / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF")
    (root / "vgpu" / "ld.so.preload").write_text(preload)
    (root / "lock").mkdir()
    return LibvgpuPaths(host_dir=str(root / "vgpu"), lock_dir=str(root / "lock"))


def test_a_preload_list_naming_the_host_path_is_refused(tmp_path: Path) -> None:
    """What a --vgpu-dir other than the default produced: the list names the host
    path, which does not exist in the container, so libvgpu is never loaded."""
    paths = installed(tmp_path, f"{tmp_path}/vgpu/libvgpu.so\n")
    with pytest.raises(HostSetupError) as refused:
        check_libvgpu_files(paths, with_preload=True)
    assert str(refused.value) == (
        f"libvgpu preload list {tmp_path}/vgpu/ld.so.preload names "
        f"{tmp_path}/vgpu/libvgpu.so, not /usr/local/vgpu/libvgpu.so where containers see "
        "libvgpu.so, so the library would never be loaded and no limit would hold; run "
        "`dra-driver install-libvgpu` on this node (the plugin's init container does) with "
        "its default --container-library-path"
    )


def test_an_empty_preload_list_is_refused(tmp_path: Path) -> None:
    paths = installed(tmp_path, "# nothing preloaded\n")
    with pytest.raises(HostSetupError, match=r"names nothing, not /usr/local/vgpu/libvgpu\.so"):
        check_libvgpu_files(paths, with_preload=True)


def test_a_container_without_control_does_not_read_the_preload_list(tmp_path: Path) -> None:
    check_libvgpu_files(installed(tmp_path, "/elsewhere.so\n"), with_preload=False)


@pytest.mark.parametrize(
    "preload",
    [
        f"{CONTAINER_LIBRARY_PATH}\n",
        f"{CONTAINER_LIBRARY_PATH}",
        f"# HAMi-core\n/lib/other.so:{CONTAINER_LIBRARY_PATH}\n",
        f"/lib/other.so\t{CONTAINER_LIBRARY_PATH} # enforced\n",
    ],
)
def test_a_preload_list_naming_the_container_path_passes(tmp_path: Path, preload: str) -> None:
    check_libvgpu_files(installed(tmp_path, preload), with_preload=True)


def test_preload_entries_split_like_the_loader() -> None:
    text = "/a.so /b.so:/c.so\t/d.so\n# /commented.so\n/e.so#/f.so\n\n"
    assert preload_entries(text) == ["/a.so", "/b.so", "/c.so", "/d.so", "/e.so"]
