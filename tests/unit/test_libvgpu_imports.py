"""The pure libvgpu modules stay importable without the monitor's heavy dependencies."""

from __future__ import annotations

import subprocess
import sys

PURE_MODULES = [
    "libvgpu",
    "libvgpu.settings",
    "libvgpu.cache_paths",
    "libvgpu.container_edits",
    "libvgpu.mountinfo",
    "libvgpu.region_layout",
    "libvgpu.owners",
]
HEAVY = ["prometheus_client", "aiohttp", "pynvml", "watchfiles", "kubernetes", "grpc"]


def test_pure_modules_import_nothing_heavy():
    script = (
        "import importlib, sys\n"
        f"for name in {PURE_MODULES!r}: importlib.import_module(name)\n"
        f"print(','.join(sorted(m for m in {HEAVY!r} if m in sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == ""
