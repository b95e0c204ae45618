"""Byte layout of libvgpu's shared-region file (HAMi-core `multiprocess_memory_limit.h`).

Offsets are for x86-64 glibc (`sem_t` is 32 bytes). v1.1 and v1.2 share every
offset: v1.2 turned the first proc-slot spare word into `seqlock` and the tail
spare words into `sem_postinit`, so a v1.1 file reads with its seqlock always 0.
The v0 layout predates the version fields and the spare words.
"""

from __future__ import annotations

from dataclasses import dataclass

MAGIC = 19920718
"""`initialized_flag`, stored last by the creating process once the region is set up."""

MAX_DEVICES = 16
MAX_PROCESSES = 1024
UUID_BYTES = 96


@dataclass(frozen=True, eq=False)
class RegionLayout:
    """One known layout; the module's constants are the only instances, so identity is
    equality (cheap when a whole copy of a file is compared with the previous one)."""

    name: str
    struct_size: int
    file_sizes: tuple[int, ...] | None
    """Exact file sizes accepted; None accepts any size from struct_size up."""

    major_version: int | None
    minor_version: int | None
    device_num: int
    uuids: int
    limit: int
    sm_limit: int
    procs: int
    proc_num: int
    utilization_switch: int
    recent_kernel: int
    priority: int
    last_kernel_time: int | None

    slot_size: int
    slot_used: int
    used_stride: int
    """Bytes per `device_memory_t`: context@0, module@8, data@16, offset@24, total@32."""

    slot_monitor_used: int
    slot_device_util: int
    util_stride: int
    """Bytes per `device_util_t`: dec@0, enc@8, sm_util@16."""

    slot_status: int
    slot_seqlock: int | None


V1 = RegionLayout(
    name="v1",
    struct_size=2008952,
    file_sizes=None,
    major_version=4,
    minor_version=8,
    device_num=56,
    uuids=64,
    limit=1600,
    sm_limit=1728,
    procs=1856,
    proc_num=2008896,
    utilization_switch=2008900,
    recent_kernel=2008904,
    priority=2008908,
    last_kernel_time=2008912,
    slot_size=1960,
    slot_used=8,
    used_stride=64,
    slot_monitor_used=1032,
    slot_device_util=1160,
    util_stride=48,
    slot_status=1928,
    slot_seqlock=1936,
)

V0 = RegionLayout(
    name="v0",
    struct_size=1197896,
    file_sizes=(1197896, 1197897),
    major_version=None,
    minor_version=None,
    device_num=48,
    uuids=56,
    limit=1592,
    sm_limit=1720,
    procs=1848,
    proc_num=1197880,
    utilization_switch=1197884,
    recent_kernel=1197888,
    priority=1197892,
    last_kernel_time=None,
    slot_size=1168,
    slot_used=8,
    used_stride=40,
    slot_monitor_used=648,
    slot_device_util=776,
    util_stride=24,
    slot_status=1160,
    slot_seqlock=None,
)

SUPPORTED_MAJOR_VERSION = 1
"""v1 files are recognised by `major_version == 1` and a size of at least V1.struct_size."""
