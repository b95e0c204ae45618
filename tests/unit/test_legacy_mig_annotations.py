"""HAMi's MIG annotations: register entries with `migProfiles` and
`hami.io/vgpu-mig-allocations`, with HAMi's own test values as the table.

Each test names the HAMi test it ports (Project-HAMi/HAMi at 4707fb02):
`pkg/device/nvidia/device_test.go`, `mig_profiles_test.go`.
"""

from __future__ import annotations

import pytest

from api.hami_annotations import (
    AnnotationDecodeError,
    MigAllocation,
    MigPlacement,
    decode_mig_allocations,
    decode_node_devices,
    encode_mig_allocations,
)
from dra_driver.engine.vendor_backends.base import engine_device

A100_REGISTER = (
    '[{"id":"GPU-0","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA-A100-SXM4-40GB",'
    '"numa":0,"health":true,"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,'
    '"core":14,"sliceCount":1,"instanceCount":7,"multiprocessorCount":14,'
    '"placements":[{"start":6,"size":1}]}]}]'
)
"""The register annotation of device_test.go TestGetNodeDevices_MigProfilesFromNode."""


def test_get_node_devices_mig_profiles_from_node() -> None:
    """device_test.go TestGetNodeDevices_MigProfilesFromNode: the profile and its
    placements decode (fields HAMi's scheduler does not read, such as instanceCount,
    are ignored) and reach the engine's device."""
    (registered,) = decode_node_devices(A100_REGISTER)
    assert registered.mode == "mig"
    assert [p.name for p in registered.mig_profiles] == ["1g.5gb"]
    assert registered.mig_profiles[0].placements == (MigPlacement(6, 1),)
    device = engine_device(registered)
    assert device.mode == "mig"
    assert device.mig_profiles == registered.mig_profiles
    assert (device.mig_profiles[0].memory_mb, device.mig_profiles[0].core) == (5120, 14)


def test_encode_decode_mig_allocations() -> None:
    """mig_profiles_test.go TestEncodeDecodeMigAllocations, with the bytes HAMi writes."""
    allocation = MigAllocation(0, 0, "GPU-a", "1g.5gb", 6, 1)
    raw = encode_mig_allocations([allocation])
    assert raw == (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}}]'
    )
    assert decode_mig_allocations(raw) == [allocation]


def test_decode_mig_allocations_rejects_duplicate_device_index() -> None:
    """mig_profiles_test.go TestDecodeMigAllocationsRejectsDuplicateDeviceIndex."""
    raw = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}},{"containerIndex":0,"deviceIndex":0,'
        '"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":5,"size":1}}]'
    )
    with pytest.raises(AnnotationDecodeError, match="duplicate"):
        decode_mig_allocations(raw)


def test_decode_mig_allocations_preserves_zero_runtime_instance_ids() -> None:
    """mig_profiles_test.go TestDecodeMigAllocationsPreservesZeroRuntimeInstanceIDs;
    the runtime identity is written back as it was read."""
    raw = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb",'
        '"placement":{"start":0,"size":2},"migUUID":"MIG-a","gpuInstanceID":4,'
        '"computeInstanceID":0}]'
    )
    (allocation,) = decode_mig_allocations(raw)
    assert (allocation.gpu_instance_id, allocation.compute_instance_id) == (4, 0)
    assert allocation.mig_uuid == "MIG-a"
    assert encode_mig_allocations([allocation]) == raw


def test_decode_mig_allocations_rejects_partial_runtime_identity() -> None:
    """mig_profiles_test.go TestDecodeMigAllocationsRejectsPartialRuntimeIdentity."""
    raw = (
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"2g.10gb",'
        '"placement":{"start":0,"size":2},"migUUID":"MIG-a"}]'
    )
    with pytest.raises(AnnotationDecodeError, match="partial runtime identity"):
        decode_mig_allocations(raw)


@pytest.mark.parametrize(
    "raw",
    [
        '[{"containerIndex":0,"deviceIndex":0,"profile":"1g.5gb","placement":{"start":6,"size":1}}]',
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","placement":{"start":6,"size":1}}]',
        '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb"}]',
        '[{"containerIndex":-1,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}}]',
        '{"containerIndex":0}',
        "not json",
    ],
)
def test_decode_mig_allocations_rejects_incomplete_entries(raw: str) -> None:
    """mig_allocations.go DecodeMigAllocations: an entry without GPU, profile or
    placement size, or with a negative index, is refused; so is anything but a list."""
    with pytest.raises(AnnotationDecodeError):
        decode_mig_allocations(raw)


def test_decode_mig_allocations_empty_is_none() -> None:
    """DecodeMigAllocations("") is no allocation, and so is JSON null."""
    assert decode_mig_allocations("") == []
    assert decode_mig_allocations("null") == []
