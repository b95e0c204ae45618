"""libvgpu enforces what the CDI path asks for, on a real GPU.

The env and mounts come from the same builders the kubelet plugin uses for a
4 GiB / 30 % share (`build_container_edits` + `build_claim_spec`). They are
applied to a host process the way a runtime applies them to a container: the
env as written, the library mount as a preload (`/etc/ld.so.preload` cannot be
mounted without a container), and the claim cache dir, which a claim mounts at
its host path. A small CUDA probe (probe.cu, built with nvcc) then measures.

Needs a GPU, nvcc (for the probe) and the library as HAMi releases it:
`LIBVGPU_SO=/path/to/libvgpu.so`, e.g. `/k8s-vgpu/lib/nvidia/libvgpu.so.v2.9.0`
copied out of `projecthami/hami:v2.9.0`, or the file the image ships at
`/usr/local/lib/hami/libvgpu.so`. This test builds no HAMi-core. Skipped with
the reason otherwise.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from cdi.spec import ClaimDeviceEdits, build_claim_spec
from libvgpu.cache_paths import claim_cache_location
from libvgpu.container_edits import DeviceShare, ShareSet, build_container_edits
from libvgpu.host_gpus import open_host_backend
from libvgpu.monitor import MonitorSettings, VgpuMonitor
from libvgpu.owners import ClaimIndex, ClaimResolver, CombinedResolver, LegacyPodResolver, PodIndex
from libvgpu.region_reader import read_region
from libvgpu.settings import LibvgpuPaths

GIB = 1 << 30
MIB = 1 << 20
SHARE_MEMORY = 4 * GIB
SHARE_CORES = 30
COMPUTE_SECONDS = 8.0
HOLD_MIB = 1024
PROBE_TIMEOUT_S = 120


def _skip_reason() -> str | None:
    library = os.environ.get("LIBVGPU_SO", "")
    if not library:
        return "LIBVGPU_SO is not set (the path of HAMi's released libvgpu.so)"
    if not Path(library).is_file():
        return f"LIBVGPU_SO={library} is not a file"
    if shutil.which("nvcc") is None:
        return "nvcc is not installed"
    if (
        shutil.which("nvidia-smi") is None
        or subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode
    ):
        return "no NVIDIA GPU on this machine"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


@dataclass(frozen=True)
class Gpu:
    uuid: str
    index: int
    minor: int


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary = tmp_path_factory.mktemp("probe") / "probe"
    source = Path(__file__).with_name("probe.cu")
    subprocess.run(["nvcc", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


@pytest.fixture(scope="module")
def libvgpu_so() -> Path:
    """The library under test: LIBVGPU_SO, checked by the skip condition."""
    return Path(os.environ["LIBVGPU_SO"])


@pytest.fixture(scope="module")
def gpu() -> Gpu:
    line = subprocess.run(
        ["nvidia-smi", "--query-gpu=uuid,index", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()[0]
    gpu_uuid, index = (part.strip() for part in line.split(","))
    return Gpu(gpu_uuid, int(index), int(index))


@dataclass(frozen=True)
class AppliedShare:
    env: dict[str, str]
    cache_file: Path
    cache_root: Path
    claim_uid: str


@pytest.fixture
def share(tmp_path: Path, gpu: Gpu, libvgpu_so: Path) -> Iterator[AppliedShare]:
    """The CDI edits for a 4 GiB / 30 % share, applied to a host process environment."""
    host_dir = tmp_path / "vgpu"
    host_dir.mkdir()
    shutil.copy(libvgpu_so, host_dir / "libvgpu.so")
    (host_dir / "ld.so.preload").write_text(f"{host_dir / 'libvgpu.so'}\n")
    lock_dir = tmp_path / "vgpulock"
    lock_dir.mkdir(mode=0o1777)
    paths = LibvgpuPaths(
        host_dir=str(host_dir),
        container_library_path=str(host_dir / "libvgpu.so"),
        lock_dir=str(lock_dir),
        cache_root=str(host_dir),
    )
    claim_uid = str(uuid.uuid4())
    cache = claim_cache_location(paths, claim_uid, uuid.uuid4().hex)
    Path(cache.host_dir).mkdir(parents=True)
    edits = build_container_edits(
        ShareSet(
            devices=(DeviceShare(gpu.uuid, gpu.index, SHARE_MEMORY, SHARE_CORES),),
            cache=cache,
        ),
        paths,
    )
    spec = build_claim_spec(
        claim_uid,
        [ClaimDeviceEdits(device=f"gpu-{gpu.index}", gpu_minor=gpu.minor, edits=edits)],
    ).to_document()
    env = dict(os.environ)
    for edit in [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]:
        env.update(entry.split("=", 1) for entry in edit.get("env", []))
        for mount in edit.get("mounts", []):
            assert Path(mount["hostPath"]).exists(), f"CDI mount source missing: {mount}"
            if mount["containerPath"] == paths.container_library_path:
                env["LD_PRELOAD"] = mount["hostPath"]
            elif mount["containerPath"] not in (paths.container_preload_path, mount["hostPath"]):
                pytest.fail(f"the claim path should mount {mount} at its host path")
    # Outside a container NVIDIA_VISIBLE_DEVICES does nothing; pin CUDA to the same GPU.
    env["CUDA_VISIBLE_DEVICES"] = str(gpu.index)
    yield AppliedShare(env, Path(cache.host_file), host_dir, claim_uid)


def _run(probe: Path, env: dict[str, str] | None, *args: str) -> str:
    done = subprocess.run(
        [str(probe), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _kernels_per_second(line: str) -> float:
    _, kernels, _, seconds = line.split()
    return int(kernels) / float(seconds)


def test_allocation_past_the_memory_limit_fails_out_of_memory(probe: Path, share: AppliedShare):
    _, allocated, _, code, name = _run(probe, share.env, "alloc").split()
    assert name == "cudaErrorMemoryAllocation", f"refused with {name} ({code})"
    assert int(allocated) <= SHARE_MEMORY
    # The context takes a little of the share; the rest is allocatable.
    assert int(allocated) >= SHARE_MEMORY - 1 * GIB
    print(f"allocated {int(allocated) / GIB:.2f} GiB of a {SHARE_MEMORY / GIB:.0f} GiB share")


def test_compute_bound_kernel_runs_at_the_core_share(probe: Path, share: AppliedShare):
    unrestricted = _kernels_per_second(_run(probe, None, "compute", str(COMPUTE_SECONDS)))
    limited = _kernels_per_second(_run(probe, share.env, "compute", str(COMPUTE_SECONDS)))
    ratio = limited / unrestricted
    print(f"throughput {limited:.1f}/s vs {unrestricted:.1f}/s unrestricted: {ratio:.1%}")
    assert SHARE_CORES - 10 <= ratio * 100 <= SHARE_CORES + 10


async def test_monitor_reads_the_region_the_library_wrote(probe: Path, share: AppliedShare):
    holder = await asyncio.create_subprocess_exec(
        str(probe),
        "hold",
        str(HOLD_MIB),
        env=share.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdin is not None
        line = await asyncio.wait_for(holder.stdout.readline(), PROBE_TIMEOUT_S)
        assert line.strip() == b"holding", line

        snapshot = read_region(str(share.cache_file))
        used = sum(device.used_bytes for device in snapshot.devices)
        assert HOLD_MIB * MIB <= used <= HOLD_MIB * MIB + 1 * GIB

        settings = MonitorSettings(host="127.0.0.1", port=0, cache_root=str(share.cache_root))
        claims = ClaimIndex()
        claims.on_add(
            {
                "metadata": {"uid": share.claim_uid, "name": "probe", "namespace": "gpu-test"},
                "status": {"reservedFor": [{"resource": "pods", "name": "probe", "uid": "p"}]},
            }
        )
        resolver = CombinedResolver(ClaimResolver(claims), LegacyPodResolver(PodIndex()))
        monitor = VgpuMonitor(settings, resolver, open_host_backend(), CollectorRegistry())
        async with monitor, aiohttp.ClientSession() as session:
            url = f"http://127.0.0.1:{monitor.port}/metrics"
            async with session.get(url) as response:
                text = await response.text()
        samples = [
            sample
            for family in text_string_to_metric_families(text)
            if family.name == "hami_vgpu_memory_used_bytes"
            for sample in family.samples
        ]
        assert samples, "the monitor exported no vGPU memory series"
        assert HOLD_MIB * MIB <= max(s.value for s in samples) <= HOLD_MIB * MIB + 1 * GIB
        print(f"region and monitor agree: {used / MIB:.0f} MiB used")
    finally:
        if holder.stdin is not None:
            holder.stdin.write(b"done\n")
            await holder.stdin.drain()
        await asyncio.wait_for(holder.wait(), PROBE_TIMEOUT_S)
