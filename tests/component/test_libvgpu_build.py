"""deploy/libvgpu/build-libvgpu.sh builds HAMi-core's libvgpu.so on a machine without a GPU.

Needs HAMi-core's source (`HAMI_CORE_SRC`, e.g. a checkout at the pinned commit),
CUDA headers (`CUDA_HOME`, default /usr/local/cuda), cmake and a C compiler; the
build fetches nvml.h from the nvidia-nvml-dev wheel when CUDA_HOME lacks it.
Skipped with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from libvgpu.install import check_shared_object, host_elf_identity

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "libvgpu" / "build-libvgpu.sh"


def _skip_reason() -> str | None:
    source = os.environ.get("HAMI_CORE_SRC", "")
    if not source or not (Path(source) / "CMakeLists.txt").is_file():
        return "HAMI_CORE_SRC does not point at HAMi-core's source"
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    if not (cuda / "include" / "cuda.h").is_file():
        return f"no CUDA headers under {cuda}"
    missing = [tool for tool in ("cmake", "make", "cc", "nm") if shutil.which(tool) is None]
    return f"missing {', '.join(missing)}" if missing else None


@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_the_script_builds_a_shared_library_that_hooks_dlsym(tmp_path: Path):
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPT), str(tmp_path / "out")],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    library = Path(done.stdout.strip().splitlines()[-1])
    assert library == tmp_path / "out" / "libvgpu.so"
    check_shared_object(str(library), host_elf_identity())
    exported = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert "dlsym" in exported, "libvgpu intercepts CUDA and NVML through its dlsym"
