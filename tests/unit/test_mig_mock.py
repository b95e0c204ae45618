"""The mock MIG device: creating and destroying GPU and compute instances on NVIDIA's
placement tables, the refusals NVML gives, and the mock backend's `mig` file entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.mig_profiles import A100_40GB, CARDS, H100_80GB, H200_141GB, Placement
from kubeletplugin.gpus import GpuInfo, MockBackend
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.mig_state import (
    NVML_ERROR_IN_USE,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_NOT_SUPPORTED,
    MigInsufficientResourcesError,
    MigInUseError,
    MigInvalidPlacementError,
    MigNotFoundError,
    MigNotSupportedError,
    MigState,
)
from libvgpu.host_mig import mock_mig_uuid


def h100() -> MockMigDevice:
    return MockMigDevice("GPU-h100", H100_80GB)


def test_instances_are_created_listed_and_destroyed_with_stable_uuids():
    device = h100()
    gi = device.create_gpu_instance("3g.40gb", 4)
    ci = device.create_compute_instance(gi)
    (instance,) = device.state().instances
    assert (instance.gpu_instance_id, instance.compute_instance_id) == (gi, ci) == (1, 0)
    assert (instance.profile, instance.placement) == ("3g.40gb", Placement(4, 4))
    assert instance.uuid == mock_mig_uuid("GPU-h100", 1, 0) == h100().mig_uuid(1, 0)
    assert instance.uuid.startswith("MIG-")
    device.destroy_compute_instance(gi, ci)
    assert device.state().empty_gpu_instances == ((1, "3g.40gb", Placement(4, 4)),)
    device.destroy_gpu_instance(gi)
    assert device.state().instances == device.state().empty_gpu_instances == ()


def test_an_unplaced_instance_takes_the_lowest_free_placement():
    device = h100()
    device.create_gpu_instance("1g.10gb", 0)
    second = device.create_gpu_instance("2g.20gb")
    assert device.gpu_instances()[1].placement == Placement(2, 2)
    assert second == 2


def test_overlapping_placement_is_refused_naming_card_profile_and_what_is_free():
    device = h100()
    device.create_gpu_instance("4g.40gb", 0)
    with pytest.raises(MigInsufficientResourcesError) as refused:
        device.create_gpu_instance("2g.20gb", 2)
    assert refused.value.code == NVML_ERROR_INSUFFICIENT_RESOURCES
    message = str(refused.value)
    assert "GPU-h100 (H100-80GB)" in message
    assert "2g.20gb at 2:2" in message
    assert "1: 4g.40gb at 0:4" in message
    assert "3g.40gb at 4:4" in message


def test_a_full_card_refuses_every_profile():
    device = h100()
    device.create_gpu_instance("7g.80gb")
    for profile in H100_80GB.profiles:
        assert device.free_placements(profile.name) == ()
        with pytest.raises(MigInsufficientResourcesError, match="free: nothing"):
            device.create_gpu_instance(profile.name)


def test_media_extension_profile_is_one_per_card():
    device = h100()
    device.create_gpu_instance("1g.10gb+me", 0)
    assert device.free_placements("1g.10gb+me") == ()
    assert len(device.free_placements("1g.10gb")) == 6
    with pytest.raises(MigInsufficientResourcesError):
        device.create_gpu_instance("1g.10gb+me", 3)


@pytest.mark.parametrize("card", CARDS, ids=lambda c: c.model)
def test_seven_one_slice_instances_fill_every_card(card):
    device = MockMigDevice("GPU-x", card)
    one = card.profiles[0]
    for _ in range(7):
        device.create_compute_instance(device.create_gpu_instance(one.name))
    assert [i.placement.start for i in device.state().instances] == list(range(7))
    assert all(device.free_placements(p.name) == () for p in card.profiles)


def test_compute_slices_bound_the_card_as_well_as_memory():
    device = MockMigDevice("GPU-a", A100_40GB)
    for _ in range(3):
        device.create_gpu_instance("2g.10gb")
    device.create_gpu_instance("1g.5gb")
    assert device.free_placements("1g.10gb") == ()
    with pytest.raises(MigInsufficientResourcesError):
        device.create_gpu_instance("1g.10gb", 6)


def test_profile_the_card_lacks_and_a_start_off_the_table_are_refused():
    device = h100()
    with pytest.raises(MigNotSupportedError) as refused:
        device.create_gpu_instance("1g.5gb")
    assert refused.value.code == NVML_ERROR_NOT_SUPPORTED
    assert "1g.5gb not supported" in str(refused.value)
    assert "1g.10gb, 1g.10gb+me" in str(refused.value)
    with pytest.raises(MigInvalidPlacementError, match="cannot start at memory slice 2"):
        device.create_gpu_instance("3g.40gb", 2)


def test_gpu_instance_with_compute_instances_is_in_use():
    device = h100()
    gi = device.create_gpu_instance("3g.40gb")
    device.create_compute_instance(gi, 1)
    device.create_compute_instance(gi, 2)
    with pytest.raises(MigInsufficientResourcesError, match="0 of 3 compute slices free"):
        device.create_compute_instance(gi, 1)
    with pytest.raises(MigInUseError) as refused:
        device.destroy_gpu_instance(gi)
    assert refused.value.code == NVML_ERROR_IN_USE
    assert "still holds compute instances 0, 1" in str(refused.value)
    with pytest.raises(MigNotFoundError):
        device.destroy_compute_instance(gi, 5)
    with pytest.raises(MigNotFoundError):
        device.destroy_gpu_instance(9)


def test_card_not_in_mig_mode_refuses_instances():
    device = MockMigDevice("GPU-off", H200_141GB, enabled=False, pending_enabled=False)
    with pytest.raises(MigNotSupportedError, match="not in MIG mode"):
        device.create_gpu_instance("1g.18gb")
    state = device.state()
    assert (state.capable, state.enabled, state.partitionable, state.profiles) == (
        True,
        False,
        False,
        (),
    )


def test_pending_mode_card_is_not_partitionable_until_reset():
    device = h100()
    device.create_compute_instance(device.create_gpu_instance("3g.40gb", 0))
    device.pending_enabled = False
    state = device.state()
    assert state.reset_pending and not state.partitionable
    assert len(state.instances) == 1
    with pytest.raises(MigNotSupportedError, match="pending disable until a GPU reset"):
        device.create_gpu_instance("3g.40gb", 4)
    enabling = MockMigDevice("GPU-on", H100_80GB, enabled=False, pending_enabled=True)
    assert enabling.state().reset_pending and not enabling.state().partitionable


def write(tmp_path: Path, text: str) -> MockBackend:
    path = tmp_path / "gpus.yaml"
    path.write_text(text)
    return MockBackend(path)


def test_mock_file_declares_mig_mode_pending_mode_and_instances(tmp_path: Path):
    backend = write(
        tmp_path,
        "gpus:\n"
        "  - {uuid: GPU-0, index: 0, productName: NVIDIA H100 80GB HBM3, memory: 80Gi,\n"
        "     mig: {instances: [{profile: 3g.40gb, start: 4}, {profile: 1g.10gb}]}}\n"
        "  - {uuid: GPU-1, index: 1, productName: NVIDIA H100 80GB HBM3, memory: 80Gi,\n"
        "     mig: {mode: disabled, pending: enabled}}\n"
        "  - {uuid: GPU-2, index: 2}\n",
    )
    first, second, third = backend.discover()
    assert first.mig.partitionable
    assert [(i.profile, str(i.placement)) for i in first.mig.instances] == [
        ("1g.10gb", "0:1"),
        ("3g.40gb", "4:4"),
    ]
    assert first.mig.profile("7g.80gb") is not None
    assert (second.mig.capable, second.mig.enabled, second.mig.reset_pending) == (True, False, True)
    assert third.mig == MigState()


def test_instances_created_since_survive_rediscovery_until_the_file_changes(tmp_path: Path):
    text = "gpus: [{uuid: GPU-0, index: 0, mig: {mode: enabled}}]\n"
    backend = write(tmp_path, text)
    backend.discover()
    device = backend.mig_devices["GPU-0"]
    device.create_compute_instance(device.create_gpu_instance("2g.20gb"))
    (gpu,) = backend.discover()
    assert [i.profile for i in gpu.mig.instances] == ["2g.20gb"]
    backend.path.write_text(text.replace("enabled}", "enabled, pending: disabled}"))
    (gpu,) = backend.discover()
    assert gpu.mig.instances == () and gpu.mig.reset_pending


@pytest.mark.parametrize(
    ("gpu", "field", "reason"),
    [
        ("{uuid: g, index: 0, productName: NVIDIA L4, mig: {}}", "gpus[0].mig", "no MIG table"),
        (
            "{uuid: g, index: 0, mig: {instances: [{profile: 4g.40gb},"
            " {profile: 3g.40gb, start: 0}]}}",
            "gpus[0].mig.instances[1]",
            "3g.40gb at 0:4",
        ),
        ("{uuid: g, index: 0, mig: {instances: [{profile: 1g.5gb}]}}", "instances[0]", "1g.5gb"),
        (
            "{uuid: g, index: 0, mig: {mode: disabled, instances: [{profile: 1g.10gb}]}}",
            "instances[0]",
            "not in MIG mode",
        ),
    ],
)
def test_bad_mig_entries_are_refused_naming_the_field(
    tmp_path: Path, gpu: str, field: str, reason: str
):
    backend = write(tmp_path, f"gpus: [{gpu}]\n")
    with pytest.raises(InvalidParameterError) as refused:
        backend.discover()
    assert field in str(refused.value)
    assert reason in str(refused.value)


def test_mig_on_another_vendor_is_refused(tmp_path: Path):
    backend = write(tmp_path, "vendor: mlu\ngpus: [{uuid: m, index: 0, mig: {}}]\n")
    with pytest.raises(InvalidParameterError, match="NVIDIA cards only"):
        backend.discover()


def test_cards_without_mig_discover_as_before(tmp_path: Path):
    backend = write(tmp_path, "gpus: [{uuid: GPU-m0, index: 0, memory: 16Gi}]\n")
    (gpu,) = backend.discover()
    assert gpu == GpuInfo(
        uuid="GPU-m0",
        index=0,
        minor=0,
        product_name="NVIDIA A100-SXM4-80GB",
        memory_bytes=16 << 30,
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        compute_capability="8.0",
    )
    assert backend.mig_devices == {}
