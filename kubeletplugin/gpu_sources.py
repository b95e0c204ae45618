"""Where a node plugin's GPUs come from, and what makes it look at them again.

The backend (NVML, AMD SMI, or a mock file), edits of watched files, NVML XID events.
Shared by the DRA plugin and the legacy device plugin, so both discover and
react the same way.
"""

from __future__ import annotations

import asyncio
import importlib
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from watchfiles import awatch

from dra_driver.errors import DriverError, InvalidParameterError
from kubeletplugin.amdsmi_backend import AmdSmiBackend
from kubeletplugin.gpus import GpuBackend, MockBackend, NvmlBackend, read_sysfs_numa
from kubeletplugin.xid import XidWatcher

XID_WAIT_FAILED = "xid-wait-failed"
"""Why every GPU is unhealthy once NVML can no longer say whether XIDs happened."""


GPU_BACKENDS = ("nvml", "amdsmi", "mock")
"""`--gpu-backend` values: NVIDIA's NVML, AMD's AMD SMI, or the mock file's cards."""

_LIBRARIES = {
    "nvml": ("pynvml", "install the pynvml package (a dependency of this driver)"),
    "amdsmi": ("amdsmi", "install ROCm's amdsmi Python package (/opt/rocm/share/amd_smi)"),
}


class GpuLibraryMissingError(DriverError):
    """The chosen backend's Python binding is not importable on this node."""


def open_gpu_backend(
    mock_gpus: Path | None,
    *,
    backend: str | None = None,
    read_topology: bool = False,
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> GpuBackend:
    """The backend `--gpu-backend` names; unset, the mock file's cards when one is given,
    else NVML. The GPU library is imported only for the backend chosen, so a node
    without NVIDIA's or AMD's binding runs the other. `read_topology` has NVML read the
    GPUs' links too (the mock file always has them; AMD SMI's are not read)."""
    kind = backend or ("mock" if mock_gpus is not None else "nvml")
    if kind not in GPU_BACKENDS:
        raise InvalidParameterError(
            "--gpu-backend", f"{kind!r} is not one of {', '.join(GPU_BACKENDS)}"
        )
    if kind == "mock":
        if mock_gpus is None:
            raise InvalidParameterError(
                "--gpu-backend", "mock needs --mock-gpus (MOCK_GPUS), the mock GPU file"
            )
        return MockBackend(mock_gpus)
    if mock_gpus is not None:
        raise InvalidParameterError(
            "--mock-gpus", f"a mock GPU file with --gpu-backend {kind}, which reads real GPUs"
        )
    name, hint = _LIBRARIES[kind]
    try:
        module = import_module(name)
    except ImportError as error:
        raise GpuLibraryMissingError(
            f"--gpu-backend {kind}: cannot import the {name} module ({error}); {hint}"
        ) from error
    if kind == "amdsmi":
        return AmdSmiBackend(module)
    return NvmlBackend(module, read_numa=read_sysfs_numa, read_topology=read_topology)


def nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


async def watch_files(paths: Sequence[Path], on_change: Callable[[], None]) -> None:
    """Call `on_change` on any change next to the files. A directory that does not
    exist yet is watched through its nearest existing ancestor (a ConfigMap volume
    may appear later)."""

    def directories() -> list[str]:
        return sorted({str(nearest_existing(p.parent)) for p in paths})

    while True:
        watched = directories()
        async for _ in awatch(*watched, debounce=50, step=10, recursive=False):
            on_change()
            if directories() != watched:
                break


async def watch_xids(
    backend: NvmlBackend, on_change: Callable[[], None], stop: threading.Event
) -> None:
    """Critical XIDs (seen in a worker thread) mark their GPU unhealthy in the backend,
    then `on_change` runs on the event loop."""
    loop = asyncio.get_running_loop()

    def on_xid(uuid: str, xid: int) -> None:
        def mark() -> None:
            backend.unhealthy[uuid] = f"xid-{xid}"
            on_change()

        loop.call_soon_threadsafe(mark)

    def on_wait_failed(uuids: Sequence[str], error: str) -> None:
        def mark() -> None:
            for uuid in uuids:
                backend.unhealthy.setdefault(uuid, XID_WAIT_FAILED)
            on_change()

        loop.call_soon_threadsafe(mark)

    await asyncio.to_thread(XidWatcher(backend.nvml, on_xid, on_wait_failed).run, stop)
