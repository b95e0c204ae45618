"""Read-only, lock-free reader of libvgpu's shared-region files.

Each read opens the file, copies the parts it needs with `pread` and closes
it; nothing is mapped and nothing is locked. libvgpu's semaphores belong to
the processes in the container, and a reader that took them could stall those
processes. A mapped file that shrinks under a reader raises SIGBUS, which no
Python code can catch; a `pread` past the end just returns fewer bytes, so a
file that is being created, truncated, rewritten or holds garbage yields a
`RegionReadError` and never takes the monitor down.

Per-process slots are copied under the slot's seqlock (odd while a writer is
inside): two bulk copies up to the last live slot are interleaved with reads
of every live slot's seqlock made by calls of their own; a slot is taken when
the three seqlock values agree and are even and its two copies are
identical, and is otherwise copied again the same way. Header
words are single aligned 64/32-bit stores and are taken as-is; magic and
version must match what the layout was chosen from, so a file re-initialised
mid-read is reported as such rather than mixed.

Reading (`read_region_bytes`, I/O) is apart from decoding (`decode_region`,
pure), so a caller can skip decoding a file whose bytes did not change.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import struct
import time
from dataclasses import dataclass, field

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
    priority: int
    utilization_switch: int
    recent_kernel: int
    last_kernel_time: int
    """Unix seconds of the last recorded kernel launch; 0 when none (always 0 in v0)."""

    live_slots: tuple[tuple[int, ...], ...] = field(repr=False)
    """The kept words of each live slot (see `_slot_struct`); `processes` decodes them
    on first use, since a scrape needs only the per-device sums in `devices`."""

    @functools.cached_property
    def processes(self) -> tuple[ProcessUsage, ...]:
        return tuple(_process(values, len(self.devices)) for values in self.live_slots)


_HEADER_PROBE = struct.Struct("<iII")
_U64 = struct.Struct("<Q")
_LIMITS = struct.Struct(f"<{MAX_DEVICES}Q")
_TAIL = struct.Struct("<iiii")
_CONTEXT, _MODULE, _DATA, _TOTAL_KEPT = 0, 1, 2, 3
"""Positions among the four words kept per device from `device_memory_t`
(context@0, module@8, data@16 and total@32; offset@24 is skipped)."""
_PRINTABLE_ASCII = re.compile(rb"[\x21-\x7e]+")
"""A UUID libvgpu has written: printable ASCII without spaces; anything else is not set yet."""


_SLOT_WORDS = 6
"""Words kept per device from a slot: context, module, data, total, monitorused, sm_util."""


@functools.cache
def _slot_struct(layout: RegionLayout, device_num: int) -> struct.Struct:
    """Unpacks just what is kept from one slot, skipping the rest with pad bytes:
    pid, hostpid, (context, module, data, total) per device, monitorused per device,
    sm_util per device, status."""
    assert layout.slot_used + MAX_DEVICES * layout.used_stride == layout.slot_monitor_used
    assert layout.slot_monitor_used + MAX_DEVICES * 8 == layout.slot_device_util
    assert layout.slot_device_util + MAX_DEVICES * layout.util_stride == layout.slot_status
    unused = MAX_DEVICES - device_num
    memory = f"QQQ8xQ{layout.used_stride - 40}x"
    util = f"16xQ{layout.util_stride - 24}x"
    slot = struct.Struct(
        f"<ii{memory * device_num}{unused * layout.used_stride}x"
        f"{device_num}Q{unused * 8}x"
        f"{util * device_num}{unused * layout.util_stride}x"
        "i"
    )
    assert slot.size == layout.slot_status + 4, layout.name
    return slot


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
    if _PRINTABLE_ASCII.fullmatch(text) is None:
        return ""
    return text.decode("ascii")


@dataclass(frozen=True)
class RegionBytes:
    """A consistent copy of the parts of a region file that a snapshot is decoded from.

    Equal copies decode to equal snapshots, so a caller holding the previous
    copy of a file can skip decoding it when nothing in it changed.
    """

    path: str
    layout: RegionLayout
    data: bytes
    """The file from its start through the last of `proc_num` slots, each slot as copied
    under its seqlock."""

    tail: bytes
    """From `proc_num` to the end of the struct."""


def read_region(path: str, max_retries: int = DEFAULT_SEQLOCK_RETRIES) -> RegionSnapshot:
    """One consistent snapshot of the region file at `path`; see `read_region_bytes`."""
    return decode_region(read_region_bytes(path, max_retries))


def read_region_bytes(path: str, max_retries: int = DEFAULT_SEQLOCK_RETRIES) -> RegionBytes:
    """Copy what a snapshot needs from the file at `path`; refuses symlinks and non-files.

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
        return _RegionCopy(path, descriptor, max_retries).copy()
    except OSError as error:
        raise RegionReadError(path, error.strerror or str(error)) from error
    finally:
        os.close(descriptor)


