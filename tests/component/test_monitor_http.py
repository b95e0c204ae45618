"""The vGPU monitor over real HTTP: region files written to a temp cache root, scraped, parsed."""

from __future__ import annotations

import asyncio
import shutil
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from test_libvgpu_region_writer import Proc, Region, write_region

from libvgpu.cache_watcher import WatchSettings
from libvgpu.host_gpus import HostGpu, StaticHostBackend
from libvgpu.monitor import MonitorSettings, VgpuMonitor, run_monitor
from libvgpu.owners import ClaimIndex, ClaimResolver, CombinedResolver, LegacyPodResolver, PodIndex

CLAIM_UID = "0b7e3c52-1111-4a2b-9c3d-000000000001"
POD_UID = "0b7e3c52-2222-4a2b-9c3d-000000000002"
LEGACY_POD_UID = "0b7e3c52-3333-4a2b-9c3d-000000000003"
NEW_CLAIM_UID = "0b7e3c52-4444-4a2b-9c3d-000000000004"
UUID_A = "GPU-0a1b2c3d-0000-1111-2222-333344445555"
UUID_B = "GPU-9f8e7d6c-0000-1111-2222-333344445555"
GIB = 1 << 30
FAST_WATCH = WatchSettings(debounce_ms=200, step_ms=10, idle_tick_ms=100)
HANG_GUARD_S = 30


def claim_object(uid: str, name: str, pods: list[tuple[str, str]]) -> dict:
    return {
        "metadata": {"uid": uid, "name": name, "namespace": "team-a"},
        "status": {
            "reservedFor": [
                {"resource": "pods", "name": pod, "uid": pod_uid} for pod, pod_uid in pods
            ]
        },
    }


def pod_object(uid: str, name: str, namespace: str) -> dict:
    return {"metadata": {"uid": uid, "name": name, "namespace": namespace}}


def region(limit: int, used: int, sm_util: int, last_kernel_time: int = 0) -> Region:
    return Region(
        uuids=[UUID_A],
        limits=[limit],
        sm_limits=[50],
        procs=[Proc(pid=5, used={0: (1000, 0, used - 1000, used)}, sm_util={0: sm_util})],
        last_kernel_time=last_kernel_time,
    )


@pytest.fixture
def cache_root(tmp_path: Path) -> Path:
    root = tmp_path / "vgpu"
    claim_dir = root / "claims" / CLAIM_UID
    legacy_dir = root / "containers" / f"{LEGACY_POD_UID}_trainer"
    claim_dir.mkdir(parents=True)
    legacy_dir.mkdir(parents=True)
    write_region(claim_dir / ("a" * 32 + ".cache"), region(4 * GIB, 3 * GIB, 40, 1_000))
    write_region(legacy_dir / ("b" * 32 + ".cache"), region(2 * GIB, GIB, 7))
    (legacy_dir / "libvgpu.so").write_bytes(b"not a region")
    return root


@dataclass
class Harness:
    monitor: VgpuMonitor
    claims: ClaimIndex
    pods: PodIndex

    @property
    def port(self) -> int:
        return self.monitor.port

    @property
    def watcher(self):
        return self.monitor.watcher

    @property
    def files(self):
        return self.monitor.files


@pytest.fixture
async def monitor(cache_root: Path):
    claims = ClaimIndex()
    claims.on_add(claim_object(CLAIM_UID, "shared-gpu", [("worker-0", POD_UID)]))
    pods = PodIndex()
    pods.apply_event("ADDED", pod_object(LEGACY_POD_UID, "legacy-pod", "team-b"))
    host = StaticHostBackend([HostGpu(0, UUID_A, "NVIDIA-H100", 5 * GIB, 63, 21)])
    settings = MonitorSettings(
        host="127.0.0.1", port=0, cache_root=str(cache_root), node_name="node-1", watch=FAST_WATCH
    )
    monitor = VgpuMonitor(
        settings,
        CombinedResolver(ClaimResolver(claims), LegacyPodResolver(pods)),
        host,
        CollectorRegistry(),
    )
    async with monitor:
        yield Harness(monitor, claims, pods)


async def scrape(port: int) -> dict[str, list]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def series(families: dict[str, list], name: str) -> dict[tuple, float]:
    return {tuple(sorted(sample.labels.items())): sample.value for sample in families.get(name, [])}


def container_labels(namespace, pod, container, claim_uid, index="0", uuid=UUID_A) -> tuple:
    return tuple(
        sorted(
            {
                "zone": "vGPU",
                "namespace": namespace,
                "pod": pod,
                "container": container,
                "vdevice_index": index,
                "device_uuid": uuid,
                "claim_uid": claim_uid,
            }.items()
        )
    )


CLAIM_SERIES = container_labels("team-a", "worker-0", "", CLAIM_UID)
LEGACY_SERIES = container_labels("team-b", "legacy-pod", "trainer", "")


