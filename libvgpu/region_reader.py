"""Read-only, lock-free reader of libvgpu's shared-region files.

The file is mapped read-only and never locked: libvgpu's semaphores belong to
the processes in the container, and a reader that took them could stall those
processes. Per-process slots are copied under the slot's seqlock (odd while a
writer is inside; a copy counts when the same even value is seen before and
after it). Header words are single aligned 64/32-bit stores and are read as-is.

A file that is being created, was truncated or holds garbage yields a
`RegionReadError`, never a crash: the file size is re-checked before every
read, because touching a mapped page past a truncated end raises SIGBUS.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
import time
from dataclasses import dataclass

from dra_driver.errors import DriverError, TransientError
from libvgpu.region_layout import (
    MAGIC,
    MAX_DEVICES,
    MAX_PROCESSES,
    SUPPORTED_MAJOR_VERSION,
    UUID_BYTES,
    V0,
    V1,
    RegionLayout,
)

DEFAULT_SEQLOCK_RETRIES = 64


class RegionReadError(DriverError):
    """The region file could not be read as a libvgpu shared region."""


class RegionNotReadyError(RegionReadError):
    """The file is absent, short or not yet stamped with the magic: it is being created."""


class RegionFormatError(RegionReadError):
    """The file is not a layout this reader knows, or holds impossible values."""


class RegionUnstableError(RegionReadError, TransientError):
    """A process slot kept changing under its seqlock for every retry."""


@dataclass(frozen=True)
class ProcessUsage:
    """One live process slot; tuples are indexed by NVML device index (`device_num` long)."""

    pid: int
    host_pid: int
    status: int
    """1 running, 2 suspended (0, exited, is never reported)."""

    used_bytes: tuple[int, ...]
    """Hook-accounted bytes (`used[dev].total`)."""

    context_bytes: tuple[int, ...]
    module_bytes: tuple[int, ...]
    data_bytes: tuple[int, ...]

    monitor_used_bytes: tuple[int, ...]
    """NVML `usedGpuMemory` as libvgpu's watcher last saw it."""

    sm_util: tuple[int, ...]


@dataclass(frozen=True)
class DeviceUsage:
    index: int
    uuid: str
    """NVML UUID; empty until a process in the container has called nvmlInit."""

    limit_bytes: int
    sm_limit_percent: int
    used_bytes: int
    """Sum of `used[index].total` over live process slots: the figure libvgpu enforces."""

    context_bytes: int
    module_bytes: int
    data_bytes: int
    monitor_used_bytes: int
    sm_util: int


@dataclass(frozen=True)
class RegionSnapshot:
    layout: str
    major_version: int
    minor_version: int
    devices: tuple[DeviceUsage, ...]
    processes: tuple[ProcessUsage, ...]
    priority: int
    utilization_switch: int
    recent_kernel: int
    last_kernel_time: int
    """Unix seconds of the last recorded kernel launch; 0 when none (always 0 in v0)."""


_HEADER_PROBE = struct.Struct("<iII")
_U64 = struct.Struct("<Q")
_LIMITS = struct.Struct(f"<{MAX_DEVICES}Q")
_TAIL = struct.Struct("<iiii")
_CONTEXT, _MODULE, _DATA, _TOTAL = 0, 1, 2, 4
"""Word positions inside `device_memory_t`."""
_SM_UTIL = 2
"""Word position of `sm_util` inside `device_util_t`."""


def _slot_struct(layout: RegionLayout) -> struct.Struct:
    used_words = layout.used_stride // 8
    util_words = layout.util_stride // 8
    slot = struct.Struct(
        f"<ii{MAX_DEVICES * used_words}Q{MAX_DEVICES}Q{MAX_DEVICES * util_words}Qi"
    )
    assert layout.slot_used + MAX_DEVICES * layout.used_stride == layout.slot_monitor_used
    assert layout.slot_monitor_used + MAX_DEVICES * 8 == layout.slot_device_util
    assert layout.slot_device_util + MAX_DEVICES * layout.util_stride == layout.slot_status
    assert slot.size == layout.slot_status + 4, layout.name
    return slot


_SLOTS = {layout.name: _slot_struct(layout) for layout in (V0, V1)}


def select_layout(size: int, header: bytes, name: str = "region") -> RegionLayout:
    """The layout of a file of `size` bytes starting with `header`; `name` prefixes errors."""
    if size < _HEADER_PROBE.size or len(header) < _HEADER_PROBE.size:
        raise RegionNotReadyError(f"{name}: {size} bytes, shorter than a region header")
    magic, major, minor = _HEADER_PROBE.unpack_from(header)
    if magic != MAGIC:
        raise RegionNotReadyError(f"{name}: magic {magic} is not {MAGIC} (not yet initialised)")
    if V0.file_sizes is not None and size in V0.file_sizes:
        return V0
    if size >= V1.struct_size:
        if major != SUPPORTED_MAJOR_VERSION:
            raise RegionFormatError(f"{name}: unsupported region version {major}.{minor}")
        return V1
    raise RegionFormatError(f"{name}: size {size} matches no known region layout")


def _decode_uuid(raw: bytes) -> str:
    text = raw.split(b"\0", 1)[0]
    if not text or not all(0x21 <= byte <= 0x7E for byte in text):
        return ""
    return text.decode("ascii")


