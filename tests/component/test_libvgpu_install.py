"""Host install of libvgpu.so / ld.so.preload / the lock dir, in a temp host dir."""

from __future__ import annotations

import io
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from libvgpu.elf import MACHINE_NAMES
from libvgpu.install import InstallSettings, LibraryInstallError, install_libvgpu, run_install

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is needed to build an ELF")


def build_shared_object(directory: Path, name: str, body: str) -> Path:
    source = directory / f"{name}.c"
    source.write_text(body)
    output = directory / f"{name}.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(output), str(source)], check=True, capture_output=True
    )
    return output


@pytest.fixture
def library(tmp_path: Path) -> Path:
    return build_shared_object(tmp_path, "libvgpu", "int vgpu_version(void) { return 1; }\n")


def settings_for(tmp_path: Path, source: Path) -> InstallSettings:
    return InstallSettings(
        source_library=str(source),
        host_dir=str(tmp_path / "host" / "usr" / "local" / "vgpu"),
        container_library_path="/usr/local/vgpu/libvgpu.so",
        lock_dir=str(tmp_path / "host" / "tmp" / "vgpulock"),
    )


def test_first_install_writes_everything(tmp_path, library):
    settings = settings_for(tmp_path, library)
    (tmp_path / "host" / "tmp").mkdir(parents=True)

    result = install_libvgpu(settings)

    assert (result.library_changed, result.preload_changed, result.lock_dir_changed) == (
        True,
        True,
        True,
    )
    assert Path(result.library_path).read_bytes() == library.read_bytes()
    assert Path(result.preload_path).read_text() == "/usr/local/vgpu/libvgpu.so\n"
    assert stat.S_IMODE(os.stat(result.lock_dir).st_mode) == 0o1777
    assert stat.S_IMODE(os.stat(result.library_path).st_mode) == 0o755
    assert not [name for name in os.listdir(settings.host_dir) if name.startswith(".")]


def test_unchanged_rerun_writes_nothing(tmp_path, library):
    settings = settings_for(tmp_path, library)
    (tmp_path / "host" / "tmp").mkdir(parents=True)
    first = install_libvgpu(settings)
    before = {path: os.stat(path) for path in (first.library_path, first.preload_path)}

    second = install_libvgpu(settings)

    assert (second.library_changed, second.preload_changed, second.lock_dir_changed) == (
        False,
        False,
        False,
    )
    for path, old in before.items():
        new = os.stat(path)
        assert (new.st_ino, new.st_mtime_ns, new.st_ctime_ns) == (
            old.st_ino,
            old.st_mtime_ns,
            old.st_ctime_ns,
        )


def test_changed_library_is_replaced_atomically(tmp_path, library):
    settings = settings_for(tmp_path, library)
    (tmp_path / "host" / "tmp").mkdir(parents=True)
    first = install_libvgpu(settings)
    old_content = Path(first.library_path).read_bytes()
    old_inode = os.stat(first.library_path).st_ino
    newer = build_shared_object(tmp_path, "newer", "int vgpu_version(void) { return 2; }\n")

    with open(first.library_path, "rb") as held_open:
        result = install_libvgpu(settings_for(tmp_path, newer))
        assert held_open.read() == old_content

    assert result.library_changed and not result.preload_changed
    assert os.stat(result.library_path).st_ino != old_inode
    assert Path(result.library_path).read_bytes() == newer.read_bytes()
    assert not [name for name in os.listdir(settings.host_dir) if name.startswith(".")]


