"""MIG on a real card: discovery through NVML against NVIDIA's tables, and one instance
created and destroyed through the kubelet plugin's NVML backend.

Runs only where a card is in MIG mode (current and pending). Turning MIG mode on needs
an administrator's GPU reset, which the lent test machines may not do, so elsewhere the
whole module skips with that reason. On a MIG-mode card it never touches an instance it
did not create: it creates one on a free placement (none free: skipped), checks that
discovery and the monitor see it, destroys it, and checks that every instance present
before is still there, unchanged.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from dra_driver.objects.mig_profiles import MigCard, MigProfile, Placement, mig_card
from kubeletplugin.gpus import GpuInfo, NvmlBackend
from kubeletplugin.mig_state import MigInstance
from libvgpu.host_mig import read_nvml_mig_instances

NO_MIG_CARD = (
    "no MIG-mode card: MIG mode needs an administrator's GPU reset, "
    "which the test machines may not do"
)
MEMORY_TOLERANCE = 0.05
"""Profile memory moves by a few hundred MiB between driver branches (mig_profiles.py)."""


def _load_nvml() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        import pynvml
    return pynvml


def _skip_reason() -> str | None:
    try:
        nvml = _load_nvml()
    except ImportError:
        return "pynvml is not installed"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        return f"no NVIDIA GPU on this machine (NVML: {error})"
    try:
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                current, pending = nvml.nvmlDeviceGetMigMode(handle)
            except nvml.NVMLError:
                continue
            if current == pending == 1:
                return None
        return NO_MIG_CARD
    finally:
        nvml.nvmlShutdown()


SKIP_REASON = _skip_reason()
pytestmark = pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or "")


@pytest.fixture
def backend() -> NvmlBackend:
    return NvmlBackend(_load_nvml())


def _mig_card_info(backend: NvmlBackend) -> GpuInfo:
    return next(gpu for gpu in backend.discover() if gpu.mig.partitionable)


def _table(gpu: GpuInfo) -> MigCard:
    card = mig_card(gpu.product_name, gpu.memory_bytes)
    if card is None:
        pytest.skip(f"{gpu.product_name} has no MIG table here (A100, H100 80GB, H200 only)")
    return card


def test_discovered_profiles_match_nvidias_table(backend: NvmlBackend):
    gpu = _mig_card_info(backend)
    table = _table(gpu)
    found = {profile.name: profile for profile in gpu.mig.profiles}
    assert table.profiles[-1].name in found, f"{gpu.uuid}: no full-card profile in {found}"
    for expected in table.profiles:
        profile = found.get(expected.name)
        if profile is None:
            continue
        where = f"{gpu.uuid} ({gpu.product_name}) {expected.name}"
        assert profile.profile_id == expected.profile_id, where
        assert profile.compute_slices == expected.compute_slices, where
        assert profile.memory_slices == expected.memory_slices, where
        assert profile.max_instances == expected.max_instances, where
        assert profile.placements == expected.placements, where
        if table.memory_from_nvml:
            assert abs(profile.memory_mib - expected.memory_mib) <= (
                expected.memory_mib * MEMORY_TOLERANCE
            ), f"{where}: {profile.memory_mib} MiB, table {expected.memory_mib} MiB"


def test_the_monitor_reads_the_instances_discovery_reads(backend: NvmlBackend):
    gpu = _mig_card_info(backend)
    nvml = backend.nvml
    nvml.nvmlInit()
    try:
        read = read_nvml_mig_instances(nvml, nvml.nvmlDeviceGetHandleByUUID(gpu.uuid))
    finally:
        nvml.nvmlShutdown()
    assert [
        (i.gpu_instance_id, i.compute_instance_id, i.profile, i.placement, i.mig_uuid) for i in read
    ] == [
        (i.gpu_instance_id, i.compute_instance_id, i.profile, i.placement, i.uuid)
        for i in gpu.mig.instances
    ]


def _free_placement(gpu: GpuInfo) -> tuple[MigProfile, Placement] | None:
    """The smallest profile's first placement that overlaps no GPU instance present."""
    taken = [i.placement for i in gpu.mig.instances] + [
        placement for _, _, placement in gpu.mig.empty_gpu_instances
    ]
    gpu_instances = {(i.gpu_instance_id, i.profile) for i in gpu.mig.instances} | {
        (gi, profile) for gi, profile, _ in gpu.mig.empty_gpu_instances
    }
    held = {name: sum(1 for _, p in gpu_instances if p == name) for _, name in gpu_instances}
    for profile in sorted(gpu.mig.profiles, key=lambda p: (p.compute_slices, p.memory_mib)):
        if profile.name.endswith("+me") or held.get(profile.name, 0) >= profile.max_instances:
            continue
        for placement in profile.placements:
            if not any(placement.overlaps(other) for other in taken):
                return profile, placement
    return None


@dataclass
class Created:
    """The instance this test made; `destroyed` once the test took it back itself, so the
    fixture never destroys an id that may since be someone else's."""

    before: GpuInfo
    instance: MigInstance
    destroyed: bool = False


@pytest.fixture
def created(backend: NvmlBackend) -> Iterator[Created]:
    if os.geteuid() != 0:
        pytest.skip("creating a MIG instance needs root (NVML: NO_PERMISSION otherwise)")
    gpu = _mig_card_info(backend)
    free = _free_placement(gpu)
    if free is None:
        pytest.skip(f"{gpu.uuid}: no free placement; the test touches no existing instance")
    profile, placement = free
    made = Created(gpu, backend.create_mig_instance(gpu.uuid, profile.name, placement.start))
    try:
        yield made
    finally:
        if not made.destroyed:
            backend.destroy_mig_instance(
                gpu.uuid, made.instance.gpu_instance_id, made.instance.compute_instance_id
            )


def test_an_instance_is_created_seen_and_destroyed(backend: NvmlBackend, created: Created):
    before, instance = created.before, created.instance
    assert instance.uuid.startswith("MIG-"), instance
    during = next(gpu for gpu in backend.discover() if gpu.uuid == before.uuid)
    assert instance in during.mig.instances
    assert set(during.mig.instances) == {*before.mig.instances, instance}
    backend.destroy_mig_instance(
        before.uuid, instance.gpu_instance_id, instance.compute_instance_id
    )
    created.destroyed = True
    after = next(gpu for gpu in backend.discover() if gpu.uuid == before.uuid)
    assert set(after.mig.instances) == set(before.mig.instances)
    assert instance.placement not in {i.placement for i in after.mig.instances}
