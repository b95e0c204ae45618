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
