"""HAMi's figures and names as its vGPU monitor reports them: legacy names, whole seconds, node.

Series are rendered from real region files and parsed with prometheus_client's
parser; the label names are HAMi's (`cmd/vGPUmonitor/metrics.go`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from test_libvgpu_region_writer import Proc, Region, write_region
from test_monitor_http import CLAIM_UID, GIB, POD_UID, UUID_A, claim_object, scrape, series

from dra_driver.cli import build_parser
from libvgpu.cache_files import CacheFiles
from libvgpu.cache_paths import CacheFileKey, CacheOwnerKind
from libvgpu.host_gpus import HostGpu, StaticHostBackend
from libvgpu.metrics import VgpuMetrics
from libvgpu.monitor import MonitorSettings, VgpuMonitor
from libvgpu.owners import ClaimIndex, ClaimResolver

LAST_KERNEL = 1_700_000_000
NOW = LAST_KERNEL + 12.875
HOST = HostGpu(0, UUID_A, "NVIDIA-H100", 5 * GIB, 63, 21)
LEGACY_NAMES = {
    "HostGPUMemoryUsage",
    "HostCoreUtilization",
    "vGPU_device_memory_usage_in_bytes",
    "vGPU_device_memory_limit_in_bytes",
    "Device_memory_desc_of_container",
    "Device_utilization_desc_of_container",
    "Device_last_kernel_of_container",
}


def claims() -> ClaimIndex:
    index = ClaimIndex()
    index.on_add(claim_object(CLAIM_UID, "shared-gpu", [("worker-0", POD_UID)]))
    return index


@pytest.fixture
def cache_file(tmp_path: Path) -> Path:
    path = tmp_path / "claims" / CLAIM_UID / ("a" * 32 + ".cache")
    path.parent.mkdir(parents=True)
    write_region(
        path,
        Region(
            uuids=[UUID_A],
            limits=[4 * GIB],
            procs=[
                Proc(pid=5, used={0: (1000, 200, GIB, GIB + 1500)}, sm_util={0: 30}),
                Proc(pid=6, used={0: (0, 0, 0, 0)}, sm_util={0: 12}),
            ],
            last_kernel_time=LAST_KERNEL,
        ),
    )
    return path


def render(cache_file: Path, *, node: str = "node-1", legacy: bool = False) -> dict[str, list]:
    files = CacheFiles()
    files.add(str(cache_file), CacheFileKey(CacheOwnerKind.CLAIM, CLAIM_UID))
    metrics = VgpuMetrics(
        files,
        ClaimResolver(claims()),
        StaticHostBackend([HOST]),
        node,
        legacy_metrics=legacy,
        clock=lambda: NOW,
    )
    text = metrics.render()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def only(families: dict[str, list], name: str):
    (sample,) = families[name]
    return dict(sample.labels), sample.value


LEGACY_CONTAINER = {
    "zone": "vGPU",
    "podnamespace": "team-a",
    "podname": "worker-0",
    "ctrname": "",
    "vdeviceid": "0",
    "deviceuuid": UUID_A,
    "claim_uid": CLAIM_UID,
}
LEGACY_HOST = {
    "zone": "vGPU",
    "nodeid": "node-1",
    "deviceidx": "0",
    "deviceuuid": UUID_A,
    "devicetype": "NVIDIA-H100",
}


def test_legacy_names_carry_hamis_labels_and_values(cache_file):
    families = render(cache_file, legacy=True)

    assert only(families, "HostGPUMemoryUsage") == (LEGACY_HOST, 5 * GIB)
    assert only(families, "HostCoreUtilization") == (LEGACY_HOST, 63)
    assert only(families, "vGPU_device_memory_usage_in_bytes") == (LEGACY_CONTAINER, GIB + 1500)
    assert only(families, "vGPU_device_memory_limit_in_bytes") == (LEGACY_CONTAINER, 4 * GIB)
    assert only(families, "Device_utilization_desc_of_container") == (LEGACY_CONTAINER, 42)
    assert only(families, "Device_last_kernel_of_container") == (LEGACY_CONTAINER, 12)
    memory_desc = {
        **LEGACY_CONTAINER,
        "context": "1000",
        "module": "200",
        "data": str(GIB),
        "offset": "300",
    }
    assert only(families, "Device_memory_desc_of_container") == (memory_desc, GIB + 1500)


def test_legacy_names_are_absent_unless_asked_for(cache_file):
    assert not LEGACY_NAMES & set(render(cache_file))
    assert set(render(cache_file, legacy=True)) >= LEGACY_NAMES


def test_last_kernel_elapsed_is_whole_seconds(cache_file):
    labels, value = only(render(cache_file), "hami_container_last_kernel_elapsed_seconds")

    assert value == 12
    assert labels["pod"] == "worker-0"


def test_host_series_need_a_node_name(cache_file):
    families = render(cache_file, node="", legacy=True)

    for name in (
        "hami_host_gpu_memory_used_bytes",
        "hami_host_gpu_utilization_ratio",
        "hami_host_gpu_memory_controller_utilization_ratio",
        "HostGPUMemoryUsage",
        "HostCoreUtilization",
    ):
        assert families.get(name, []) == [], name
    assert len(families["hami_vgpu_memory_used_bytes"]) == 1


async def test_monitor_serves_legacy_names_over_http(cache_file):
    settings = MonitorSettings(
        host="127.0.0.1",
        port=0,
        cache_root=str(cache_file.parents[2]),
        node_name="node-1",
        legacy_metrics=True,
    )
    monitor = VgpuMonitor(
        settings, ClaimResolver(claims()), StaticHostBackend([HOST]), CollectorRegistry()
    )
    async with monitor:
        families = await scrape(monitor.port)

    assert series(families, "vGPU_device_memory_usage_in_bytes") == {
        tuple(sorted(LEGACY_CONTAINER.items())): GIB + 1500
    }
    assert series(families, "hami_vgpu_memory_used_bytes") != {}


def test_memory_desc_offset_wraps_like_hamis_uint64(tmp_path):
    path = tmp_path / "claims" / CLAIM_UID / ("b" * 32 + ".cache")
    path.parent.mkdir(parents=True)
    write_region(
        path, Region(uuids=[UUID_A], limits=[GIB], procs=[Proc(pid=5, used={0: (100, 0, 50, 0)})])
    )

    labels, value = only(render(path, legacy=True), "Device_memory_desc_of_container")

    assert (labels["offset"], value) == (str(2**64 - 150), 0)


def test_cli_flag_turns_legacy_names_on():
    parser = build_parser()
    assert parser.parse_args(["monitor", "--legacy-metrics"]).legacy_metrics is True
    assert parser.parse_args(["monitor"]).legacy_metrics is False
