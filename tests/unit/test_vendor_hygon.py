"""Hygon DCU's legacy backend against HAMi's own test values.

Rows come from HAMi's `pkg/device/hygon/device_test.go` (4707fb02):
Test_GenerateResourceRequests (and its out-of-range and memory-factor
tests), Test_MutateAdmission, Test_GetNodeDevices, Test_checkDCUtype,
Test_PatchAnnotations and TestDevices_Fit. The Fit row whose request Type is
`OtherType` is not here: the engine hands a vendor's Fit only requests of its
own Type (HAMi's getNodeResources filters the same way before calling Fit).
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
from dra_driver.engine.vendor_backends.base import LockKind
from dra_driver.engine.vendor_backends.hygon import HygonBackend, HygonConfig
from dra_driver.engine.vendor_backends.registry import build_backends, read_sections
from dra_driver.errors import InvalidParameterError

DCU = "DCU"
COUNT, MEMORY, CORES = "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"
CONFIG = HygonConfig(resourceCountName=COUNT, resourceMemoryName=MEMORY, resourceCoreName=CORES)
BACKEND = HygonBackend(CONFIG)
ADAPTER = BACKEND.adapter
NOW = datetime(2026, 8, 21, 6, 0, 0, tzinfo=UTC)
MINUTE = timedelta(seconds=60)
ALL_THREE = {COUNT: "1", CORES: "1", MEMORY: "1024"}


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        ({}, {}, NO_REQUEST),
        (ALL_THREE, ALL_THREE, HamiRequest(1, DCU, 1024, 0, 1)),
        ({COUNT: "1"}, ALL_THREE, HamiRequest(1, DCU, 1024, 0, 1)),
        ({COUNT: "1"}, {COUNT: "1", CORES: "1"}, HamiRequest(1, DCU, 0, 100, 1)),
        ({COUNT: "1", MEMORY: "16Gi"}, {}, NO_REQUEST),
        ({COUNT: "2200000000"}, {}, NO_REQUEST),
        ({COUNT: "1", CORES: "-1"}, {}, NO_REQUEST),
        # No core resource: the whole card's compute (HAMi's default 100).
        ({COUNT: "2", MEMORY: "300"}, {}, HamiRequest(2, DCU, 300, 0, 100)),
    ],
)
def test_request_generation(limits, requests, want) -> None:
    assert as_hami(ADAPTER.read_request(container(limits, requests), {}, "c", None)) == want


def test_memory_factor_overflow_drops_the_request() -> None:
    """Test_GenerateResourceRequests_MemoryFactorOverflow: 3000000 x 1024 > MaxInt32."""
    adapter = HygonBackend(CONFIG.model_copy(update={"memory_factor": 1024})).adapter
    dropped: list[str] = []
    ctr = container({COUNT: "1", MEMORY: "3000000"})
    assert adapter.read_request(ctr, {}, "spec.containers[0]", dropped) is None
    assert dropped == [
        "spec.containers[0].resources.hygon.com/dcumem: 3000000 overflows int32 x 1024; "
        "HAMi ignores this DCU request, so the container gets no device"
    ]
    scaled = adapter.read_request(container({COUNT: "1", MEMORY: "2"}), {}, "c", None)
    assert as_hami(scaled) == HamiRequest(1, DCU, 2048, 0, 100)


def test_admission_reports_the_count_in_limits_and_changes_nothing() -> None:
    mutation = BACKEND.mutate(container({COUNT: "1"}), {}, "c")
    assert (mutation.has_resource, dict(mutation.limits), mutation.env) == (True, {}, ())
    assert not BACKEND.mutate(container({}, {COUNT: "1"}), {}, "c").has_resource


def node(register: str | None, **annotations: str) -> dict:
    if register is not None:
        annotations["hami.io/node-dcu-register"] = register
    return {
        "metadata": {"name": "n", "annotations": annotations},
        "status": {"allocatable": {COUNT: "0"}},
    }


def test_node_devices_from_the_legacy_register() -> None:
    read = BACKEND.node_devices(node("test-0,1,1024,100,DCU,0,true,0,test:"), NOW, MINUTE)
    assert read.problem == ""
    (device,) = read.devices
    assert (device.id, device.count, device.memory_mib, device.cores, device.type) == (
        "test-0",
        1,
        1024,
        100,
        DCU,
    )
    assert (device.numa, device.healthy, device.index, device.mode) == (0, True, 0, "test")


@pytest.mark.parametrize(
    ("register", "why"),
    [
        (None, "node unregistered"),
        (":", "no devices registered"),
        ("", "missing device separator"),
        ("test-0,1,1024,100,DCU:", "has 5 fields, expected 7 or 9"),
        # The colon list only: HAMi's DecodeNodeDevices cannot read JSON.
        ('[{"id":"test-0","count":1,"type":"DCU","health":true}]', "expected 7 or 9"),
    ],
)
def test_node_without_readable_devices(register, why) -> None:
    read = BACKEND.node_devices(node(register), NOW, MINUTE)
    assert read.devices == () and why in read.problem


def test_stale_handshake_marks_the_dcus_unhealthy() -> None:
    stale = "Requesting_2026-08-21 05:58:00"
    register = "test-0,1,1024,100,DCU,0,true,0,test:"
    gone = BACKEND.node_devices(
        node(register, **{"hami.io/node-handshake-dcu": stale}), NOW, MINUTE
    )
    assert [d.healthy for d in gone.devices] == [False]
    fresh = node(register, **{"hami.io/node-handshake-dcu": "Requesting_2026-08-21 05:59:30"})
    assert [d.healthy for d in BACKEND.node_devices(fresh, NOW, MINUTE).devices] == [True]
    assert BACKEND.handshake_key == "hami.io/node-handshake-dcu"


def dcu(id_: str, **kw) -> HamiDevice:
    return HamiDevice(id_, **{"count": 100, "totalmem": 1280, "totalcore": 100, "type": DCU, **kw})


def req(nums: int, memreq: int = 512, coresreq: int = 50, mempct: int = 0) -> HamiRequest:
    return HamiRequest(nums, DCU, memreq, mempct, coresreq)


FIT_CASES = [
    FitCase(
        "fit success",
        (dcu("dev-0", totalmem=128), dcu("dev-1", totalmem=128)),
        req(1, 64),
        True,
        1,
        ("dev-1",),
    ),
    FitCase(
        "memory not enough",
        (dcu("dev-0", totalmem=128),),
        req(1),
        False,
        0,
        reason="1/1 CardInsufficientMemory",
    ),
    FitCase(
        "core not enough",
        (dcu("dev-0", totalmem=1024, usedcores=100),),
        req(1),
        False,
        0,
        reason="1/1 CardInsufficientCore",
    ),
    FitCase(
        "use uuid mismatch",
        (dcu("dev-1"),),
        req(2),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={"hygon.com/use-gpuuuid": "dev-0"},
    ),
    FitCase(
        "no use uuid match",
        (dcu("dev-0"),),
        req(2),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={"hygon.com/nouse-gpuuuid": "dev-0"},
    ),
    FitCase(
        "card overused",
        (dcu("dev-0", used=100),),
        req(1),
        False,
        0,
        reason="1/1 CardTimeSlicingExhausted",
    ),
    FitCase(
        "core limit clamped to 100", (dcu("dev-0"),), req(1, coresreq=120), True, 1, ("dev-0",)
    ),
    FitCase(
        "card exclusively",
        (dcu("dev-0", used=20),),
        req(1, coresreq=100),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
    ),
    FitCase(
        "compute units exhausted",
        (dcu("dev-0", used=20, usedcores=100),),
        req(1, coresreq=0),
        False,
        0,
        reason="1/1 CardComputeUnitsExhausted",
    ),
    FitCase(
        "allocated cards insufficient",
        (dcu("dev-0", used=20, usedcores=10),),
        req(2, coresreq=20),
        False,
        1,
        reason="1/1 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "memory percentage",
        (dcu("dev-0", used=20, usedcores=10),),
        req(1, memreq=0, coresreq=20, mempct=10),
        True,
        1,
        ("dev-0",),
    ),
    FitCase(
        "mutex rejects a used device",
        (dcu("dev-0", used=1, count=2, totalmem=128),),
        req(1, 64),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    ),
    FitCase(
        "partial allocation over two cards",
        (dcu("dev-0"), dcu("dev-1", index=1)),
        req(3, coresreq=20),
        False,
        2,
        reason="2/2 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "not healthy",
        (dcu("dev-0", health=False),),
        req(1),
        False,
        0,
        reason="1/1 CardNotHealth",
    ),
]


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda case: case.name)
def test_fit(case: FitCase) -> None:
    picks, reason = run_fit(case, ADAPTER)
    assert ((picks is not None), reason) == (case.fit, case.reason)
    if case.fit:
        assert tuple(grant.uuid for grant in picks) == case.ids


@pytest.mark.parametrize(
    ("annotations", "card", "allowed"),
    [
        ({}, "DCU-Z100", True),
        ({"hygon.com/use-dcutype": "Z100"}, "DCU-Z100", True),
        ({"hygon.com/use-dcutype": "z100, K100"}, "DCU-Z100", True),
        ({"hygon.com/use-dcutype": "K100"}, "DCU-Z100", False),
        ({"hygon.com/nouse-dcutype": "Z100"}, "DCU-Z100", False),
        ({"hygon.com/use-dcutype": " "}, "DCU-Z100", True),
    ],
)
def test_type_filter(annotations, card, allowed) -> None:
    """Test_checkDCUtype: a case-insensitive substring, a blank value constrains nothing."""
    case = FitCase("type", (dcu("dev-0", type=card),), req(1), allowed, 1, annotations=annotations)
    picks, reason = run_fit(case, ADAPTER)
    assert (picks is not None) == allowed
    assert reason == ("" if allowed else "1/1 CardTypeMismatch")


def test_pod_annotations() -> None:
    """Test_PatchAnnotations: both keys carry EncodePodSingleDevice; no device, no key."""
    grants = ((Grant("test1", DCU, 2048, 1, 1),),)
    assert BACKEND.pod_annotations(grants) == {
        "hami.io/dcu-devices-to-allocate": "test1,DCU,2048,1:;",
        "hami.io/dcu-devices-allocated": "test1,DCU,2048,1:;",
    }
    assert BACKEND.pod_annotations(((Grant("GPU-a", "NVIDIA", 1, 1, 0),),)) == {}


def test_shared_lock_for_app_containers() -> None:
    assert BACKEND.lock.kind is LockKind.SHARED and BACKEND.lock.key == "hami.io/mutex.lock"


def test_config_section_selects_and_names_the_backend() -> None:
    sections = read_sections({"hygon": {"resourceCountName": "example.com/dcu"}})
    (dcu_backend,) = [b for b in build_backends(sections) if b.name == DCU]
    # A key left out is empty, as in Go: that resource is never read.
    assert dcu_backend.adapter.resources.memory == ""
    assert [b.name for b in build_backends(read_sections({"nvidia": {}}))] == ["NVIDIA"]
    assert DCU in [b.name for b in build_backends(None)]
    with pytest.raises(InvalidParameterError, match=r"hygon\.memoryFactor"):
        read_sections({"hygon": {"memoryFactor": -1}})
