"""The vGPU monitor's series: HAMi's `hami_*` names and labels, and its legacy names on request.

Rendered per scrape straight into Prometheus text (see `exposition`) from the
known cache files and the host backend. Every series carries HAMi's const
label `zone="vGPU"`; container series also carry `claim_uid` (empty for legacy
containers), which keeps the series of two claims in one pod apart.

Where HAMi's `cmd/vGPUmonitor/metrics.go` decides a value, so do we:
- host series need a node name; without one HAMi exports none, nor do we;
- `hami_container_last_kernel_elapsed_seconds` is whole seconds,
  `now - last_kernel_time` with `now` truncated to the second, never below 0,
  and only for a region that recorded a kernel;
- `--legacy-metrics` adds the pre-v2.9 names with their own label names
  (`nodeid`, `deviceidx`, `podnamespace`, `ctrname`, `vdeviceid`, ...);
  `Device_memory_desc_of_container` carries context/module/data/offset byte
  counts as labels, offset being total minus the other three in uint64
  arithmetic, as HAMi computes it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from libvgpu.cache_files import CacheFiles, CacheReading
from libvgpu.exposition import GaugeFamily, label_set, render_families
from libvgpu.host_gpus import HostGpu, HostGpuBackend
from libvgpu.owners import Owner, OwnerResolver
from libvgpu.region_reader import DeviceUsage

ZONE = "vGPU"
HOST_LABELS = ("zone", "node", "device_index", "device_uuid", "device_type")
MEMORY_CONTROLLER_LABELS = ("zone", "device_index", "device_uuid", "device_type")
CONTAINER_LABELS = (
    "zone",
    "namespace",
    "pod",
    "container",
    "vdevice_index",
    "device_uuid",
    "claim_uid",
)
LEGACY_HOST_LABELS = ("zone", "nodeid", "deviceidx", "deviceuuid", "devicetype")
LEGACY_CONTAINER_LABELS = (
    "zone",
    "podnamespace",
    "podname",
    "ctrname",
    "vdeviceid",
    "deviceuuid",
    "claim_uid",
)
LEGACY_MEMORY_DESC_LABELS = (*LEGACY_CONTAINER_LABELS, "context", "module", "data", "offset")
_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1


@dataclass
class _Families:
    host_memory: GaugeFamily
    host_utilization: GaugeFamily
    host_memory_controller: GaugeFamily
    used: GaugeFamily
    limit: GaugeFamily
    container_memory: GaugeFamily
    container_utilization: GaugeFamily
    last_kernel: GaugeFamily
    context: GaugeFamily
    module: GaugeFamily
    buffer: GaugeFamily
    legacy_host_memory: GaugeFamily
    legacy_host_utilization: GaugeFamily
    legacy_used: GaugeFamily
    legacy_limit: GaugeFamily
    legacy_memory_desc: GaugeFamily
    legacy_utilization_desc: GaugeFamily
    legacy_last_kernel: GaugeFamily

    @classmethod
    def new(cls) -> _Families:
        return cls(
            host_memory=GaugeFamily(
                "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes"
            ),
            host_utilization=GaugeFamily(
                "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)"
            ),
            host_memory_controller=GaugeFamily(
                "hami_host_gpu_memory_controller_utilization_ratio",
                "GPU memory controller utilization ratio (0-100)",
            ),
            used=GaugeFamily("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes"),
            limit=GaugeFamily("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes"),
            container_memory=GaugeFamily(
                "hami_container_device_memory_bytes", "Container device memory usage in bytes"
            ),
            container_utilization=GaugeFamily(
                "hami_container_device_utilization_ratio", "Container device SM utilization ratio"
            ),
            last_kernel=GaugeFamily(
                "hami_container_last_kernel_elapsed_seconds",
                "Seconds since last kernel execution in container",
            ),
            context=GaugeFamily(
                "hami_vgpu_memory_context_bytes", "Container device memory context size in bytes"
            ),
            module=GaugeFamily(
                "hami_vgpu_memory_module_bytes", "Container device memory module size in bytes"
            ),
            buffer=GaugeFamily(
                "hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes"
            ),
            legacy_host_memory=GaugeFamily("HostGPUMemoryUsage", "GPU device memory usage"),
            legacy_host_utilization=GaugeFamily("HostCoreUtilization", "GPU core utilization"),
            legacy_used=GaugeFamily("vGPU_device_memory_usage_in_bytes", "vGPU device usage"),
            legacy_limit=GaugeFamily("vGPU_device_memory_limit_in_bytes", "vGPU device limit"),
            legacy_memory_desc=GaugeFamily(
                "Device_memory_desc_of_container", "Container device memory description"
            ),
            legacy_utilization_desc=GaugeFamily(
                "Device_utilization_desc_of_container", "Container device utilization description"
            ),
            legacy_last_kernel=GaugeFamily(
                "Device_last_kernel_of_container", "Container device last kernel description"
            ),
        )

    def render(self, legacy: bool) -> str:
        """Every family, even one without samples; the `legacy_*` ones only when asked for."""
        return render_families(
            [
                getattr(self, field.name)
                for field in fields(self)
                if legacy or not field.name.startswith("legacy_")
            ]
        )


def last_kernel_elapsed(last_kernel_time: int, now: float) -> int | None:
    """Whole seconds since the region's last kernel, as HAMi reports it; None when none ran.

    libvgpu stores the time as u64 and HAMi reads it as int64, so a value past
    int64's range is negative to HAMi and not reported.
    """
    if not 0 < last_kernel_time <= _INT64_MAX:
        return None
    return max(int(now) - last_kernel_time, 0)


class VgpuMetrics:
    """Renders every series for one scrape; `legacy_metrics` adds HAMi's pre-v2.9 names."""

    def __init__(
        self,
        files: CacheFiles,
        resolver: OwnerResolver,
        host: HostGpuBackend,
        node_name: str,
        *,
        legacy_metrics: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._files = files
        self._resolver = resolver
        self._host = host
        self._node = node_name
        self._legacy = legacy_metrics
        self._clock = clock

    def render(self) -> str:
        families = _Families.new()
        if self._node:
            for gpu in self._host.read():
                self._add_host(families, gpu)
        now = self._clock()
        for reading in self._files.read_all():
            for owner in self._resolver.owners_of(reading.key):
                for device in reading.snapshot.devices:
                    if device.uuid:
                        self._add_device(families, reading, owner, device, now)
        return families.render(self._legacy)

    def _add_host(self, families: _Families, gpu: HostGpu) -> None:
        device = (str(gpu.index), gpu.uuid, gpu.device_type)
        labels = label_set(HOST_LABELS, (ZONE, self._node, *device))
        families.host_memory.add(labels, gpu.memory_used_bytes)
        families.host_utilization.add(labels, gpu.utilization_percent)
        families.host_memory_controller.add(
            label_set(MEMORY_CONTROLLER_LABELS, (ZONE, *device)), gpu.memory_utilization_percent
        )
        if self._legacy:
            legacy = label_set(LEGACY_HOST_LABELS, (ZONE, self._node, *device))
            families.legacy_host_memory.add(legacy, gpu.memory_used_bytes)
            families.legacy_host_utilization.add(legacy, gpu.utilization_percent)

    def _add_device(
        self,
        families: _Families,
        reading: CacheReading,
        owner: Owner,
        device: DeviceUsage,
        now: float,
    ) -> None:
        values = (
            ZONE,
            owner.namespace,
            owner.pod,
            owner.container,
            str(device.index),
            device.uuid,
            owner.claim_uid,
        )
        labels = label_set(CONTAINER_LABELS, values)
        families.used.add(labels, device.used_bytes)
        families.limit.add(labels, device.limit_bytes)
        families.container_memory.add(labels, device.used_bytes)
        families.container_utilization.add(labels, device.sm_util)
        families.context.add(labels, device.context_bytes)
        families.module.add(labels, device.module_bytes)
        families.buffer.add(labels, device.data_bytes)
        elapsed = last_kernel_elapsed(reading.snapshot.last_kernel_time, now)
        if elapsed is not None:
            families.last_kernel.add(labels, elapsed)
        if self._legacy:
            self._add_legacy_device(families, values, device, elapsed)

    @staticmethod
    def _add_legacy_device(
        families: _Families, values: Sequence[str], device: DeviceUsage, elapsed: int | None
    ) -> None:
        labels = label_set(LEGACY_CONTAINER_LABELS, values)
        families.legacy_used.add(labels, device.used_bytes)
        families.legacy_limit.add(labels, device.limit_bytes)
        offset = (
            device.used_bytes - device.context_bytes - device.module_bytes - device.data_bytes
        ) % _UINT64
        memory = (device.context_bytes, device.module_bytes, device.data_bytes, offset)
        families.legacy_memory_desc.add(
            label_set(LEGACY_MEMORY_DESC_LABELS, (*values, *map(str, memory))), device.used_bytes
        )
        families.legacy_utilization_desc.add(labels, device.sm_util)
        if elapsed is not None:
            families.legacy_last_kernel.add(labels, elapsed)
