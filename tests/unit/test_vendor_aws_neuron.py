"""AWS Neuron against the values of HAMi's pkg/device/awsneuron/device_test.go."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hami_vendor_cases import HamiDevice, container
from vendor_fit_helpers import run_fit

from dra_driver.engine.grants import Grant
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends import aws_neuron
from dra_driver.engine.vendor_backends.base import PatchContext
from dra_driver.errors import InvalidParameterError

INT32_MAX = (1 << 31) - 1
N = "AWSNeuron"
USE, NO_USE = "aws.amazon.com/use-neuron-uuid", "aws.amazon.com/nouse-neuron-uuid"


def backend(cores_per_device: int = 2) -> aws_neuron.AwsNeuronBackend:
    made = aws_neuron.AwsNeuronBackend()
    made.rules.cores_per_device = cores_per_device
    return made


@pytest.mark.parametrize(
    ("limits", "requests", "error"),
    [
        ({"aws.amazon.com/neuron": "2"}, None, None),
        ({}, {"aws.amazon.com/neuron": "2"}, None),
        ({}, {"aws.amazon.com/neuron": str(INT32_MAX + 1)}, f"must not exceed {INT32_MAX}"),
        ({"aws.amazon.com/neuroncore": "2"}, None, None),
        ({"aws.amazon.com/neuroncore": "3"}, None, "must be 1 or a multiple of 2, got 3"),
        ({}, {"aws.amazon.com/neuroncore": "3"}, "must be 1 or a multiple of 2, got 3"),
        ({"aws.amazon.com/neuroncore": "0"}, None, "must be greater than 0"),
        ({"aws.amazon.com/neuroncore": "-2"}, None, "must be greater than 0"),
        ({"aws.amazon.com/neuroncore": str(INT32_MAX * 2 + 2)}, None, "must not exceed 4294967294"),
        ({"aws.amazon.com/neuron": "1.5"}, None, "aws.amazon.com/neuron must be an integer"),
    ],
)
def test_webhook_validates_with_hami_messages(limits, requests, error) -> None:
    """Test_MutateAdmission."""
    ctr = container(limits, requests)
    if error is None:
        assert backend(0).mutate(ctr, {}, "spec.containers[0]").has_resource
        return
    with pytest.raises(InvalidParameterError) as raised:
        backend(0).mutate(ctr, {}, "spec.containers[0]")
    assert raised.value.reason.endswith(error)
    assert raised.value.field.startswith("spec.containers[0].resources.aws.amazon.com/neuron")


def test_no_resource_is_not_neuron() -> None:
    assert not backend().mutate(container({}), {}, "c").has_resource


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        ({"aws.amazon.com/neuron": "1"}, {"aws.amazon.com/neuron": "1"}, (1, 2)),
        ({}, {"aws.amazon.com/neuron": str(INT32_MAX + 1)}, None),
        ({"aws.amazon.com/neuroncore": "1"}, {"aws.amazon.com/neuroncore": "1"}, (1, 1)),
        ({"aws.amazon.com/neuroncore": "3"}, {"aws.amazon.com/neuroncore": "3"}, None),
        ({}, {"aws.amazon.com/neuroncore": "3"}, None),
        ({"aws.amazon.com/neuroncore": "0"}, None, None),
        ({"aws.amazon.com/neuroncore": "-2"}, None, None),
        ({"aws.amazon.com/neuroncore": str(INT32_MAX * 2 + 2)}, None, None),
    ],
)
def test_requests(limits, requests, want) -> None:
    """Test_GenerateResourceRequests (coresPerAWSNeuron = 2); a refused value asks nothing."""
    dropped: list[str] = []
    got = backend().adapter.read_request(container(limits, requests), {}, "c", dropped)
    if want is None:
        assert got is None and dropped
    else:
        assert got == DeviceRequest("AWSNeuron", want[0], 0, 0, want[1])


@pytest.mark.parametrize(
    ("per_device", "cores", "want"),
    [
        (2, 1, (1, 1)),
        (2, 2, (1, 2)),
        (2, 6, (3, 2)),
        (4, 4, (2, 2)),
        (0, 4, (2, 2)),
        (2, 3, "aws.amazon.com/neuroncore must be 1 or a multiple of 2, got 3"),
        (
            1,
            INT32_MAX + 1,
            "aws.amazon.com/neuroncore needs 2147483648 devices, "
            "which exceeds the maximum of 2147483647",
        ),
    ],
)
def test_split_cores(per_device, cores, want) -> None:
    """Test_splitCoreRequest."""
    if isinstance(want, str):
        with pytest.raises(InvalidParameterError) as raised:
            aws_neuron.split_cores(cores, per_device)
        assert raised.value.reason == want
    else:
        assert aws_neuron.split_cores(cores, per_device) == want


@pytest.mark.parametrize(("mask", "cores"), [(3, 2), (2, 1), (1, 1), (0, 0)])
def test_mask_cores(mask: int, cores: int) -> None:
    assert aws_neuron.mask_cores(mask) == cores


@pytest.mark.parametrize(
    ("node_type", "busy", "count", "want"),
    [
        ("inf2", set(), 16, list(range(16))),
        ("trn", {7, 13}, 8, []),
        ("trn", {7}, 8, list(range(8, 16))),
        ("inf", {5, 14}, 8, list(range(6, 14))),
    ],
)
def test_contiguous_runs(node_type, busy, count, want) -> None:
    """Test_graphSelect."""
    devices = [
        HamiDevice(id=f"d{i}", index=i, used=int(i in busy), custom_info={"AWSNodeType": node_type})
        for i in range(16)
    ]
    grants, reason = run_fit(backend().adapter, devices, DeviceRequest("AWSNeuron", count, 0, 0, 2))
    assert [g.index for g in grants or []] == want
    assert reason == ("" if want else "1/16 NumaNotFit")


def aws(
    id_: str, index: int, used: int, count: int, usedcores: int, health: bool = True
) -> HamiDevice:
    return HamiDevice(
        id=id_, index=index, used=used, count=count, totalcore=3, usedcores=usedcores,
        type="AWSNeuron", health=health, custom_info={"AWSNodeType": "trn"},
    )  # fmt: skip


@pytest.mark.parametrize(
    ("devices", "nums", "vendor", "annotations", "policy", "want"),
    [
        ([aws("dev-0", 0, 0, 2, 0), aws("dev-1", 0, 0, 12, 0)], 1, N, {}, "spread", "dev-1"),
        ([aws("dev-0", 0, 0, 2, 0)], 2, N, {}, "spread", "1/1 NumaNotFit"),
        ([aws("dev-0", 0, 0, 2, 1)], 1, N, {}, "spread", "1/1 CardInsufficientCore"),
        ([aws("dev-0", 0, 0, 2, 0)], 1, "OtherType", {}, "spread", "1/1 CardTypeMismatch"),
        ([aws("dev-1", 0, 0, 2, 0)], 1, N, {USE: "dev-0"}, "spread", "1/1 CardUuidMismatch"),
        ([aws("dev-0", 0, 0, 2, 0)], 1, N, {NO_USE: "dev-0"}, "spread", "1/1 CardUuidMismatch"),
        ([aws("dev-0", 0, 2, 2, 0)], 1, N, {}, "spread", "1/1 CardTimeSlicingExhausted"),
        ([aws("dev-0", 0, 1, 2, 0)], 1, N, {}, "mutex", "1/1 ExclusiveDeviceAllocateConflict"),
        ([aws("dev-0", 0, 0, 2, 0), aws("dev-1", 1, 0, 2, 0)],
         2, N, {}, "spread","1/2 NumaNotFit"),
        ([aws("dev-0", 0, 0, 2, 0, health=False)], 1, N, {}, "spread", "1/1 CardNotHealth"),
    ],
)  # fmt: skip
def test_fit(devices, nums, vendor, annotations, policy, want) -> None:
    """TestDevices_Fit: the chosen device, or HAMi's reason."""
    request = DeviceRequest(vendor, nums, 0, 0, 2, aws_neuron._uuid_filters(annotations))
    adapter = backend().adapter
    grants, reason = run_fit(adapter, devices, request, policy)
    assert (grants[0].uuid if grants else reason) == want