def test_preload_follows_the_container_path(tmp_path, library):
    (tmp_path / "host" / "tmp").mkdir(parents=True)
    install_libvgpu(settings_for(tmp_path, library))
    moved = InstallSettings(
        **{**settings_for(tmp_path, library).__dict__, "container_library_path": "/hami/lib.so"}
    )
    result = install_libvgpu(moved)
    assert result.preload_changed and not result.library_changed
    assert Path(result.preload_path).read_text() == "/hami/lib.so\n"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        (b"#!/bin/sh\necho not a library\n", "not an ELF"),
        (b"\x7fELF", "not an ELF"),
    ],
)
def test_missing_or_non_elf_source_is_refused(tmp_path, content, message):
    source = tmp_path / "libvgpu.so"
    if content is not None:
        source.write_bytes(content)
    settings = settings_for(tmp_path, source)
    with pytest.raises(LibraryInstallError, match=message):
        install_libvgpu(settings)
    assert not os.path.exists(settings.host_dir)


def test_elf_executable_is_refused(tmp_path):
    source = tmp_path / "main.c"
    source.write_text("int main(void) { return 0; }\n")
    executable = tmp_path / "main"
    subprocess.run(
        ["gcc", "-no-pie", "-o", str(executable), str(source)], check=True, capture_output=True
    )
    with pytest.raises(LibraryInstallError, match="not a shared object"):
        install_libvgpu(settings_for(tmp_path, executable))


def test_lock_path_that_is_a_file_is_refused(tmp_path, library):
    settings = settings_for(tmp_path, library)
    Path(settings.lock_dir).parent.mkdir(parents=True)
    Path(settings.lock_dir).write_text("")
    with pytest.raises(LibraryInstallError, match="not a directory"):
        install_libvgpu(settings)


def test_run_install_reports_and_returns_exit_codes(tmp_path, library):
    (tmp_path / "host" / "tmp").mkdir(parents=True)
    out, err = io.StringIO(), io.StringIO()
    assert run_install(settings_for(tmp_path, library), out, err) == 0
    assert out.getvalue().count("updated") == 3
    assert run_install(settings_for(tmp_path, tmp_path / "missing.so"), out, err) == 1
    assert "does not exist" in err.getvalue()


def test_position_independent_executable_is_refused(tmp_path):
    source = tmp_path / "main.c"
    source.write_text("int main(void) { return 0; }\n")
    executable = tmp_path / "main"
    subprocess.run(
        ["gcc", "-fPIE", "-pie", "-o", str(executable), str(source)],
        check=True,
        capture_output=True,
    )
    settings = settings_for(tmp_path, executable)

    with pytest.raises(LibraryInstallError, match="is an executable, not a shared library"):
        install_libvgpu(settings)
    assert not os.path.exists(settings.host_dir)


def test_library_for_another_machine_is_refused(tmp_path, library):
    content = bytearray(library.read_bytes())
    host_machine = int.from_bytes(content[18:20], "little")
    other = 183 if host_machine != 183 else 62
    content[18:20] = other.to_bytes(2, "little")
    foreign = tmp_path / "foreign.so"
    foreign.write_bytes(bytes(content))
    settings = settings_for(tmp_path, foreign)

    with pytest.raises(LibraryInstallError, match=f"e_machine {other}") as raised:
        install_libvgpu(settings)
    assert f"this host runs {MACHINE_NAMES[host_machine]} (e_machine {host_machine}" in str(
        raised.value
    )
    assert not os.path.exists(settings.host_dir)


def test_corrected_lock_dir_mode_is_reported_as_a_change(tmp_path, library):
    settings = settings_for(tmp_path, library)
    os.makedirs(settings.lock_dir, mode=0o755)
    os.chmod(settings.lock_dir, 0o755)

    corrected = install_libvgpu(settings)
    again = install_libvgpu(settings)

    assert corrected.lock_dir_changed
    assert stat.S_IMODE(os.stat(settings.lock_dir).st_mode) == 0o1777
    assert not again.lock_dir_changed


def test_host_dir_that_is_a_file_is_refused(tmp_path, library):
    settings = settings_for(tmp_path, library)
    Path(settings.host_dir).parent.mkdir(parents=True)
    Path(settings.host_dir).write_text("")

    with pytest.raises(LibraryInstallError, match="exists and is not a directory"):
        install_libvgpu(settings)
