"""Lines kept between scrapes are never stale: a changed file, owner or second shows at once."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from test_libvgpu_region_writer import Proc, Region, write_region
from test_monitor_http import CLAIM_UID, GIB, POD_UID, UUID_A, claim_object

from libvgpu.cache_files import CacheFiles
from libvgpu.cache_paths import CacheFileKey, CacheOwnerKind
from libvgpu.host_gpus import StaticHostBackend
from libvgpu.metrics import VgpuMetrics
from libvgpu.owners import ClaimIndex, ClaimResolver

OTHER_POD_UID = "0b7e3c52-5555-4a2b-9c3d-000000000005"
LAST_KERNEL = 1_700_000_000


class Clock:
    def __init__(self) -> None:
        self.now = LAST_KERNEL + 5.5

    def __call__(self) -> float:
        return self.now


def write(path: Path, used: int) -> None:
    write_region(
        path,
        Region(
            uuids=[UUID_A],
            limits=[4 * GIB],
            procs=[Proc(pid=5, used={0: (0, 0, used, used)})],
            last_kernel_time=LAST_KERNEL,
        ),
    )


def families(metrics: VgpuMetrics) -> dict[str, dict[str, float]]:
    """Family -> pod label -> value, checking no series repeats within a family."""
    result = {}
    for family in text_string_to_metric_families(metrics.render()):
        keys = [tuple(sorted(sample.labels.items())) for sample in family.samples]
        assert not [key for key, count in Counter(keys).items() if count > 1], family.name
        result[family.name] = {sample.labels.get("pod"): sample.value for sample in family.samples}
    return result


def test_kept_lines_follow_the_file_the_owners_and_the_clock(tmp_path):
    path = tmp_path / "claims" / CLAIM_UID / ("a" * 32 + ".cache")
    path.parent.mkdir(parents=True)
    write(path, GIB)
    files = CacheFiles()
    files.add(str(path), CacheFileKey(CacheOwnerKind.CLAIM, CLAIM_UID))
    claims = ClaimIndex()
    claims.on_add(claim_object(CLAIM_UID, "shared-gpu", [("worker-0", POD_UID)]))
    clock = Clock()
    metrics = VgpuMetrics(files, ClaimResolver(claims), StaticHostBackend(), "n", clock=clock)

    first = families(metrics)
    assert families(metrics) == first
    write(path, 2 * GIB)
    changed_file = families(metrics)
    claims.on_add(
        claim_object(CLAIM_UID, "shared-gpu", [("worker-0", POD_UID), ("worker-1", OTHER_POD_UID)])
    )
    changed_owners = families(metrics)
    clock.now += 1
    next_second = families(metrics)

    assert first["hami_vgpu_memory_used_bytes"] == {"worker-0": GIB}
    assert changed_file["hami_vgpu_memory_used_bytes"] == {"worker-0": 2 * GIB}
    assert changed_owners["hami_vgpu_memory_used_bytes"] == {
        "worker-0": 2 * GIB,
        "worker-1": 2 * GIB,
    }
    elapsed = "hami_container_last_kernel_elapsed_seconds"
    assert changed_owners[elapsed] == {"worker-0": 5, "worker-1": 5}
    assert next_second[elapsed] == {"worker-0": 6, "worker-1": 6}


def test_a_file_that_goes_takes_its_lines_with_it(tmp_path):
    path = tmp_path / "claims" / CLAIM_UID / ("a" * 32 + ".cache")
    path.parent.mkdir(parents=True)
    write(path, GIB)
    files = CacheFiles()
    files.add(str(path), CacheFileKey(CacheOwnerKind.CLAIM, CLAIM_UID))
    claims = ClaimIndex()
    claims.on_add(claim_object(CLAIM_UID, "shared-gpu", [("worker-0", POD_UID)]))
    metrics = VgpuMetrics(files, ClaimResolver(claims), StaticHostBackend(), "n", clock=Clock())
    assert families(metrics)["hami_vgpu_memory_used_bytes"] == {"worker-0": GIB}

    path.unlink()

    assert families(metrics)["hami_vgpu_memory_used_bytes"] == {}


def test_a_claims_views_on_one_gpu_are_one_series_with_their_sums(tmp_path):
    """Containers naming different requests of one claim get a region file each
    (claim_layout); two of them on the same GPU must not repeat a series."""
    claim_dir = tmp_path / "claims" / CLAIM_UID
    claim_dir.mkdir(parents=True)
    files = CacheFiles()
    for name, limit, used in (("a" * 32, GIB, GIB // 2), ("a" * 32 + "-1", 2 * GIB, GIB)):
        write_region(
            claim_dir / f"{name}.cache",
            Region(
                uuids=[UUID_A],
                limits=[limit],
                procs=[Proc(pid=5, used={0: (0, 0, used, used)})],
                last_kernel_time=LAST_KERNEL,
            ),
        )
        files.add(str(claim_dir / f"{name}.cache"), CacheFileKey(CacheOwnerKind.CLAIM, CLAIM_UID))
    claims = ClaimIndex()
    claims.on_add(claim_object(CLAIM_UID, "split-requests", [("worker-0", POD_UID)]))
    metrics = VgpuMetrics(files, ClaimResolver(claims), StaticHostBackend(), "n", clock=Clock())

    first = families(metrics)

    assert first["hami_vgpu_memory_used_bytes"] == {"worker-0": GIB + GIB // 2}
    assert first["hami_vgpu_memory_limit_bytes"] == {"worker-0": 3 * GIB}
    assert first["hami_container_last_kernel_elapsed_seconds"] == {"worker-0": 5}
    assert families(metrics) == first
