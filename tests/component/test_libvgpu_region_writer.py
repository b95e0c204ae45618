"""An independent writer of libvgpu shared-region files, for the reader's and monitor's tests.

Offsets are copied from the reference notes (libvgpu-and-hami-dra.md §A2, and
HAMi's Go v0 struct for the old layout), not imported from `libvgpu`, so a
wrong offset in the reader cannot be mirrored here. The tests in this module
check those numbers once more against the reference's own ctypes definition.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import sys
import threading
from dataclasses import dataclass, field

MAGIC = 19920718

V1 = {
    "size": 2008952,
    "file": 2008953,
    "device_num": 56,
    "uuids": 64,
    "limit": 1600,
    "sm_limit": 1728,
    "procs": 1856,
    "proc_num": 2008896,
    "utilization_switch": 2008900,
    "recent_kernel": 2008904,
    "priority": 2008908,
    "last_kernel_time": 2008912,
    "slot": 1960,
    "used": 8,
    "used_stride": 64,
    "monitorused": 1032,
    "device_util": 1160,
    "util_stride": 48,
    "status": 1928,
    "seqlock": 1936,
}

V0 = {
    "size": 1197896,
    "file": 1197897,
    "device_num": 48,
    "uuids": 56,
    "limit": 1592,
    "sm_limit": 1720,
    "procs": 1848,
    "proc_num": 1197880,
    "utilization_switch": 1197884,
    "recent_kernel": 1197888,
    "priority": 1197892,
    "slot": 1168,
    "used": 8,
    "used_stride": 40,
    "monitorused": 648,
    "device_util": 776,
    "util_stride": 24,
    "status": 1160,
}


@dataclass
class Proc:
    pid: int
    hostpid: int = 0
    status: int = 1
    used: dict[int, tuple[int, int, int, int]] = field(default_factory=dict)
    """device -> (context_size, module_size, data_size, total)."""

    monitorused: dict[int, int] = field(default_factory=dict)
    sm_util: dict[int, int] = field(default_factory=dict)
    seqlock: int = 0


@dataclass
class Region:
    version: str = "v1"
    minor: int = 2
    uuids: list[str] = field(default_factory=list)
    limits: list[int] = field(default_factory=list)
    sm_limits: list[int] = field(default_factory=list)
    procs: list[Proc] = field(default_factory=list)
    proc_num: int | None = None
    utilization_switch: int = 1
    recent_kernel: int = 2
    priority: int = 1
    last_kernel_time: int = 0
    magic: int = MAGIC


def region_bytes(region: Region) -> bytearray:
    layout = V1 if region.version == "v1" else V0
    buffer = bytearray(layout["file"])
    struct.pack_into("<i", buffer, 0, region.magic)
    if region.version == "v1":
        struct.pack_into("<II", buffer, 4, 1, region.minor)
        struct.pack_into("<Q", buffer, layout["last_kernel_time"], region.last_kernel_time)
    struct.pack_into("<Q", buffer, layout["device_num"], len(region.uuids))
    for index, uuid in enumerate(region.uuids):
        encoded = uuid.encode()
        buffer[layout["uuids"] + 96 * index : layout["uuids"] + 96 * index + len(encoded)] = encoded
    for index, value in enumerate(region.limits):
        struct.pack_into("<Q", buffer, layout["limit"] + 8 * index, value)
    for index, value in enumerate(region.sm_limits):
        struct.pack_into("<Q", buffer, layout["sm_limit"] + 8 * index, value)
    for slot_index, proc in enumerate(region.procs):
        write_slot(buffer, layout, slot_index, proc)
    proc_num = len(region.procs) if region.proc_num is None else region.proc_num
    struct.pack_into(
        "<iiii",
        buffer,
        layout["proc_num"],
        proc_num,
        region.utilization_switch,
        region.recent_kernel,
        region.priority,
    )
    return buffer


def write_slot(buffer, layout: dict[str, int], slot_index: int, proc: Proc) -> None:
    base = layout["procs"] + slot_index * layout["slot"]
    struct.pack_into("<ii", buffer, base, proc.pid, proc.hostpid)
    for device, (context, module, data, total) in proc.used.items():
        offset = base + layout["used"] + device * layout["used_stride"]
        struct.pack_into("<QQQ", buffer, offset, context, module, data)
        struct.pack_into("<Q", buffer, offset + 32, total)
    for device, value in proc.monitorused.items():
        struct.pack_into("<Q", buffer, base + layout["monitorused"] + 8 * device, value)
    for device, value in proc.sm_util.items():
        offset = base + layout["device_util"] + device * layout["util_stride"] + 16
        struct.pack_into("<Q", buffer, offset, value)
    struct.pack_into("<i", buffer, base + layout["status"], proc.status)
    if "seqlock" in layout:
        struct.pack_into("<Q", buffer, base + layout["seqlock"], proc.seqlock)


def write_region(path, region: Region) -> None:
    with open(path, "wb") as handle:
        handle.write(region_bytes(region))


def toggle_forever(path: str, devices: int) -> None:
    """Concurrent writer: rewrites slot 0 field by field under its seqlock, forever.

    Every consistent copy has the same counter in each used total, monitorused
    and sm_util of every device; a torn copy mixes two counters.
    """
    with open(path, "r+b") as handle:
        region = mmap.mmap(handle.fileno(), 0)
    base = V1["procs"]
    seqlock_at = base + V1["seqlock"]
    counter = 0
    announced = False
    while True:
        sequence = struct.unpack_from("<Q", region, seqlock_at)[0]
        struct.pack_into("<Q", region, seqlock_at, sequence + 1)
        counter += 1
        for device in range(devices):
            struct.pack_into(
                "<Q", region, base + V1["used"] + device * V1["used_stride"] + 32, counter
            )
            struct.pack_into("<Q", region, base + V1["monitorused"] + 8 * device, counter)
            struct.pack_into(
                "<Q", region, base + V1["device_util"] + device * V1["util_stride"] + 16, counter
            )
        struct.pack_into("<Q", region, seqlock_at, sequence + 2)
        if not announced:
            sys.stdout.write("ready\n")
            sys.stdout.flush()
            announced = True


CHURN_SIZES = (0, 4096, 5000, V1["file"] // 2)
"""Sizes a churned file passes through: empty, one page, a header only, half a region."""


def churn_until_stdin_closes(paths: list[str], content: bytes) -> None:
    """Concurrent writer: truncates each file in place and rewrites it, until stdin closes.

    Each round shrinks every file to the next of `CHURN_SIZES`, grows it back
    (zeros) and writes the non-zero pages of `content`, so a reader sees every
    stage: short, zeroed, half written, whole. Prints "ready" after the first
    round and the number of rounds at the end; the files are whole when it exits.
    """
    stop = threading.Event()

    def wait_for_eof() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=wait_for_eof, daemon=True).start()
    page = mmap.PAGESIZE
    pieces = [
        (offset, content[offset : offset + page])
        for offset in range(0, len(content), page)
        if any(content[offset : offset + page])
    ]
    descriptors = [os.open(path, os.O_RDWR) for path in paths]
    rounds = 0
    try:
        while not stop.is_set():
            shrink_to = CHURN_SIZES[rounds % len(CHURN_SIZES)]
            for descriptor in descriptors:
                os.ftruncate(descriptor, shrink_to)
                os.ftruncate(descriptor, len(content))
                for offset, piece in pieces:
                    os.pwrite(descriptor, piece, offset)
            rounds += 1
            if rounds == 1:
                sys.stdout.write("ready\n")
                sys.stdout.flush()
    finally:
        for descriptor in descriptors:
            os.close(descriptor)
    sys.stdout.write(f"{rounds}\n")
    sys.stdout.flush()


class _DevMem(ctypes.Structure):
    _fields_ = [
        ("context_size", ctypes.c_uint64),
        ("module_size", ctypes.c_uint64),
        ("data_size", ctypes.c_uint64),
        ("offset", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("unused", ctypes.c_uint64 * 3),
    ]


class _DevUtil(ctypes.Structure):
    _fields_ = [
        ("dec_util", ctypes.c_uint64),
        ("enc_util", ctypes.c_uint64),
        ("sm_util", ctypes.c_uint64),
        ("unused", ctypes.c_uint64 * 3),
    ]


class _ProcSlot(ctypes.Structure):
    _fields_ = [
        ("pid", ctypes.c_int32),
        ("hostpid", ctypes.c_int32),
        ("used", _DevMem * 16),
        ("monitorused", ctypes.c_uint64 * 16),
        ("device_util", _DevUtil * 16),
        ("status", ctypes.c_int32),
        ("seqlock", ctypes.c_uint64),
        ("unused", ctypes.c_uint64 * 2),
    ]


class _SharedRegion(ctypes.Structure):
    _fields_ = [
        ("initialized_flag", ctypes.c_int32),
        ("major_version", ctypes.c_uint32),
        ("minor_version", ctypes.c_uint32),
        ("sm_init_flag", ctypes.c_int32),
        ("owner_pid", ctypes.c_size_t),
        ("sem", ctypes.c_char * 32),
        ("device_num", ctypes.c_uint64),
        ("uuids", (ctypes.c_char * 96) * 16),
        ("limit", ctypes.c_uint64 * 16),
        ("sm_limit", ctypes.c_uint64 * 16),
        ("procs", _ProcSlot * 1024),
        ("proc_num", ctypes.c_int32),
        ("utilization_switch", ctypes.c_int32),
        ("recent_kernel", ctypes.c_int32),
        ("priority", ctypes.c_int32),
        ("last_kernel_time", ctypes.c_uint64),
        ("sem_postinit", ctypes.c_char * 32),
    ]


def test_v1_offsets_match_the_reference_ctypes_definition():
    assert ctypes.sizeof(_SharedRegion) == V1["size"] == V1["file"] - 1
    assert ctypes.sizeof(_ProcSlot) == V1["slot"]
    for name in ("device_num", "uuids", "limit", "sm_limit", "procs", "proc_num"):
        assert getattr(_SharedRegion, name).offset == V1[name]
    for name in ("utilization_switch", "recent_kernel", "priority", "last_kernel_time"):
        assert getattr(_SharedRegion, name).offset == V1[name]
    for name in ("used", "monitorused", "device_util", "status", "seqlock"):
        assert getattr(_ProcSlot, name).offset == V1[name]
    assert ctypes.sizeof(_DevMem) == V1["used_stride"]
    assert _DevMem.total.offset == 32
    assert ctypes.sizeof(_DevUtil) == V1["util_stride"]
    assert _DevUtil.sm_util.offset == 16


def test_v0_offsets_add_up_to_the_documented_file_size():
    slots_end = V0["procs"] + 1024 * V0["slot"]
    assert slots_end == V0["proc_num"]
    assert V0["priority"] + 4 == V0["size"] == V0["file"] - 1
    assert V0["device_util"] + 16 * V0["util_stride"] == V0["status"]


def test_writer_places_fields_where_the_reference_says():
    proc = Proc(pid=7, hostpid=70, used={1: (1, 2, 3, 6)}, monitorused={1: 9}, sm_util={1: 5})
    buffer = region_bytes(Region(uuids=["GPU-a", "GPU-b"], limits=[10, 20], procs=[proc]))
    region = _SharedRegion.from_buffer(buffer)
    assert region.initialized_flag == MAGIC
    assert (region.major_version, region.minor_version) == (1, 2)
    assert region.device_num == 2
    assert bytes(region.uuids[1]).rstrip(b"\0") == b"GPU-b"
    assert list(region.limit[:2]) == [10, 20]
    assert region.proc_num == 1
    slot = region.procs[0]
    assert (slot.pid, slot.hostpid, slot.status) == (7, 70, 1)
    assert slot.used[1].total == 6
    assert slot.used[1].data_size == 3
    assert slot.monitorused[1] == 9
    assert slot.device_util[1].sm_util == 5
    del region, slot
