"""Whole-card figures for the host metrics: NVML, a mock file, or a fixed list.

The NVML backend takes the `pynvml` module as a constructor argument, so it is
tested against a stand-in module and the monitor runs unchanged on machines
without a GPU (where `open_host_backend` falls back to the static backend).
The mock backend reads the kubelet plugin's mock file (any vendor), so every
family's host series exist in the simulator and the tests; no other vendor's
live figures are read here (no maintained binding serves them; docs/vendors.md).
Each card also lists its MIG devices (`host_mig`), for the monitor's MIG series.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import yaml

from api.quantity import to_bytes_ceil
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_vendors import NVIDIA, dra_vendor
from libvgpu.host_mig import HostMigInstance, mock_mig_instances, read_nvml_mig_instances

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
    vendor: str = NVIDIA.request_type
    """The family's HAMi request type, as the DRA `vendor` attribute says it (`vendor` label)."""
    mig_instances: tuple[HostMigInstance, ...] = ()
    """The card's MIG devices, by placement; empty for a card not in MIG mode."""


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
                        mig_instances=self._mig_instances(index, handle),
                    )
                )
            except nvml.NVMLError as error:
                log.warning("NVML read of GPU %d failed: %s", index, error)
        return tuple(gpus)

    def _mig_instances(self, index: int, handle: Any) -> tuple[HostMigInstance, ...]:
        """A card whose MIG side cannot be read keeps its figures, without MIG devices."""
        try:
            return read_nvml_mig_instances(self._nvml, handle)
        except self._nvml.NVMLError as error:
            log.warning("NVML read of GPU %d's MIG devices failed: %s", index, error)
            return ()

    def close(self) -> None:
        self._nvml.nvmlShutdown()


class MockHostBackend:
    """The cards of a mock GPU file (`vendor`, `gpus[].uuid/index/productName`, and the
    figures `memoryUsed` bytes and `utilization` percent), re-read on every scrape."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> Sequence[HostGpu]:
        try:
            document = yaml.safe_load(self.path.read_text(encoding="utf-8")) or {}
            vendor = dra_vendor(str(document.get("vendor", NVIDIA.id)), f"{self.path}: vendor")
            return tuple(
                HostGpu(
                    index=int(gpu["index"]),
                    uuid=str(gpu["uuid"]),
                    device_type=vendor.device_type(str(gpu.get("productName") or vendor.product)),
                    memory_used_bytes=int(gpu.get("memoryUsed", 0)),
                    utilization_percent=int(gpu.get("utilization", 0)),
                    memory_utilization_percent=0,
                    vendor=vendor.request_type,
                    mig_instances=_mock_mig(gpu, vendor.product, vendor.memory_bytes),
                )
                for gpu in document.get("gpus") or ()
            )
        except (OSError, yaml.YAMLError, InvalidParameterError, KeyError, TypeError) as error:
            log.warning("mock GPU file %s unreadable: %s", self.path, error)
            return ()
        except ValueError as error:
            log.warning("mock GPU file %s has a bad figure: %s", self.path, error)
            return ()

    def close(self) -> None:
        return None


def _mock_mig(
    gpu: dict[str, Any], default_product: str, default_memory: int
) -> tuple[HostMigInstance, ...]:
    """The MIG devices a mock card's `mig` entry seeds (its product and memory pick the table)."""
    mig = gpu.get("mig")
    if not isinstance(mig, dict):
        return ()
    memory = gpu.get("memory")
    return mock_mig_instances(
        str(gpu["uuid"]),
        str(gpu.get("productName") or default_product),
        default_memory if memory is None else to_bytes_ceil(str(memory)),
        mig,
    )


def open_host_backend(mock_gpus: Path | None = None) -> HostGpuBackend:
    """The mock file's cards when one is given; else NVML if the library loads and
    initialises, else an empty static backend."""
    if mock_gpus is not None:
        return MockHostBackend(mock_gpus)
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