def test_core_masks_fill_a_device() -> None:
    """A one-core share takes core 0 of an idle device, the next one core 1."""
    adapter = backend().adapter
    first, _ = run_fit(adapter, [aws("d", 0, 0, 2, 0)], DeviceRequest("AWSNeuron", 1, 0, 0, 1))
    second, _ = run_fit(adapter, [aws("d", 0, 1, 2, 1)], DeviceRequest("AWSNeuron", 1, 0, 0, 1))
    assert [g.cores for g in first or []] == [1] and [g.cores for g in second or []] == [2]


def test_node_devices() -> None:
    """Test_GetNodeDevices: one inf2 device with two cores."""
    node = {
        "metadata": {"name": "test", "labels": {"node.kubernetes.io/instance-type": "inf2"}},
        "status": {"capacity": {"aws.amazon.com/neuron": "1", "aws.amazon.com/neuroncore": "2"}},
    }
    made = aws_neuron.AwsNeuronBackend()
    found = made.node_devices(node, datetime(2026, 1, 1, tzinfo=UTC), timedelta(seconds=60))
    assert [
        (d.id, d.count, d.memory_mib, d.cores, d.type, dict(d.custom_info)) for d in found.devices
    ] == [("test-AWSNeuron-0", 2, 0, 3, "AWSNeuron", {"AWSNodeType": "inf2"})]
    assert made.rules.cores_per_device == 2


def pod(init: list[dict], app: list[dict]) -> dict:
    return {"spec": {"initContainers": init, "containers": app}}


@pytest.mark.parametrize(
    ("spec", "grants", "ids", "resource_type"),
    [
        (
            pod([], [container({"aws.amazon.com/neuron": "2"})]),
            [(Grant("test1", "AWSNeuron", 0, 3, 0), Grant("test2", "AWSNeuron", 0, 3, 1))],
            "0,1",
            None,
        ),
        (
            pod([], [container({"aws.amazon.com/neuroncore": "2"})]),
            [(Grant("test1", "AWSNeuron", 0, 3, 0),)],
            "0,1",
            "aws.amazon.com/neuroncore",
        ),
        (
            pod([container({"aws.amazon.com/neuron": "1"})], [container({})]),
            [(Grant("test1", "AWSNeuron", 0, 3, 0),), ()],
            "0",
            None,
        ),
    ],
)
def test_pod_annotations(spec, grants, ids, resource_type) -> None:
    """Test_PatchAnnotations: device indexes or core ids, the node and the flags."""
    got = backend().pod_annotations(grants, PatchContext(pod=spec, node="node-a", now_ns=42))
    assert got["AWS_NEURON_IDS"] == ids
    assert got.get("NEURON_RESOURCE_TYPE") == resource_type
    assert got["aws.amazon.com/predicate-node"] == "node-a"
    assert got["NEURON_ALLOCATED"] == "false" and got["NEURON_ALLOC_TIME"] == "42"
    assert "hami.io/aws-neuron-devices-allocated" in got
    assert not any(key.endswith("to-allocate") for key in got)
