"""MIG discovery through NVML, against a pynvml stand-in shaped as nvidia-ml-py's
(ctypes arrays and counts by reference, NVMLError_NotSupported for a card without MIG)."""

from __future__ import annotations

import ctypes
import warnings

from fake_pynvml import GIB, FakeCard, fake_nvml

from dra_driver.objects.mig_profiles import A100_40GB, H100_80GB, Placement
from kubeletplugin.gpus import NvmlBackend
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.mig_nvml import read_mig
from kubeletplugin.mig_state import MigState

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    import pynvml


def test_the_stand_in_uses_pynvmls_structure_layout():
    fake = fake_nvml([]).c_nvmlGpuInstancePlacement_t
    assert [name for name, _ in fake._fields_] == [
        name for name, _ in pynvml.c_nvmlGpuInstancePlacement_t._fields_
    ]
    assert ctypes.sizeof(fake) == ctypes.sizeof(pynvml.c_nvmlGpuInstancePlacement_t)


def test_mig_card_reports_modes_profiles_placements_and_instances():
    device = MockMigDevice("GPU-h", H100_80GB)
    device.create_compute_instance(device.create_gpu_instance("3g.40gb", 4))
    small = device.create_gpu_instance("1g.10gb", 0)
    gi = device.create_gpu_instance("2g.20gb", 2)
    device.create_compute_instance(gi, 1)
    device.create_compute_instance(gi, 1)
    nvml = fake_nvml([FakeCard("GPU-h", mig=device)])
    (gpu,) = NvmlBackend(nvml).discover()
    state = gpu.mig
    assert state.partitionable and not state.reset_pending
    assert [p.name for p in state.profiles] == [
        "1g.10gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        "1g.10gb+me",
        "1g.20gb",
    ]
    assert {p.name: p for p in state.profiles} == {p.name: p for p in H100_80GB.profiles}
    assert [
        (i.gpu_instance_id, i.compute_instance_id, i.profile, i.placement, i.uuid)
        for i in state.instances
    ] == [
        (gi, 0, "2g.20gb", Placement(2, 2), device.mig_uuid(gi, 0)),
        (gi, 1, "2g.20gb", Placement(2, 2), device.mig_uuid(gi, 1)),
        (1, 0, "3g.40gb", Placement(4, 4), device.mig_uuid(1, 0)),
    ]
    assert state.empty_gpu_instances == ((small, "1g.10gb", Placement(0, 1)),)
    assert nvml.calls == ["init", "shutdown"]


def test_pending_and_disabled_modes_are_read_without_listing_profiles():
    pending = MockMigDevice("GPU-p", A100_40GB)
    pending.pending_enabled = False
    off = MockMigDevice("GPU-o", A100_40GB, enabled=False, pending_enabled=True)
    nvml = fake_nvml(
        [
            FakeCard("GPU-p", "NVIDIA A100-SXM4-40GB", 40 * GIB, mig=pending),
            FakeCard("GPU-o", "NVIDIA A100-SXM4-40GB", 40 * GIB, mig=off),
        ]
    )
    first, second = NvmlBackend(nvml).discover()
    assert first.mig.reset_pending and not first.mig.partitionable
    assert [p.name for p in first.mig.profiles][:2] == ["1g.5gb", "2g.10gb"]
    assert second.mig == MigState(capable=True, enabled=False, pending_enabled=True)


def test_card_without_mig_is_not_capable_and_discovers_as_before():
    nvml = fake_nvml([FakeCard("GPU-l4", "NVIDIA L4", 24 * GIB)])
    (gpu,) = NvmlBackend(nvml).discover()
    assert gpu.mig == MigState()
    assert (gpu.uuid, gpu.product_name, gpu.memory_bytes) == ("GPU-l4", "NVIDIA L4", 24 * GIB)


def test_nameless_profile_info_takes_the_tables_name():
    device = MockMigDevice("GPU-a", A100_40GB)
    nvml = fake_nvml([FakeCard("GPU-a", mig=device)])
    named = nvml.nvmlDeviceGetGpuInstanceProfileInfo

    def nameless(handle, profile):
        info = named(handle, profile)
        info.name = b""
        return info

    nvml.nvmlDeviceGetGpuInstanceProfileInfo = nameless
    card = nvml.nvmlDeviceGetHandleByIndex(0)
    assert [p.name for p in read_mig(nvml, card, A100_40GB).profiles][:3] == [
        "1g.5gb",
        "2g.10gb",
        "3g.20gb",
    ]
    assert read_mig(nvml, card).profiles[0].name == "1g.5gb"
