"""Whole-GPU figures for the host metrics: NVML when it is there, a fixed list otherwise.

The NVML backend takes the `pynvml` module as a constructor argument, so it is
tested against a stand-in module and the monitor runs unchanged on machines
without a GPU (where `open_host_backend` falls back to the static backend).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HostGpu:
    index: int
    uuid: str
    device_type: str
    """`NVIDIA-<product name>`, HAMi's `device_type` label."""

    memory_used_bytes: int
    utilization_percent: int
    memory_utilization_percent: int


class HostGpuBackend(Protocol):
    def read(self) -> Sequence[HostGpu]:
        """Current figures for every GPU that could be read; never raises for one bad GPU."""
        ...

    def close(self) -> None: ...


class StaticHostBackend:
    """Returns the GPUs it was given: the backend for GPU-less nodes, tests and the simulator."""

    def __init__(self, gpus: Sequence[HostGpu] = ()) -> None:
        self.gpus = tuple(gpus)

    def read(self) -> Sequence[HostGpu]:
        return self.gpus

    def close(self) -> None:
        return None


def nvml_text(value: Any) -> str:
    """NVML strings arrive as bytes from older pynvml releases, str from newer."""
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlHostBackend:
    """Reads GPUs through an initialised NVML module (`pynvml` or a stand-in)."""

    def __init__(self, nvml: ModuleType | Any) -> None:
        self._nvml = nvml
        nvml.nvmlInit()

    def read(self) -> Sequence[HostGpu]:
        nvml = self._nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            log.warning("NVML device count failed: %s", error)
            return ()
        gpus = []
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
                rates = nvml.nvmlDeviceGetUtilizationRates(handle)
                gpus.append(
                    HostGpu(
                        index=index,
                        uuid=nvml_text(nvml.nvmlDeviceGetUUID(handle)),
                        device_type="NVIDIA-" + nvml_text(nvml.nvmlDeviceGetName(handle)),
                        memory_used_bytes=int(memory.used),
                        utilization_percent=int(rates.gpu),
                        memory_utilization_percent=int(rates.memory),
                    )
                )
            except nvml.NVMLError as error:
                log.warning("NVML read of GPU %d failed: %s", index, error)
        return tuple(gpus)

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def open_host_backend() -> HostGpuBackend:
    """NVML if the library loads and initialises, else an empty static backend."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            import pynvml
    except ImportError:
        return StaticHostBackend()
    try:
        return NvmlHostBackend(pynvml)
    except pynvml.NVMLError as error:
        log.info("NVML unavailable (%s); host GPU metrics disabled", error)
        return StaticHostBackend()