async def test_scrape_reports_the_files_written(monitor):
    families = await scrape(monitor.port)

    assert series(families, "hami_vgpu_memory_used_bytes") == {
        CLAIM_SERIES: 3 * GIB,
        LEGACY_SERIES: GIB,
    }
    assert series(families, "hami_vgpu_memory_limit_bytes") == {
        CLAIM_SERIES: 4 * GIB,
        LEGACY_SERIES: 2 * GIB,
    }
    assert series(families, "hami_container_device_memory_bytes")[CLAIM_SERIES] == 3 * GIB
    assert series(families, "hami_container_device_utilization_ratio") == {
        CLAIM_SERIES: 40,
        LEGACY_SERIES: 7,
    }
    assert series(families, "hami_vgpu_memory_context_bytes")[LEGACY_SERIES] == 1000
    assert series(families, "hami_vgpu_memory_buffer_bytes")[LEGACY_SERIES] == GIB - 1000
    elapsed = series(families, "hami_container_last_kernel_elapsed_seconds")
    assert list(elapsed) == [CLAIM_SERIES]
    assert elapsed[CLAIM_SERIES] > 0
    host = tuple(
        sorted(
            {
                "zone": "vGPU",
                "node": "node-1",
                "device_index": "0",
                "device_uuid": UUID_A,
                "device_type": "NVIDIA-H100",
                "vendor": "NVIDIA",
            }.items()
        )
    )
    assert series(families, "hami_host_gpu_memory_used_bytes") == {host: 5 * GIB}
    assert series(families, "hami_host_gpu_utilization_ratio") == {host: 63}
    controller = series(families, "hami_host_gpu_memory_controller_utilization_ratio")
    assert list(controller.values()) == [21]
    assert ("node", "node-1") not in next(iter(controller))


async def test_new_cache_file_appears_after_the_watcher_reports_it(monitor, cache_root):
    monitor.claims.on_add(
        claim_object(NEW_CLAIM_UID, "pair", [("left", POD_UID), ("right", LEGACY_POD_UID)])
    )
    directory = cache_root / "claims" / NEW_CLAIM_UID
    directory.mkdir()
    path = directory / ("c" * 32 + ".cache")
    before = await scrape(monitor.port)
    write_region(path, region(GIB, 5000, 9))
    async with asyncio.timeout(HANG_GUARD_S):
        await monitor.watcher.wait_for(lambda: str(path) in monitor.files.paths())

    after = await scrape(monitor.port)

    new_series = {
        container_labels("team-a", pod, "", NEW_CLAIM_UID): 5000 for pod in ("left", "right")
    }
    assert series(before, "hami_vgpu_memory_used_bytes") == {
        CLAIM_SERIES: 3 * GIB,
        LEGACY_SERIES: GIB,
    }
    assert series(after, "hami_vgpu_memory_used_bytes") == {
        CLAIM_SERIES: 3 * GIB,
        LEGACY_SERIES: GIB,
        **new_series,
    }


async def test_file_of_an_unknown_owner_is_not_reported(monitor, cache_root):
    directory = cache_root / "claims" / NEW_CLAIM_UID
    directory.mkdir()
    path = directory / ("d" * 32 + ".cache")
    write_region(path, region(GIB, 5000, 9))
    async with asyncio.timeout(HANG_GUARD_S):
        await monitor.watcher.wait_for(lambda: str(path) in monitor.files.paths())

    families = await scrape(monitor.port)

    assert set(series(families, "hami_vgpu_memory_used_bytes")) == {CLAIM_SERIES, LEGACY_SERIES}


async def test_deleted_claim_stops_being_reported(monitor):
    monitor.claims.apply_event("DELETED", claim_object(CLAIM_UID, "shared-gpu", []))

    families = await scrape(monitor.port)

    assert set(series(families, "hami_vgpu_memory_used_bytes")) == {LEGACY_SERIES}


async def test_removed_cache_dir_disappears_from_the_next_scrape(monitor, cache_root):
    legacy_dir = cache_root / "containers" / f"{LEGACY_POD_UID}_trainer"
    known = {path for path in monitor.files.paths() if path.startswith(str(legacy_dir))}
    assert known
    generation = monitor.watcher.generation
    shutil.rmtree(legacy_dir)
    async with asyncio.timeout(HANG_GUARD_S):
        await monitor.watcher.wait_for(lambda: not known & monitor.files.paths())
    assert monitor.watcher.generation > generation

    families = await scrape(monitor.port)

    assert series(families, "hami_vgpu_memory_used_bytes") == {CLAIM_SERIES: 3 * GIB}


async def test_initial_scan_finds_existing_files_only(monitor, cache_root):
    assert {Path(path).name for path in monitor.files.paths()} == {
        "a" * 32 + ".cache",
        "b" * 32 + ".cache",
    }


async def test_run_monitor_returns_when_stopped(cache_root):
    stop = asyncio.Event()
    stop.set()
    settings = MonitorSettings(
        host="127.0.0.1", port=0, cache_root=str(cache_root), watch=FAST_WATCH
    )
    async with asyncio.timeout(HANG_GUARD_S):
        await run_monitor(settings, stop, host=StaticHostBackend())
