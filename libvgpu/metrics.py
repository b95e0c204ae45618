"""The vGPU monitor's series: HAMi's `hami_*` names and labels, and its legacy names on request.

Rendered per scrape straight into Prometheus text (see `exposition`) from the
known cache files and the host backend. Every series carries HAMi's const
label `zone="vGPU"`; container series also carry `claim_uid` (empty for legacy
containers), which keeps the series of two claims in one pod apart.

The MIG families (`mig_series`) follow, from the same host reading and the
MIG users the informers feed (a MIG container has no cache file).

A file's lines are kept between scrapes and reused while its snapshot is the
very object `CacheFiles` handed out last time (its bytes did not change), its
owners are the same and its last-kernel age is the same whole second.

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
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from libvgpu.cache_files import CacheFiles, CacheReading
from libvgpu.claim_views import ClaimViews
from libvgpu.exposition import format_value, gauge_header, label_set, sample, series_prefix
from libvgpu.host_gpus import HostGpu, HostGpuBackend
from libvgpu.mig_series import render_mig_series
from libvgpu.mig_users import MigUsers
from libvgpu.owners import Owner, OwnerResolver
from libvgpu.region_reader import DeviceUsage, RegionSnapshot

ZONE = "vGPU"
HOST_LABELS = ("zone", "node", "device_index", "device_uuid", "device_type", "vendor")
MEMORY_CONTROLLER_LABELS = ("zone", "device_index", "device_uuid", "device_type", "vendor")
"""HAMi's host labels plus `vendor` (the family's request type: NVIDIA, MLU, Ascend, ...)."""
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
LEGACY_MEMORY_DESC_EXTRA_LABELS = ("context", "module", "data", "offset")
"""`Device_memory_desc_of_container` adds these byte counts to the legacy container labels."""
_UINT64 = 1 << 64
_INT64_MAX = (1 << 63) - 1


@dataclass(frozen=True)
class FamilySpec:
    name: str
    documentation: str
    legacy: bool = False


class Family(IntEnum):
    """The families in exposition order; a member indexes per-family lists."""

    HOST_MEMORY = 0
    HOST_UTILIZATION = 1
    HOST_MEMORY_CONTROLLER = 2
    USED = 3
    LIMIT = 4
    CONTAINER_MEMORY = 5
    CONTAINER_UTILIZATION = 6
    LAST_KERNEL = 7
    CONTEXT = 8
    MODULE = 9
    BUFFER = 10
    LEGACY_HOST_MEMORY = 11
    LEGACY_HOST_UTILIZATION = 12
    LEGACY_USED = 13
    LEGACY_LIMIT = 14
    LEGACY_MEMORY_DESC = 15
    LEGACY_UTILIZATION_DESC = 16
    LEGACY_LAST_KERNEL = 17


FAMILIES: dict[Family, FamilySpec] = {
    Family.HOST_MEMORY: FamilySpec(
        "hami_host_gpu_memory_used_bytes", "GPU device memory usage in bytes"
    ),
    Family.HOST_UTILIZATION: FamilySpec(
        "hami_host_gpu_utilization_ratio", "GPU core utilization ratio (0-100)"
    ),
    Family.HOST_MEMORY_CONTROLLER: FamilySpec(
        "hami_host_gpu_memory_controller_utilization_ratio",
        "GPU memory controller utilization ratio (0-100)",
    ),
    Family.USED: FamilySpec("hami_vgpu_memory_used_bytes", "vGPU device memory usage in bytes"),
    Family.LIMIT: FamilySpec("hami_vgpu_memory_limit_bytes", "vGPU device memory limit in bytes"),
    Family.CONTAINER_MEMORY: FamilySpec(
        "hami_container_device_memory_bytes", "Container device memory usage in bytes"
    ),
    Family.CONTAINER_UTILIZATION: FamilySpec(
        "hami_container_device_utilization_ratio", "Container device SM utilization ratio"
    ),
    Family.LAST_KERNEL: FamilySpec(
        "hami_container_last_kernel_elapsed_seconds",
        "Seconds since last kernel execution in container",
    ),
    Family.CONTEXT: FamilySpec(
        "hami_vgpu_memory_context_bytes", "Container device memory context size in bytes"
    ),
    Family.MODULE: FamilySpec(
        "hami_vgpu_memory_module_bytes", "Container device memory module size in bytes"
    ),
    Family.BUFFER: FamilySpec(
        "hami_vgpu_memory_buffer_bytes", "Container device memory buffer size in bytes"
    ),
    Family.LEGACY_HOST_MEMORY: FamilySpec(
        "HostGPUMemoryUsage", "GPU device memory usage", legacy=True
    ),
    Family.LEGACY_HOST_UTILIZATION: FamilySpec(
        "HostCoreUtilization", "GPU core utilization", legacy=True
    ),
    Family.LEGACY_USED: FamilySpec(
        "vGPU_device_memory_usage_in_bytes", "vGPU device usage", legacy=True
    ),
    Family.LEGACY_LIMIT: FamilySpec(
        "vGPU_device_memory_limit_in_bytes", "vGPU device limit", legacy=True
    ),
    Family.LEGACY_MEMORY_DESC: FamilySpec(
        "Device_memory_desc_of_container", "Container device memory description", legacy=True
    ),
    Family.LEGACY_UTILIZATION_DESC: FamilySpec(
        "Device_utilization_desc_of_container",
        "Container device utilization description",
        legacy=True,
    ),
    Family.LEGACY_LAST_KERNEL: FamilySpec(
        "Device_last_kernel_of_container", "Container device last kernel description", legacy=True
    ),
}
assert list(FAMILIES) == list(Family)
_HEADERS = tuple(gauge_header(spec.name, spec.documentation) for spec in FAMILIES.values())


class _Lines:
    """Sample lines by family, appended in order."""

    def __init__(self) -> None:
        self.by_family: list[list[str]] = [[] for _ in FAMILIES]

    def add(self, family: Family, labels: str, value: float) -> None:
        self.by_family[family].append(sample(FAMILIES[family].name, labels, value))


_CONTAINER_FAMILIES = (
    Family.USED,
    Family.LIMIT,
    Family.CONTAINER_MEMORY,
    Family.CONTAINER_UTILIZATION,
    Family.CONTEXT,
    Family.MODULE,
    Family.BUFFER,
)
_LEGACY_CONTAINER_FAMILIES = (
    Family.LEGACY_USED,
    Family.LEGACY_LIMIT,
    Family.LEGACY_UTILIZATION_DESC,
)

SeriesKey = tuple[Owner, int, str]
"""Owner, device index and device UUID: what a container series' labels are made of."""


