"""`dra-driver install-libvgpu` as an operator runs it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", "install-libvgpu", *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_missing_library_is_refused_and_nothing_is_written(tmp_path: Path):
    host = tmp_path / "host"
    completed = run(
        "--source",
        str(tmp_path / "nope.so"),
        "--host-dir",
        str(host),
        "--lock-dir",
        str(tmp_path / "lock"),
    )
    assert completed.returncode == 1
    assert "nope.so" in completed.stderr
    assert not (host / "libvgpu.so").exists()


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a shared object")
def test_installs_then_reports_nothing_to_do(tmp_path: Path):
    source = tmp_path / "x.c"
    source.write_text("int vgpu_probe(void) { return 1; }\n")
    library = tmp_path / "libvgpu.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    args = (
        "--source",
        str(library),
        "--host-dir",
        str(tmp_path / "host"),
        "--lock-dir",
        str(tmp_path / "lock"),
    )
    first = run(*args)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "host" / "libvgpu.so").read_bytes() == library.read_bytes()
    assert (tmp_path / "host" / "ld.so.preload").read_text() == "/usr/local/vgpu/libvgpu.so\n"
    inode = (tmp_path / "host" / "libvgpu.so").stat().st_ino
    second = run(*args)
    assert second.returncode == 0
    assert (tmp_path / "host" / "libvgpu.so").stat().st_ino == inode


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a shared object")
def test_host_dir_that_is_a_file_is_a_clear_error_not_a_traceback(tmp_path: Path):
    source = tmp_path / "x.c"
    source.write_text("int vgpu_probe(void) { return 1; }\n")
    library = tmp_path / "libvgpu.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    host_dir = tmp_path / "vgpu"
    host_dir.write_text("")

    completed = run(
        "--source", str(library), "--host-dir", str(host_dir), "--lock-dir", str(tmp_path / "lock")
    )

    assert completed.returncode == 1
    assert completed.stderr == (
        f"install-libvgpu: host directory {host_dir} exists and is not a directory\n"
    )


@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc to build a shared object")
def test_corrected_lock_dir_mode_prints_updated(tmp_path: Path):
    source = tmp_path / "x.c"
    source.write_text("int vgpu_probe(void) { return 1; }\n")
    library = tmp_path / "libvgpu.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(library), str(source)], check=True)
    lock = tmp_path / "lock"
    args = ("--source", str(library), "--host-dir", str(tmp_path / "host"), "--lock-dir", str(lock))
    assert run(*args).returncode == 0
    lock.chmod(0o700)

    completed = run(*args)

    assert completed.returncode == 0
    assert f"{lock}: updated" in completed.stdout.splitlines()
