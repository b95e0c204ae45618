"""The shared-region reader against files written by the independent writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_libvgpu_region_writer import V0, V1, Proc, Region, region_bytes, write_region

from libvgpu.region_reader import (
    RegionFormatError,
    RegionNotReadyError,
    RegionReadError,
    RegionUnstableError,
    read_region,
)

UUID_A = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
UUID_B = "GPU-9f8e7d6c-0000-1111-2222-333344445555"
GIB = 1 << 30


def sample_region(version: str = "v1", minor: int = 2) -> Region:
    return Region(
        version=version,
        minor=minor,
        uuids=[UUID_A, UUID_B],
        limits=[4 * GIB, 2 * GIB],
        sm_limits=[30, 60],
        procs=[
            Proc(
                pid=11,
                hostpid=1011,
                used={0: (100, 0, 400, 500), 1: (7, 0, 3, 10)},
                monitorused={0: 600, 1: 20},
                sm_util={0: 12, 1: 4},
                seqlock=4,
            ),
            Proc(pid=12, hostpid=1012, status=0, used={0: (0, 0, 0, 999)}),
            Proc(pid=13, hostpid=0, status=2, used={0: (1, 0, 1, 2)}, sm_util={0: 3}),
            Proc(pid=14, used={0: (0, 0, 0, 77777)}),
        ],
        proc_num=3,
        utilization_switch=0,
        recent_kernel=-1,
        priority=0,
        last_kernel_time=1_700_000_000,
    )


def read_file(path: Path):
    return read_region(str(path))


@pytest.mark.parametrize(("version", "minor"), [("v1", 2), ("v1", 1), ("v0", 0)])
def test_reads_back_exactly_what_was_written(tmp_path, version, minor):
    path = tmp_path / "region.cache"
    write_region(path, sample_region(version, minor))

    snapshot = read_file(path)

    assert snapshot.layout == version
    assert (snapshot.major_version, snapshot.minor_version) == (
        (1, minor) if version == "v1" else (0, 0)
    )
    assert [process.pid for process in snapshot.processes] == [11, 13]
    first, second = snapshot.processes
    assert (first.host_pid, first.status, second.status) == (1011, 1, 2)
    assert first.used_bytes == (500, 10)
    assert first.monitor_used_bytes == (600, 20)
    assert first.sm_util == (12, 4)
    assert (first.context_bytes, first.data_bytes) == ((100, 7), (400, 3))
    device_a, device_b = snapshot.devices
    assert (device_a.index, device_a.uuid, device_b.uuid) == (0, UUID_A, UUID_B)
    assert (device_a.limit_bytes, device_b.limit_bytes) == (4 * GIB, 2 * GIB)
    assert (device_a.sm_limit_percent, device_b.sm_limit_percent) == (30, 60)
    assert (device_a.used_bytes, device_b.used_bytes) == (502, 10)
    assert (device_a.context_bytes, device_a.data_bytes, device_a.module_bytes) == (101, 401, 0)
    assert (device_a.monitor_used_bytes, device_a.sm_util) == (600, 15)
    assert (snapshot.priority, snapshot.utilization_switch, snapshot.recent_kernel) == (0, 0, -1)
    assert snapshot.last_kernel_time == (1_700_000_000 if version == "v1" else 0)


def test_device_without_uuid_yet_reads_as_empty(tmp_path):
    path = tmp_path / "region.cache"
    region = sample_region()
    region.uuids = ["", UUID_B]
    write_region(path, region)
    assert [device.uuid for device in read_file(path).devices] == ["", UUID_B]


def test_each_read_sees_the_file_as_it_is_now(tmp_path):
    path = tmp_path / "region.cache"
    write_region(path, sample_region())
    assert read_file(path).devices[0].used_bytes == 502
    region = sample_region()
    region.procs[0].used[0] = (0, 0, 0, 1000)
    with open(path, "r+b") as handle:
        handle.write(region_bytes(region))
    assert read_file(path).devices[0].used_bytes == 1002


def test_concurrent_writer_never_yields_a_torn_slot(tmp_path):
    path = tmp_path / "region.cache"
    devices = 4
    write_region(
        path, Region(uuids=[UUID_A] * devices, limits=[GIB] * devices, procs=[Proc(pid=1)])
    )
    script = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from test_libvgpu_region_writer import toggle_forever;"
        "toggle_forever(sys.argv[2], int(sys.argv[3]))"
    )
    writer = subprocess.Popen(
        [sys.executable, "-c", script, str(Path(__file__).parent), str(path), str(devices)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout.readline() == "ready\n"
        counters = set()
        reads = 0
        while len(counters) < 20 and reads < 200_000:
            reads += 1
            try:
                snapshot = read_region(str(path), max_retries=10_000)
            except RegionUnstableError:
                continue
            (process,) = snapshot.processes
            values = {*process.used_bytes, *process.monitor_used_bytes, *process.sm_util}
            assert len(values) == 1, f"torn read: {process}"
            counters |= values
        assert len(counters) >= 20
    finally:
        writer.kill()
        writer.wait()
        writer.stdout.close()


def test_slot_stuck_mid_write_is_a_typed_transient_error(tmp_path):
    path = tmp_path / "region.cache"
    region = sample_region()
    region.procs[0].seqlock = 7
    write_region(path, region)
    with pytest.raises(RegionUnstableError) as raised:
        read_file(path)
    assert raised.value.retry_after > 0


def test_v1_1_file_without_seqlock_reads(tmp_path):
    path = tmp_path / "region.cache"
    write_region(path, sample_region("v1", 1))
    assert read_file(path).devices[0].used_bytes == 502


@pytest.mark.parametrize(
    "content",
    [b"", b"\x00" * 3, bytes(V1["file"])],
    ids=["empty", "shorter-than-header", "zeros-magic-not-yet-set"],
)
def test_file_being_created_is_not_ready(tmp_path, content):
    path = tmp_path / "region.cache"
    path.write_bytes(content)
    with pytest.raises(RegionNotReadyError):
        read_file(path)


def test_truncated_file_is_a_format_error(tmp_path):
    path = tmp_path / "region.cache"
    path.write_bytes(region_bytes(sample_region())[:5000])
    with pytest.raises(RegionFormatError, match="5000"):
        read_file(path)


def test_file_truncated_since_the_last_read_is_a_format_error(tmp_path):
    path = tmp_path / "region.cache"
    write_region(path, sample_region())
    read_file(path)
    os.truncate(path, 4096)
    with pytest.raises(RegionFormatError, match="4096"):
        read_file(path)


def test_oversized_v1_file_reads_its_prefix(tmp_path):
    path = tmp_path / "region.cache"
    path.write_bytes(bytes(region_bytes(sample_region())) + b"\xff" * 8192)
    assert read_file(path).devices[0].limit_bytes == 4 * GIB


@pytest.mark.parametrize("size", [V0["file"] + 1, V1["size"] - 1])
def test_size_between_layouts_is_a_format_error(tmp_path, size):
    path = tmp_path / "region.cache"
    content = region_bytes(sample_region())
    path.write_bytes(bytes(content[:size]) + bytes(max(0, size - len(content))))
    with pytest.raises(RegionFormatError):
        read_file(path)


def test_unknown_major_version_is_a_format_error(tmp_path):
    path = tmp_path / "region.cache"
    content = region_bytes(sample_region())
    content[4] = 2
    path.write_bytes(content)
    with pytest.raises(RegionFormatError, match=r"2\.2"):
        read_file(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("device_num", 17), ("proc_num", 1025), ("proc_num", -1)],
)
def test_impossible_counts_are_format_errors(tmp_path, field, value):
    path = tmp_path / "region.cache"
    content = region_bytes(sample_region())
    width = "<Q" if field == "device_num" else "<i"
    __import__("struct").pack_into(width, content, V1[field], value)
    path.write_bytes(content)
    with pytest.raises(RegionFormatError):
        read_file(path)


def test_symlink_and_fifo_are_refused(tmp_path):
    target = tmp_path / "real.cache"
    write_region(target, sample_region())
    link = tmp_path / "link.cache"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.cache"
    os.mkfifo(fifo)
    with pytest.raises(RegionReadError):
        read_file(link)
    with pytest.raises(RegionFormatError):
        read_file(fifo)


def test_missing_file_is_not_ready(tmp_path):
    with pytest.raises(RegionNotReadyError):
        read_file(tmp_path / "absent.cache")


def check_never_crashes(path: Path, content: bytes) -> None:
    path.write_bytes(content)
    try:
        snapshot = read_file(path)
    except RegionReadError:
        return
    assert len(snapshot.devices) <= 16
    assert len(snapshot.processes) <= 1024


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=4096))
def test_random_small_files_give_typed_errors(tmp_path, content):
    check_never_crashes(tmp_path / "random.cache", content)


_VALID_V1 = bytes(region_bytes(sample_region()))
_VALID_V0 = bytes(region_bytes(sample_region("v0")))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    base=st.sampled_from([_VALID_V1, _VALID_V0]),
    patches=st.lists(
        st.tuples(
            st.one_of(
                st.integers(0, 2048),
                st.integers(V1["procs"], V1["procs"] + 4 * V1["slot"]),
                st.integers(V0["proc_num"] - 64, V0["file"] - 1),
                st.integers(V1["proc_num"] - 64, V1["file"] - 1),
            ),
            st.binary(min_size=1, max_size=64),
        ),
        max_size=8,
    ),
)
def test_random_damage_to_valid_files_gives_typed_error_or_result(tmp_path, base, patches):
    content = bytearray(base)
    for offset, data in patches:
        if offset < len(content):
            end = min(len(content), offset + len(data))
            content[offset:end] = data[: end - offset]
    check_never_crashes(tmp_path / "damaged.cache", bytes(content))


def test_wrong_magic_is_bad_magic_not_a_file_being_created(tmp_path):
    path = tmp_path / "region.cache"
    region = sample_region()
    region.magic = 12345
    write_region(path, region)
    with pytest.raises(RegionFormatError, match="bad magic 12345") as raised:
        read_file(path)
    assert "not yet initialised" not in str(raised.value)
    assert raised.value.path == str(path)
