"""Creating and destroying MIG instances through the backends prepare uses (NVML against
the pynvml stand-in, and the mock), the capability minors read from the driver's proc
files, and a partition's CDI device. Card geometry: NVIDIA's H100 80GB table
(dra_driver/objects/mig_profiles.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_pynvml import FakeCard, NVMLError_InsufficientResources, fake_nvml

from cdi.mig import MigDevice, partition_device_edits
from cdi.spec import build_claim_spec
from dra_driver.objects.mig_profiles import H100_80GB, Placement
from kubeletplugin.gpus import MigInstanceManager, MockBackend, NvmlBackend
from kubeletplugin.mig_caps import MigCapabilityError, mig_cap_minors
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.mig_state import (
    MigInsufficientResourcesError,
    MigNotFoundError,
    MigNotSupportedError,
)

UUID = "GPU-0000000000-h100"
UID = "0f1e2d3c-4b5a-4968-8776-a5b4c3d2e1f0"


def nvml_backend() -> tuple[NvmlBackend, MockMigDevice, object]:
    device = MockMigDevice(UUID, H100_80GB)
    module = fake_nvml([FakeCard(UUID, mig=device)])
    return NvmlBackend(module), device, module


def test_nvml_creates_the_gpu_instance_at_the_placement_with_a_full_compute_instance():
    backend, device, _ = nvml_backend()
    assert isinstance(backend, MigInstanceManager)
    made = backend.create_mig_instance(UUID, "3g.40gb", 4)
    (view,) = device.gpu_instances()
    assert (view.profile.name, view.placement) == ("3g.40gb", Placement(4, 4))
    assert view.compute == ((made.compute_instance_id, 3),)
    assert made.uuid == device.mig_uuid(made.gpu_instance_id, made.compute_instance_id)
    assert (made.profile, made.placement) == ("3g.40gb", Placement(4, 4))


def test_nvml_refusing_the_compute_instance_takes_the_gpu_instance_back():
    backend, device, module = nvml_backend()
    module.refuse["nvmlGpuInstanceCreateComputeInstance"] = NVMLError_InsufficientResources
    with pytest.raises(MigInsufficientResourcesError, match=r"3g\.40gb at 0:4"):
        backend.create_mig_instance(UUID, "3g.40gb", 0)
    assert device.gpu_instances() == ()
    assert "nvmlGpuInstanceDestroy" in module.calls


def test_nvml_refuses_a_taken_placement_naming_card_profile_placement_and_what_is_free():
    backend, device, _ = nvml_backend()
    backend.create_mig_instance(UUID, "4g.40gb", 0)
    with pytest.raises(MigInsufficientResourcesError) as refused:
        backend.create_mig_instance(UUID, "2g.20gb", 2)
    message = str(refused.value)
    assert UUID in message and "2g.20gb at 2:2" in message
    assert "free: " in message and "3g.40gb at 4:4" in message
    assert len(device.gpu_instances()) == 1


def test_nvml_refuses_a_profile_the_card_lacks_and_a_card_not_in_mig_mode():
    backend, device, _ = nvml_backend()
    with pytest.raises(MigNotSupportedError, match=r"5g\.50gb not supported"):
        backend.create_mig_instance(UUID, "5g.50gb", 0)
    device.pending_enabled = False
    with pytest.raises(MigNotSupportedError, match="pending a GPU reset"):
        backend.create_mig_instance(UUID, "3g.40gb", 0)


def test_nvml_destroys_compute_then_gpu_instance_and_a_second_destroy_is_not_found():
    backend, device, module = nvml_backend()
    made = backend.create_mig_instance(UUID, "2g.20gb", 4)
    backend.destroy_mig_instance(UUID, made.gpu_instance_id, made.compute_instance_id)
    assert device.gpu_instances() == ()
    calls = [c for c in module.calls if c.endswith("Destroy")]
    assert calls == ["nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"]
    with pytest.raises(MigNotFoundError):
        backend.destroy_mig_instance(UUID, made.gpu_instance_id, made.compute_instance_id)


def test_nvml_destroys_a_gpu_instance_whose_compute_instance_never_came():
    backend, device, _ = nvml_backend()
    gi = device.create_gpu_instance("1g.10gb", 3)
    backend.destroy_mig_instance(UUID, gi, 0)
    assert device.gpu_instances() == ()


def test_the_mock_backend_creates_and_destroys_and_refuses_as_nvml(tmp_path: Path):
    (tmp_path / "gpus.yaml").write_text(
        f"gpus:\n  - {{uuid: {UUID}, index: 0, productName: NVIDIA H100 80GB HBM3, "
        "memory: 80Gi, mig: {mode: enabled}}\n"
    )
    backend = MockBackend(tmp_path / "gpus.yaml")
    with pytest.raises(MigNotSupportedError, match="not a MIG-capable card"):
        backend.create_mig_instance(UUID, "3g.40gb", 0)
    backend.discover()
    made = backend.create_mig_instance(UUID, "3g.40gb", 0)
    with pytest.raises(MigInsufficientResourcesError, match="free: "):
        backend.create_mig_instance(UUID, "4g.40gb", 0)
    (gpu,) = backend.discover()
    assert [(i.profile, i.placement, i.uuid) for i in gpu.mig.instances] == [
        ("3g.40gb", Placement(0, 4), made.uuid)
    ]
    backend.destroy_mig_instance(UUID, made.gpu_instance_id, made.compute_instance_id)
    assert backend.discover()[0].mig.instances == ()


def write_access(root: Path, relative: str, minor: int) -> None:
    path = root / relative / "access"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"DeviceFileMinor: {minor}\nDeviceFileMode: 292\nDeviceFileModify: 1\n")


def test_capability_minors_come_from_the_gi_and_ci_access_files(tmp_path: Path):
    write_access(tmp_path, "gpu3/mig/gi2", 21)
    write_access(tmp_path, "gpu3/mig/gi2/ci0", 22)
    assert mig_cap_minors(3, 2, 0, tmp_path) == (21, 22)
    with pytest.raises(MigCapabilityError, match="gi5"):
        mig_cap_minors(3, 5, 0, tmp_path)


def test_a_partitions_cdi_device_has_its_uuid_and_the_nodes_the_host_has():
    device = MigDevice("gpu-3-mig-3g-40gb-at-4", 3, "MIG-abc", (21, 22))
    host = {
        path: path
        for path in (
            "/dev/nvidia3",
            "/dev/nvidia-caps/nvidia-cap21",
            "/dev/nvidia-caps/nvidia-cap22",
            "/dev/nvidiactl",
        )
    }
    spec = build_claim_spec(UID, [partition_device_edits(device, ["MIG-abc"])], host_nodes=host)
    document = spec.to_document()
    (entry,) = document["devices"]
    assert entry["containerEdits"]["env"] == ["NVIDIA_VISIBLE_DEVICES=MIG-abc"]
    assert [n["path"] for n in entry["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia3",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    assert "mounts" not in entry["containerEdits"]
    assert document["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidiactl"}]
    mock = build_claim_spec(UID, [partition_device_edits(MigDevice("d", 0, "MIG-x"), ["MIG-x"])])
    assert mock.to_document()["devices"][0]["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=MIG-x"]
    }
