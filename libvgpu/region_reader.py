"""Read-only, lock-free reader of libvgpu's shared-region files.

Each read opens the file, copies the parts it needs with `pread` and closes
it; nothing is mapped and nothing is locked. libvgpu's semaphores belong to
the processes in the container, and a reader that took them could stall those
processes. A mapped file that shrinks under a reader raises SIGBUS, which no
Python code can catch; a `pread` past the end just returns fewer bytes, so a
file that is being created, truncated, rewritten or holds garbage yields a
`RegionReadError` and never takes the monitor down.

Per-process slots are copied under the slot's seqlock (odd while a writer is
inside). The slots are copied twice in a row: the copy is ascending, so the
seqlock word at a slot's end is read after that slot's data, and the second
copy's data sits between the first copy's seqlock and its own. Equal even
values accept the second copy (x86-64's load ordering makes this hold).
Header words are single aligned 64/32-bit stores and are read as-is; the
header probe is read again last, so a file re-initialised mid-read is
reported as such rather than mixed.
"""

from __future__ import annotations

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
    """The region file could not be read as a libvgpu shared region; `reason` says why."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class RegionNotReadyError(RegionReadError):
    """The file is absent, empty or not yet stamped with the magic: it is being created."""


class RegionFormatError(RegionReadError):
    """The file is not a layout this reader knows (bad magic, size or version) or holds
    impossible values: it is corrupt, or was truncated or changed while it was read."""


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
_HEADER_BYTES = max(V0.procs, V1.procs)
"""Everything before the process slots: magic, versions, counts, uuids, limits."""


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
    """The layout of a file of `size` bytes starting with `header`; `name` prefixes errors.

    A zero magic is a file still being created; any other wrong value is damage.
    """
    if size < _HEADER_PROBE.size or len(header) < _HEADER_PROBE.size:
        raise RegionNotReadyError(name, f"{size} bytes, shorter than a region header")
    magic, major, minor = _HEADER_PROBE.unpack_from(header)
    if magic == 0:
        raise RegionNotReadyError(name, "magic not set (not yet initialised)")
    if magic != MAGIC:
        raise RegionFormatError(name, f"bad magic {magic}, want {MAGIC}")
    if V0.file_sizes is not None and size in V0.file_sizes:
        return V0
    if size >= V1.struct_size:
        if major != SUPPORTED_MAJOR_VERSION:
            raise RegionFormatError(name, f"unsupported region version {major}.{minor}")
        return V1
    raise RegionFormatError(name, f"size {size} matches no known region layout")


def _decode_uuid(raw: bytes) -> str:
    text = raw.split(b"\0", 1)[0]
    if not text or not all(0x21 <= byte <= 0x7E for byte in text):
        return ""
    return text.decode("ascii")


def read_region(path: str, max_retries: int = DEFAULT_SEQLOCK_RETRIES) -> RegionSnapshot:
    """One consistent snapshot of the region file at `path`; refuses symlinks and non-files.

    Every failure, whatever the file does meanwhile, is a `RegionReadError`.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        descriptor = os.open(path, flags)
    except FileNotFoundError as error:
        raise RegionNotReadyError(path, "no such file") from error
    except OSError as error:
        raise RegionReadError(path, error.strerror or str(error)) from error
    try:
        return _RegionRead(path, descriptor, max_retries).snapshot()
    except OSError as error:
        raise RegionReadError(path, error.strerror or str(error)) from error
    finally:
        os.close(descriptor)


class _RegionRead:
    """One read of one open file: every `pread` is checked for a short count."""

    def __init__(self, path: str, descriptor: int, max_retries: int) -> None:
        self._path = path
        self._descriptor = descriptor
        self._max_retries = max_retries

    def _pread(self, length: int, offset: int) -> bytes:
        data = os.pread(self._descriptor, length, offset)
        if len(data) != length:
            raise RegionFormatError(
                self._path, f"truncated while being read (short read at offset {offset})"
            )
        return data

    def snapshot(self) -> RegionSnapshot:
        path = self._path
        info = os.fstat(self._descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise RegionFormatError(path, "not a regular file")
        header = os.pread(self._descriptor, _HEADER_BYTES, 0)
        layout = select_layout(info.st_size, header, path)
        if len(header) < layout.procs:
            raise RegionFormatError(path, "truncated while being read (short header)")
        probe = header[: _HEADER_PROBE.size]
        _, major, minor = _HEADER_PROBE.unpack_from(header)
        if layout.major_version is None:
            major, minor = 0, 0
        device_num = _U64.unpack_from(header, layout.device_num)[0]
        tail = self._pread(layout.struct_size - layout.proc_num, layout.proc_num)
        proc_num, utilization_switch, recent_kernel, priority = _TAIL.unpack_from(tail)
        if device_num > MAX_DEVICES:
            raise RegionFormatError(path, f"device_num {device_num} > {MAX_DEVICES}")
        if not 0 <= proc_num <= MAX_PROCESSES:
            raise RegionFormatError(path, f"proc_num {proc_num} out of range")
        last_kernel_time = (
            0
            if layout.last_kernel_time is None
            else _U64.unpack_from(tail, layout.last_kernel_time - layout.proc_num)[0]
        )
        slots = self._read_slots(layout, proc_num)
        if self._pread(_HEADER_PROBE.size, 0) != probe:
            raise RegionFormatError(path, "re-initialised while being read")
        limits = _LIMITS.unpack_from(header, layout.limit)
        sm_limits = _LIMITS.unpack_from(header, layout.sm_limit)
        uuids = header[layout.uuids : layout.uuids + MAX_DEVICES * UUID_BYTES]
        processes = [_process(layout, values, device_num) for values in slots if values[-1] != 0]
        devices = tuple(
            _device(index, uuids, limits, sm_limits, processes) for index in range(device_num)
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

    def _read_slots(self, layout: RegionLayout, proc_num: int) -> list[tuple[int, ...]]:
        slot = _SLOTS[layout.name]
        size = layout.slot_size
        first = self._pread(proc_num * size, layout.procs)
        if layout.slot_seqlock is None:
            return [slot.unpack_from(first, index * size) for index in range(proc_num)]
        second = self._pread(proc_num * size, layout.procs)
        values = []
        for index in range(proc_num):
            seqlock_at = index * size + layout.slot_seqlock
            before = _U64.unpack_from(first, seqlock_at)[0]
            after = _U64.unpack_from(second, seqlock_at)[0]
            if before == after and before & 1 == 0:
                values.append(slot.unpack_from(second, index * size))
            else:
                values.append(self._retry_slot(layout, index, after))
        return values

    def _retry_slot(self, layout: RegionLayout, index: int, before: int) -> tuple[int, ...]:
        """Copy one slot again until two copies in a row end with the same even seqlock."""
        assert layout.slot_seqlock is not None
        offset = layout.procs + index * layout.slot_size
        for _ in range(self._max_retries):
            time.sleep(0)
            copy = self._pread(layout.slot_size, offset)
            after = _U64.unpack_from(copy, layout.slot_seqlock)[0]
            if before == after and after & 1 == 0:
                return _SLOTS[layout.name].unpack_from(copy)
            before = after
        raise RegionUnstableError(
            self._path, f"slot {index} still changing after {self._max_retries} tries"
        )


def _process(layout: RegionLayout, values: tuple[int, ...], device_num: int) -> ProcessUsage:
    used_words = layout.used_stride // 8
    util_words = layout.util_stride // 8
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
