"""Prometheus collector for the vGPU monitor: HAMi's `hami_*` names, labels and zone.

Built per scrape from the known cache files and the host backend, bound to
whatever registry the caller injects (no import-time globals). Container
series carry HAMi's labels plus `claim_uid` (empty for legacy containers);
every series carries HAMi's const label `zone="vGPU"`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from libvgpu.cache_files import CacheFiles
from libvgpu.host_gpus import HostGpuBackend
from libvgpu.owners import OwnerResolver

log = logging.getLogger(__name__)

ZONE = "vGPU"
HOST_LABELS = ["zone", "node", "device_index", "device_uuid", "device_type"]
MEMORY_CONTROLLER_LABELS = ["zone", "device_index", "device_uuid", "device_type"]
CONTAINER_LABELS = [
    "zone",
    "namespace",
    "pod",
    "container",
    "vdevice_index",
    "device_uuid",
    "claim_uid",
]


def _gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)


class VgpuMonitorCollector(Collector):
    def __init__(
        self,
        files: CacheFiles,
        resolver: OwnerResolver,
        host: HostGpuBackend,
        node_name: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._files = files
        self._resolver = resolver
        self._host = host
        self._node = node_name
        self._clock = clock

    def describe(self) -> list[Metric]:
        """Nothing at registration: collecting reads files, which registration must not do."""
        return []

    def collect(self) -> Iterator[Metric]:
        yield from self._host_metrics()
        yield from self._container_metrics()

    def _host_metrics(self) -> Iterator[Metric]:
        memory = _gauge(
            "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes", HOST_LABELS
        )
        utilization = _gauge(
            "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)", HOST_LABELS
        )
        controller = _gauge(
            "hami_host_gpu_memory_controller_utilization_ratio",
            "GPU memory controller utilization ratio (0-100)",
            MEMORY_CONTROLLER_LABELS,
        )
        for gpu in self._host.read():
            device = [str(gpu.index), gpu.uuid, gpu.device_type]
            memory.add_metric([ZONE, self._node, *device], gpu.memory_used_bytes)
            utilization.add_metric([ZONE, self._node, *device], gpu.utilization_percent)
            controller.add_metric([ZONE, *device], gpu.memory_utilization_percent)
        return iter((memory, utilization, controller))

    def _container_metrics(self) -> Iterator[Metric]:
        used = _gauge(
            "hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes", CONTAINER_LABELS
        )
        limit = _gauge(
            "hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes", CONTAINER_LABELS
        )
        container_memory = _gauge(
            "hami_container_device_memory_bytes",
            "Container device memory usage in bytes",
            CONTAINER_LABELS,
        )
        container_utilization = _gauge(
            "hami_container_device_utilization_ratio",
            "Container device SM utilization ratio",
            CONTAINER_LABELS,
        )
        last_kernel = _gauge(
            "hami_container_last_kernel_elapsed_seconds",
            "Seconds since last kernel execution in container",
            CONTAINER_LABELS,
        )
        context = _gauge(
            "hami_vgpu_memory_context_bytes",
            "Container device memory context size in bytes",
            CONTAINER_LABELS,
        )
        module = _gauge(
            "hami_vgpu_memory_module_bytes",
            "Container device memory module size in bytes",
            CONTAINER_LABELS,
        )
        buffer = _gauge(
            "hami_vgpu_memory_buffer_bytes",
            "Container device memory buffer size in bytes",
            CONTAINER_LABELS,
        )
        now = self._clock()
        for reading in self._files.read_all():
            snapshot = reading.snapshot
            for owner in self._resolver.owners_of(reading.key):
                for device in snapshot.devices:
                    if not device.uuid:
                        continue
                    labels = [
                        ZONE,
                        owner.namespace,
                        owner.pod,
                        owner.container,
                        str(device.index),
                        device.uuid,
                        owner.claim_uid,
                    ]
                    used.add_metric(labels, device.used_bytes)
                    limit.add_metric(labels, device.limit_bytes)
                    container_memory.add_metric(labels, device.used_bytes)
                    container_utilization.add_metric(labels, device.sm_util)
                    context.add_metric(labels, device.context_bytes)
                    module.add_metric(labels, device.module_bytes)
                    buffer.add_metric(labels, device.data_bytes)
                    if snapshot.last_kernel_time > 0:
                        last_kernel.add_metric(labels, max(now - snapshot.last_kernel_time, 0.0))
        return iter(
            (
                used,
                limit,
                container_memory,
                container_utilization,
                last_kernel,
                context,
                module,
                buffer,
            )
        )
