"""Iluvatar's legacy backend against HAMi's own test values.

Rows come from HAMi's `pkg/device/iluvatar/device_test.go` (4707fb02):
TestGetNodeDevices, TestPatchAnnotations, Test_MutateAdmission,
Test_checkType, Test_GenerateResourceRequests, TestFit_MutexRejectsUsedDevice
and Test_Fit (for chip MR-V100). The Fit row with request Type `OtherType`
is not here: the engine hands a chip's Fit only requests of its own Type.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hami_vendor_cases import (
    NO_REQUEST,
    FitCase,
    HamiDevice,
    HamiRequest,
    as_hami,
    container,
    run_fit,
)

from dra_driver.engine.grants import Grant
from dra_driver.engine.vendor_backends.iluvatar import IluvatarBackend, IluvatarChip
from dra_driver.engine.vendor_backends.registry import build_backends, read_sections
from dra_driver.errors import InvalidParameterError

CHIP = "MR-V100"
COUNT, MEMORY, CORES = (
    f"iluvatar.ai/{CHIP}-vgpu",
    f"iluvatar.ai/{CHIP}.vMem",
    f"iluvatar.ai/{CHIP}.vCore",
)
BACKEND = IluvatarBackend(
    IluvatarChip(
        commonWord=CHIP,
        chipName=CHIP,
        resourceCountName=COUNT,
        resourceMemoryName=MEMORY,
        resourceCoreName=CORES,
    )
)
ADAPTER = BACKEND.adapter
NOW = datetime(2026, 8, 21, 6, 0, 0, tzinfo=UTC)
MINUTE = timedelta(seconds=60)
ALL_THREE = {COUNT: "1", MEMORY: "1000", CORES: "100"}


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        (ALL_THREE, ALL_THREE, HamiRequest(1, CHIP, 256000, 0, 100)),
        ({}, {}, NO_REQUEST),
        ({COUNT: "1"}, {COUNT: "1"}, HamiRequest(1, CHIP, 0, 100, 0)),
        ({COUNT: "1", MEMORY: "16Gi"}, None, NO_REQUEST),
        ({COUNT: "1", MEMORY: "16.0Gi"}, None, NO_REQUEST),
    ],
)
def test_request_generation(limits, requests, want) -> None:
    assert as_hami(ADAPTER.read_request(container(limits, requests), {}, "c", None)) == want


def test_admission_sets_cores_per_card_and_the_container_name() -> None:
    """Test_MutateAdmission, with what HAMi's MutateAdmission writes into the container."""
    mutation = BACKEND.mutate(container({COUNT: "2", CORES: "1"}), {}, "c")
    assert mutation.has_resource
    assert dict(mutation.limits) == {CORES: "200"}
    assert mutation.env == ({"name": "SOL_CONTINER_NAME", "value": "ctr"},)
    single = BACKEND.mutate(container({COUNT: "1"}), {}, "c")
    assert (single.has_resource, dict(single.limits)) == (True, {})
    named_already = {**container({COUNT: "1"}), "env": [{"name": "SOL_CONTINER_NAME"}]}
    assert BACKEND.mutate(named_already, {}, "c").env == ()
    assert not BACKEND.mutate(container({}, {COUNT: "1"}), {}, "c").has_resource


def node(register: str | None) -> dict:
    annotations = {} if register is None else {f"hami.io/node-{CHIP}-register": register}
    return {"metadata": {"name": "n", "annotations": annotations}, "status": {}}


def test_node_devices_from_the_chip_register() -> None:
    register = "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae,10,8192,100,MR-V100,0,true:"
    read = BACKEND.node_devices(node(register), NOW, MINUTE)
    (device,) = read.devices
    assert (device.id, device.count, device.memory_mib, device.cores, device.type) == (
        "GPU-bad51c5a-ed4c-591d-91bf-c04a12e19eae",
        10,
        8192,
        100,
        CHIP,
    )
    assert (device.index, device.healthy) == (0, True)
    assert BACKEND.handshake_key == f"hami.io/node-handshake-{CHIP}"


@pytest.mark.parametrize("register", [None, "[]", ""])
def test_node_without_readable_devices(register) -> None:
    read = BACKEND.node_devices(node(register), NOW, MINUTE)
    assert read.devices == () and read.problem.startswith("node unregistered")


def mr(id_: str, **kw) -> HamiDevice:
    return HamiDevice(id_, **{"count": 100, "totalmem": 128, "totalcore": 100, "type": CHIP, **kw})


def req(memreq: int = 512, coresreq: int = 50) -> HamiRequest:
    return HamiRequest(1, CHIP, memreq, 0, coresreq)


FIT_CASES = [
    FitCase("fit success", (mr("dev-0"), mr("dev-1")), req(64), True, 1, ("dev-1",)),
    FitCase(
        "memory not enough", (mr("dev-0"),), req(), False, 0, reason="1/1 CardInsufficientMemory"
    ),
    FitCase(
        "core not enough (memory first)",
        (mr("dev-0", usedcores=100),),
        req(),
        False,
        0,
        reason="1/1 CardInsufficientMemory",
    ),
    FitCase(
        "mutex rejects a used device",
        (mr("dev-0", used=1, count=2),),
        req(64),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    ),
    FitCase(
        "not healthy", (mr("dev-0", health=False),), req(64), False, 0, reason="1/1 CardNotHealth"
    ),
    FitCase(
        "uuid filter on the chip's own key",
        (mr("dev-0"),),
        req(64),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={f"hami.io/use-{CHIP}-uuid": "dev-9"},
    ),
    FitCase(
        "no type filter: any card of the chip",
        (mr("dev-0", type="MR-V100-anything"),),
        req(64),
        True,
        1,
        ("dev-0",),
        annotations={"nvidia.com/use-gputype": "A100"},
    ),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda case: case.name)
def test_fit(case: FitCase) -> None:
    picks, reason = run_fit(case, ADAPTER)
    assert ((picks is not None), reason) == (case.fit, case.reason)
    if case.fit:
        assert tuple(grant.uuid for grant in picks) == case.ids


def test_pod_annotations() -> None:
    """TestPatchAnnotations: the chip's two keys; no device, no key."""
    grants = ((Grant("k8s-gpu-iluvatar-0", CHIP, 0, 0, 0),),)
    assert BACKEND.pod_annotations(grants) == {
        f"hami.io/{CHIP}-devices-to-allocate": "k8s-gpu-iluvatar-0,MR-V100,0,0:;",
        f"hami.io/{CHIP}-devices-allocated": "k8s-gpu-iluvatar-0,MR-V100,0,0:;",
    }
    assert BACKEND.pod_annotations(((),)) == {}


def test_enabled_only_with_the_flag_and_one_backend_per_chip() -> None:
    assert not any(b.name == CHIP for b in build_backends(None))
    chips = [b.name for b in build_backends(None, frozenset({"enable-iluvatar"}))]
    assert chips[-4:] == ["MR-V100", "MR-V50", "BI-V150", "BI-V100"]
    sections = read_sections({"iluvatars": [{"commonWord": "BI-V150", "chipName": "BI-V150"}]})
    enabled = [b.name for b in build_backends(sections, frozenset({"enable-iluvatar"}))]
    assert enabled == ["NVIDIA", "BI-V150"]
    with pytest.raises(InvalidParameterError, match="enable-iluvatr"):
        build_backends(None, frozenset({"enable-iluvatr"}))