class _RegionCopy:
    """One copy of one open file: every `pread` is checked for a short count."""

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

    def copy(self) -> RegionBytes:
        path = self._path
        info = os.fstat(self._descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise RegionFormatError(path, "not a regular file")
        probe = os.pread(self._descriptor, _HEADER_PROBE.size, 0)
        layout = select_layout(info.st_size, probe, path)
        tail = self._pread(layout.struct_size - layout.proc_num, layout.proc_num)
        proc_num = _TAIL.unpack_from(tail)[0]
        if not 0 <= proc_num <= MAX_PROCESSES:
            raise RegionFormatError(path, f"proc_num {proc_num} out of range")
        end = layout.procs + proc_num * layout.slot_size
        if layout.slot_seqlock is None:
            data = self._pread(end, 0)
            self._check_probe(data, probe)
            return RegionBytes(path, layout, data, tail)
        before = self._seqlocks(layout, proc_num)
        data = self._pread(end, 0)
        self._check_probe(data, probe)
        after = self._seqlocks(layout, proc_num)
        unstable = [
            index for index in range(proc_num) if before[index] & 1 or before[index] != after[index]
        ]
        if unstable:
            patched = bytearray(data)
            for index in unstable:
                start = layout.procs + index * layout.slot_size
                patched[start : start + layout.slot_size] = self._retry_slot(layout, index)
            data = bytes(patched)
        return RegionBytes(path, layout, data, tail)

    def _check_probe(self, copy: bytes, probe: bytes) -> None:
        """Magic and version unchanged since the layout was chosen: not re-created meanwhile."""
        if copy[: _HEADER_PROBE.size] != probe:
            raise RegionFormatError(self._path, "re-initialised while being read")

    def _seqlock(self, layout: RegionLayout, index: int) -> int:
        assert layout.slot_seqlock is not None
        at = layout.procs + index * layout.slot_size + layout.slot_seqlock
        return _U64.unpack(self._pread(_U64.size, at))[0]

    def _seqlocks(self, layout: RegionLayout, proc_num: int) -> list[int]:
        """Each live slot's seqlock, each read by a call of its own.

        Within one `pread` the kernel's copy may load in any order (fast string
        moves are not ordered), so a seqlock word inside a bulk copy proves nothing
        about the data beside it. Two bulk copies are therefore interleaved with
        separate seqlock reads, and a slot is taken only when all three seqlock
        reads agree and are even and both copies of the slot are identical (the
        concurrent-writer test caught torn slots with a single bracketed copy)."""
        return [self._seqlock(layout, index) for index in range(proc_num)]

    def _retry_slot(self, layout: RegionLayout, index: int) -> bytes:
        """Copy one slot again, as `copy` does, until it holds still."""
        start = layout.procs + index * layout.slot_size
        for _ in range(self._max_retries):
            before = self._seqlock(layout, index)
            first = self._pread(layout.slot_size, start)
            middle = self._seqlock(layout, index)
            copy = self._pread(layout.slot_size, start)
            after = self._seqlock(layout, index)
            if before & 1 == 0 and before == middle == after and first == copy:
                return copy
            time.sleep(0)
        raise RegionUnstableError(
            self._path, f"slot {index} still changing after {self._max_retries} tries"
        )


def _slot(layout: RegionLayout, data: bytes, index: int) -> bytes:
    start = layout.procs + index * layout.slot_size
    return data[start : start + layout.slot_size]


def decode_region(raw: RegionBytes) -> RegionSnapshot:
    """The snapshot a consistent copy describes; impossible counts are a `RegionFormatError`."""
    layout = raw.layout
    header = raw.data
    device_num = _U64.unpack_from(header, layout.device_num)[0]
    if device_num > MAX_DEVICES:
        raise RegionFormatError(raw.path, f"device_num {device_num} > {MAX_DEVICES}")
    _, major, minor = _HEADER_PROBE.unpack_from(header)
    if layout.major_version is None:
        major, minor = 0, 0
    _, utilization_switch, recent_kernel, priority = _TAIL.unpack_from(raw.tail)
    last_kernel_time = (
        0
        if layout.last_kernel_time is None
        else _U64.unpack_from(raw.tail, layout.last_kernel_time - layout.proc_num)[0]
    )
    slot = _slot_struct(layout, device_num)
    live = [
        values
        for values in (
            slot.unpack_from(raw.data, offset)
            for offset in range(layout.procs, len(raw.data), layout.slot_size)
        )
        if values[-1] != 0
    ]
    uuids = header[layout.uuids : layout.uuids + MAX_DEVICES * UUID_BYTES]
    limits = _LIMITS.unpack_from(header, layout.limit)
    sm_limits = _LIMITS.unpack_from(header, layout.sm_limit)
    return RegionSnapshot(
        layout=layout.name,
        major_version=major,
        minor_version=minor,
        devices=_devices(device_num, uuids, limits, sm_limits, live),
        priority=priority,
        utilization_switch=utilization_switch,
        recent_kernel=recent_kernel,
        last_kernel_time=last_kernel_time,
        live_slots=tuple(live),
    )


def _process(values: tuple[int, ...], device_num: int) -> ProcessUsage:
    """One slot from its kept words (see `_slot_struct`), by stride slicing."""
    memory_end = 2 + 4 * device_num
    return ProcessUsage(
        pid=values[0],
        host_pid=values[1],
        status=values[-1],
        used_bytes=values[2 + _TOTAL_KEPT : memory_end : 4],
        context_bytes=values[2 + _CONTEXT : memory_end : 4],
        module_bytes=values[2 + _MODULE : memory_end : 4],
        data_bytes=values[2 + _DATA : memory_end : 4],
        monitor_used_bytes=values[memory_end : memory_end + device_num],
        sm_util=values[memory_end + device_num : memory_end + 2 * device_num],
    )


def _devices(
    device_num: int,
    uuids: bytes,
    limits: tuple[int, ...],
    sm_limits: tuple[int, ...],
    live: list[tuple[int, ...]],
) -> tuple[DeviceUsage, ...]:
    """Per device, each kept word summed over the live slots: what libvgpu itself adds up."""
    words = device_num * _SLOT_WORDS
    if live:
        sums = [
            sum(column) for column in zip(*(values[2 : 2 + words] for values in live), strict=True)
        ]
    else:
        sums = [0] * words
    monitor_at = 4 * device_num
    sm_at = monitor_at + device_num
    return tuple(
        DeviceUsage(
            index=index,
            uuid=_decode_uuid(uuids[index * UUID_BYTES : (index + 1) * UUID_BYTES]),
            limit_bytes=limits[index],
            sm_limit_percent=sm_limits[index],
            used_bytes=sums[4 * index + _TOTAL_KEPT],
            context_bytes=sums[4 * index + _CONTEXT],
            module_bytes=sums[4 * index + _MODULE],
            data_bytes=sums[4 * index + _DATA],
            monitor_used_bytes=sums[monitor_at + index],
            sm_util=sums[sm_at + index],
        )
        for index in range(device_num)
    )