@dataclass(frozen=True)
class _SeriesText:
    """The fixed start of each of one series' lines (`name{labels} `), built once and kept
    while the series exists, so a file whose values changed only formats the values."""

    prefixes: tuple[str, ...]
    """In `_CONTAINER_FAMILIES` order."""

    last_kernel: str
    legacy_prefixes: tuple[str, ...]
    """In `_LEGACY_CONTAINER_FAMILIES` order; empty without `--legacy-metrics`."""

    legacy_last_kernel: str
    legacy_memory_labels: str
    """The legacy label set without its closing brace; the byte counts complete it."""


@dataclass(frozen=True)
class _FileText:
    """One cache file's rendered lines and what they were rendered from."""

    snapshot: RegionSnapshot
    owners: tuple[Owner, ...]
    elapsed: int | None
    by_family: tuple[str, ...]
    series: dict[SeriesKey, _SeriesText]


def _series_text(key: SeriesKey, legacy: bool) -> _SeriesText:
    owner, index, uuid = key
    values = (ZONE, owner.namespace, owner.pod, owner.container, str(index), uuid, owner.claim_uid)
    labels = label_set(CONTAINER_LABELS, values)
    legacy_labels = label_set(LEGACY_CONTAINER_LABELS, values) if legacy else ""
    legacy_families = _LEGACY_CONTAINER_FAMILIES if legacy else ()
    return _SeriesText(
        prefixes=tuple(
            series_prefix(FAMILIES[family].name, labels) for family in _CONTAINER_FAMILIES
        ),
        last_kernel=series_prefix(FAMILIES[Family.LAST_KERNEL].name, labels),
        legacy_prefixes=tuple(
            series_prefix(FAMILIES[family].name, legacy_labels) for family in legacy_families
        ),
        legacy_last_kernel=series_prefix(FAMILIES[Family.LEGACY_LAST_KERNEL].name, legacy_labels),
        legacy_memory_labels=legacy_labels[:-1],
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
    """Renders every series for one scrape; `legacy_metrics` adds HAMi's pre-v2.9 names.

    `render` may run in several threads at once: each builds its own text, and
    the per-file cache is replaced whole at the end.
    """

    def __init__(
        self,
        files: CacheFiles,
        resolver: OwnerResolver,
        host: HostGpuBackend,
        node_name: str,
        *,
        legacy_metrics: bool = False,
        clock: Callable[[], float] = time.time,
        mig_users: MigUsers | None = None,
    ) -> None:
        self._files = files
        self._resolver = resolver
        self._host = host
        self._node = node_name
        self._legacy = legacy_metrics
        self._clock = clock
        self._texts: dict[str, _FileText] = {}
        self._views = ClaimViews()
        self._mig_users = mig_users if mig_users is not None else MigUsers(node_name)

    def render(self) -> str:
        host = _Lines()
        gpus = self._host.read() if self._node else ()
        for gpu in gpus:
            self._add_host(host, gpu)
        sections = [["".join(lines)] for lines in host.by_family]
        now = self._clock()
        previous, texts = self._texts, {}
        for reading in self._views.fold(self._files.read_all()):
            owners = tuple(self._resolver.owners_of(reading.key))
            if not owners:
                continue
            elapsed = last_kernel_elapsed(reading.snapshot.last_kernel_time, now)
            text = previous.get(reading.path)
            if (
                text is None
                or text.snapshot is not reading.snapshot
                or text.owners != owners
                or text.elapsed != elapsed
            ):
                text = self._render_file(reading, owners, elapsed, text)
            texts[reading.path] = text
            for section, chunk in zip(sections, text.by_family, strict=True):
                section.append(chunk)
        self._texts = texts
        mig = render_mig_series(
            self._node,
            gpus,
            self._mig_users.legacy(),
            self._mig_users.claims(),
            legacy_metrics=self._legacy,
        )
        return (
            "".join(
                _HEADERS[family] + "".join(sections[family])
                for family in Family
                if self._legacy or not FAMILIES[family].legacy
            )
            + mig
        )

    def _add_host(self, lines: _Lines, gpu: HostGpu) -> None:
        device = (str(gpu.index), gpu.uuid, gpu.device_type, gpu.vendor)
        labels = label_set(HOST_LABELS, (ZONE, self._node, *device))
        lines.add(Family.HOST_MEMORY, labels, gpu.memory_used_bytes)
        lines.add(Family.HOST_UTILIZATION, labels, gpu.utilization_percent)
        lines.add(
            Family.HOST_MEMORY_CONTROLLER,
            label_set(MEMORY_CONTROLLER_LABELS, (ZONE, *device)),
            gpu.memory_utilization_percent,
        )
        if self._legacy:
            legacy = label_set(LEGACY_HOST_LABELS, (ZONE, self._node, *device[:3]))
            lines.add(Family.LEGACY_HOST_MEMORY, legacy, gpu.memory_used_bytes)
            lines.add(Family.LEGACY_HOST_UTILIZATION, legacy, gpu.utilization_percent)

    def _render_file(
        self,
        reading: CacheReading,
        owners: tuple[Owner, ...],
        elapsed: int | None,
        previous: _FileText | None,
    ) -> _FileText:
        kept = previous.series if previous is not None else {}
        series: dict[SeriesKey, _SeriesText] = {}
        lines = _Lines()
        for owner in owners:
            for device in reading.snapshot.devices:
                if not device.uuid:
                    continue
                key = (owner, device.index, device.uuid)
                text = kept.get(key)
                if text is None:
                    text = _series_text(key, self._legacy)
                series[key] = text
                self._add_device(lines, text, device, elapsed)
        return _FileText(
            reading.snapshot,
            owners,
            elapsed,
            tuple("".join(family_lines) for family_lines in lines.by_family),
            series,
        )

    def _add_device(
        self, lines: _Lines, text: _SeriesText, device: DeviceUsage, elapsed: int | None
    ) -> None:
        by_family = lines.by_family
        values = (
            device.used_bytes,
            device.limit_bytes,
            device.used_bytes,
            device.sm_util,
            device.context_bytes,
            device.module_bytes,
            device.data_bytes,
        )
        for family, prefix, value in zip(_CONTAINER_FAMILIES, text.prefixes, values, strict=True):
            by_family[family].append(prefix + format_value(value) + "\n")
        if elapsed is not None:
            by_family[Family.LAST_KERNEL].append(text.last_kernel + format_value(elapsed) + "\n")
        if self._legacy:
            _add_legacy_device(lines, text, device, elapsed)


def _add_legacy_device(
    lines: _Lines, text: _SeriesText, device: DeviceUsage, elapsed: int | None
) -> None:
    by_family = lines.by_family
    values = (device.used_bytes, device.limit_bytes, device.sm_util)
    for family, prefix, value in zip(
        _LEGACY_CONTAINER_FAMILIES, text.legacy_prefixes, values, strict=True
    ):
        by_family[family].append(prefix + format_value(value) + "\n")
    if elapsed is not None:
        by_family[Family.LEGACY_LAST_KERNEL].append(
            text.legacy_last_kernel + format_value(elapsed) + "\n"
        )
    offset = (
        device.used_bytes - device.context_bytes - device.module_bytes - device.data_bytes
    ) % _UINT64
    memory = zip(
        LEGACY_MEMORY_DESC_EXTRA_LABELS,
        (device.context_bytes, device.module_bytes, device.data_bytes, offset),
        strict=True,
    )
    labels = text.legacy_memory_labels + "".join(f',{name}="{count}"' for name, count in memory)
    lines.add(Family.LEGACY_MEMORY_DESC, labels + "}", device.used_bytes)