class RegionReader:
    """An open, mapped region file, from `open_region`; `close` unmaps it."""

    def __init__(
        self, path: str, mapping: mmap.mmap, layout: RegionLayout, identity: tuple[int, int]
    ) -> None:
        self.path = path
        self.layout = layout
        self.identity = identity
        """(st_dev, st_ino): a file replaced under the same name is a different region."""
        self._map = mapping
        self._slot = _SLOTS[layout.name]

    def close(self) -> None:
        self._map.close()

    def read(self, max_retries: int = DEFAULT_SEQLOCK_RETRIES) -> RegionSnapshot:
        layout = self.layout
        data = self._map
        if data.closed:
            raise RegionReadError(f"{self.path}: reader is closed")
        try:
            size = data.size()
        except OSError as error:
            raise RegionReadError(f"{self.path}: {error}") from error
        if size < layout.struct_size:
            raise RegionNotReadyError(f"{self.path}: truncated to {size} bytes")
        magic, major, minor = _HEADER_PROBE.unpack_from(data, 0)
        if magic != MAGIC:
            raise RegionNotReadyError(f"{self.path}: magic cleared")
        if layout.major_version is None:
            major, minor = 0, 0
        device_num = _U64.unpack_from(data, layout.device_num)[0]
        proc_num, utilization_switch, recent_kernel, priority = _TAIL.unpack_from(
            data, layout.proc_num
        )
        if device_num > MAX_DEVICES:
            raise RegionFormatError(f"{self.path}: device_num {device_num} > {MAX_DEVICES}")
        if not 0 <= proc_num <= MAX_PROCESSES:
            raise RegionFormatError(f"{self.path}: proc_num {proc_num} out of range")
        limits = _LIMITS.unpack_from(data, layout.limit)
        sm_limits = _LIMITS.unpack_from(data, layout.sm_limit)
        uuids = data[layout.uuids : layout.uuids + MAX_DEVICES * UUID_BYTES]
        last_kernel_time = (
            0
            if layout.last_kernel_time is None
            else _U64.unpack_from(data, layout.last_kernel_time)[0]
        )
        processes = []
        for slot_index in range(proc_num):
            values = self._read_slot(slot_index, max_retries)
            if values[-1] != 0:
                processes.append(self._process(values, device_num))
        devices = tuple(
            self._device(index, uuids, limits, sm_limits, processes) for index in range(device_num)
        )
        return RegionSnapshot(
            layout=layout.name,
            major_version=major,
            minor_version=minor,
            devices=devices,
            processes=tuple(processes),
            priority=priority,
            utilization_switch=utilization_switch,
            recent_kernel=recent_kernel,
            last_kernel_time=last_kernel_time,
        )

    def _read_slot(self, slot_index: int, max_retries: int) -> tuple[int, ...]:
        offset = self.layout.procs + slot_index * self.layout.slot_size
        if self.layout.slot_seqlock is None:
            return self._slot.unpack_from(self._map, offset)
        seqlock_offset = offset + self.layout.slot_seqlock
        for _ in range(max_retries):
            before = _U64.unpack_from(self._map, seqlock_offset)[0]
            if before & 1 == 0:
                values = self._slot.unpack_from(self._map, offset)
                if _U64.unpack_from(self._map, seqlock_offset)[0] == before:
                    return values
            time.sleep(0)
        raise RegionUnstableError(
            f"{self.path}: slot {slot_index} still changing after {max_retries} tries"
        )

    def _process(self, values: tuple[int, ...], device_num: int) -> ProcessUsage:
        used_words = self.layout.used_stride // 8
        util_words = self.layout.util_stride // 8
        monitor_base = 2 + MAX_DEVICES * used_words
        util_base = monitor_base + MAX_DEVICES
        devices = range(device_num)

        def memory(field: int) -> tuple[int, ...]:
            return tuple(values[2 + device * used_words + field] for device in devices)

        return ProcessUsage(
            pid=values[0],
            host_pid=values[1],
            status=values[-1],
            used_bytes=memory(_TOTAL),
            context_bytes=memory(_CONTEXT),
            module_bytes=memory(_MODULE),
            data_bytes=memory(_DATA),
            monitor_used_bytes=tuple(values[monitor_base + device] for device in devices),
            sm_util=tuple(values[util_base + device * util_words + _SM_UTIL] for device in devices),
        )

    def _device(
        self,
        index: int,
        uuids: bytes,
        limits: tuple[int, ...],
        sm_limits: tuple[int, ...],
        processes: list[ProcessUsage],
    ) -> DeviceUsage:
        return DeviceUsage(
            index=index,
            uuid=_decode_uuid(uuids[index * UUID_BYTES : (index + 1) * UUID_BYTES]),
            limit_bytes=limits[index],
            sm_limit_percent=sm_limits[index],
            used_bytes=sum(process.used_bytes[index] for process in processes),
            context_bytes=sum(process.context_bytes[index] for process in processes),
            module_bytes=sum(process.module_bytes[index] for process in processes),
            data_bytes=sum(process.data_bytes[index] for process in processes),
            monitor_used_bytes=sum(process.monitor_used_bytes[index] for process in processes),
            sm_util=sum(process.sm_util[index] for process in processes),
        )


def open_region(path: str) -> RegionReader:
    """Open and map a region file read-only; refuses symlinks and anything but a regular file."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError as error:
        raise RegionNotReadyError(f"{path}: no such file") from error
    except OSError as error:
        raise RegionReadError(f"{path}: {error}") from error
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise RegionFormatError(f"{path}: not a regular file")
        layout = select_layout(info.st_size, os.pread(descriptor, _HEADER_PROBE.size, 0), path)
        mapping = mmap.mmap(descriptor, layout.struct_size, mmap.MAP_SHARED, mmap.PROT_READ)
    except OSError as error:
        raise RegionReadError(f"{path}: {error}") from error
    finally:
        os.close(descriptor)
    return RegionReader(path, mapping, layout, (info.st_dev, info.st_ino))
