"""Moore Threads' legacy backend against HAMi's own test values.

Rows come from HAMi's `pkg/device/mthreads/device_test.go` (4707fb02); the
division by the count is HAMi's code (no HAMi test has a count above 1).
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
    slots_of,
)

from api import hami_annotations as keys
from dra_driver.engine.grants import Grant
from dra_driver.engine.model import Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import DEFAULT_WEIGHTS, DeviceRequest
from dra_driver.engine.vendor_backends.base import LockKind, PatchContext
from dra_driver.engine.vendor_backends.mthreads import MthreadsBackend
from dra_driver.engine.vendors import FitContext, VendorRegistry
from dra_driver.errors import InvalidParameterError

MTHREADS = "Mthreads"
COUNT = "mthreads.com/vgpu"
MEMORY = "mthreads.com/sgpu-memory"
CORES = "mthreads.com/sgpu-core"
BACKEND = MthreadsBackend()
ADAPTER = BACKEND.adapter


def card(id_: str, **kw) -> HamiDevice:
    return HamiDevice(
        id_, **{"count": 100, "totalmem": 1280, "totalcore": 100, "type": MTHREADS, **kw}
    )


@pytest.mark.parametrize(
    ("limits", "requests", "want"),
    [
        ({COUNT: "1", MEMORY: "1000", CORES: "1"}, {}, HamiRequest(1, MTHREADS, 512000, 0, 1)),
        ({}, {MEMORY: "1000", CORES: "1"}, NO_REQUEST),
        ({}, {COUNT: "1"}, HamiRequest(1, MTHREADS, 0, 100, 0)),
        ({COUNT: "0", MEMORY: "1000", CORES: "1"}, {}, NO_REQUEST),
        ({COUNT: "-1", MEMORY: "1000", CORES: "1"}, {}, NO_REQUEST),
        ({COUNT: "4294967296", MEMORY: "1000", CORES: "1"}, {}, NO_REQUEST),
        ({COUNT: "1", MEMORY: "16Gi", CORES: "1"}, {}, NO_REQUEST),
        ({COUNT: "1", MEMORY: "16.0Gi", CORES: "1"}, {}, NO_REQUEST),
        ({COUNT: "2", MEMORY: "192", CORES: "32"}, {}, HamiRequest(2, MTHREADS, 49152, 0, 16)),
    ],
)
def test_request_generation(limits, requests, want) -> None:
    assert as_hami(ADAPTER.read_request(container(limits, requests), {}, "c", None)) == want


@pytest.mark.parametrize(
    ("resources", "has", "limits", "annotations"),
    [
        (
            {"limits": {COUNT: "2", MEMORY: "2", CORES: "1"}},
            True,
            {CORES: "32", MEMORY: "192"},
            {"mthreads.com/request-gpu-num": "2"},
        ),
        (
            {"limits": {COUNT: "2"}},
            True,
            {CORES: "32", MEMORY: "192"},
            {"mthreads.com/request-gpu-num": "2"},
        ),
        ({"requests": {COUNT: "1"}}, True, {CORES: "16", MEMORY: "96"}, {}),
        ({"limits": {MEMORY: "2", CORES: "1"}}, False, {}, {}),
        ({"limits": {COUNT: "1", CORES: "1"}}, True, {CORES: "16", MEMORY: "96"}, {}),
        ({"limits": {COUNT: "1", MEMORY: "2", CORES: "1"}}, True, {}, {}),
    ],
)
def test_admission(resources, has, limits, annotations) -> None:
    mutation = BACKEND.mutate({"name": "c", "resources": resources}, {}, "c")
    assert (mutation.has_resource, dict(mutation.limits), dict(mutation.pod_annotations)) == (
        has,
        limits,
        annotations,
    )


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ({"limits": {COUNT: "1", MEMORY: "3"}}, "valid values are [2, 4, 8, 16, 32, 64, 96]"),
        ({"limits": {COUNT: "0"}}, "mthreads.com/vgpu must be greater than 0"),
        ({"limits": {COUNT: "-1"}}, "mthreads.com/vgpu must be greater than 0"),
        ({"requests": {COUNT: "0"}}, "mthreads.com/vgpu must be greater than 0"),
    ],
)
def test_admission_refusals(resources, message) -> None:
    with pytest.raises(InvalidParameterError, match=message.replace("[", r"\[")):
        BACKEND.mutate({"name": "c", "resources": resources}, {}, "c")


def test_node_devices_from_capacity() -> None:
    node = {"metadata": {"name": "test"}, "status": {"capacity": {MEMORY: "1", CORES: "1"}}}
    found = BACKEND.node_devices(node, datetime.now(UTC), timedelta(seconds=60))
    (device,) = found.devices
    assert (device.id, device.index, device.count, device.memory_mib, device.cores) == (
        "test-mthreads-0",
        0,
        100,
        8192,
        16,
    )
    assert (device.type, device.healthy, BACKEND.lock.kind) == (MTHREADS, True, LockKind.NONE)


FIT_CASES = (
    FitCase(
        "fit success",
        (card("dev-0", totalmem=128), card("dev-1", totalmem=128)),
        HamiRequest(1, MTHREADS, 64, 0, 50),
        True,
        1,
        ("dev-1",),
    ),
    FitCase(
        "memory not enough",
        (card("dev-0", totalmem=128),),
        HamiRequest(1, MTHREADS, 512, 0, 50),
        False,
        0,
        reason="1/1 CardInsufficientMemory",
    ),
    FitCase(
        "core not enough",
        (card("dev-0", totalmem=1024, usedcores=100),),
        HamiRequest(1, MTHREADS, 512, 0, 50),
        False,
        0,
        reason="1/1 CardInsufficientCore",
    ),
    FitCase(
        "use uuid mismatch",
        (card("dev-1"),),
        HamiRequest(2, MTHREADS, 512, 0, 50),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={"mthreads.ai/use-gpuuuid": "dev-0"},
    ),
    FitCase(
        "no use uuid match",
        (card("dev-0"),),
        HamiRequest(2, MTHREADS, 512, 0, 50),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={"mthreads.ai/nouse-gpuuuid": "dev-0"},
    ),
    FitCase(
        "card overused",
        (card("dev-0", used=100),),
        HamiRequest(1, MTHREADS, 512, 0, 50),
        False,
        0,
        reason="1/1 CardTimeSlicingExhausted",
    ),
    FitCase(
        "core limit can't exceed 100",
        (card("dev-0"),),
        HamiRequest(1, MTHREADS, 512, 0, 120),
        True,
        1,
        ("dev-0",),
    ),
    FitCase(
        "card exclusively",
        (card("dev-0", used=20),),
        HamiRequest(1, MTHREADS, 512, 0, 100),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
    ),
    FitCase(
        "CardComputeUnitsExhausted",
        (card("dev-0", used=20, usedcores=100),),
        HamiRequest(1, MTHREADS, 512, 0, 0),
        False,
        0,
        reason="1/1 CardComputeUnitsExhausted",
    ),
    FitCase(
        "AllocatedCardsInsufficientRequest",
        (card("dev-0", used=20, usedcores=10),),
        HamiRequest(2, MTHREADS, 512, 0, 20),
        False,
        1,
        reason="1/1 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "memory percentage",
        (card("dev-0", used=20, usedcores=10),),
        HamiRequest(1, MTHREADS, 0, 10, 20),
        True,
        1,
        ("dev-0",),
    ),
    FitCase(
        "mutex rejects used device",
        (card("dev-0", used=1, count=2, totalmem=128),),
        HamiRequest(1, MTHREADS, 64, 0, 50),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    ),
    FitCase(
        "partial allocation",
        (card("dev-0"), card("dev-1", index=1)),
        HamiRequest(3, MTHREADS, 512, 0, 20),
        False,
        2,
        reason="2/2 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "CardNotHealth",
        (card("dev-0", health=False),),
        HamiRequest(1, MTHREADS, 512, 0, 50),
        False,
        0,
        reason="1/1 CardNotHealth",
    ),
)


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c.name)
def test_fit(case: FitCase) -> None:
    picks, reason = run_fit(case, ADAPTER)
    assert ((picks is not None), reason) == (case.fit, case.reason)
    if case.fit:
        assert tuple(grant.uuid for grant in picks) == case.ids


def test_custom_filter_rule_keeps_the_pod_on_one_card() -> None:
    """HAMi's Test_CustomFilterRule: a card the pod already holds passes, another does not."""
    rule_case = FitCase("one card", (card("test123"),), HamiRequest(1, MTHREADS, 64, 0, 1), True, 1)
    held = (Grant("test123", MTHREADS, 64, 1, 0),)
    other = (Grant("test456", MTHREADS, 64, 1, 0),)
    slots = slots_of(rule_case.devices)
    ctx = FitContext(
        Node("n", (slots[0].device,)),
        "d",
        parse_gpu_policy("spread"),
        DEFAULT_WEIGHTS,
        VendorRegistry([ADAPTER]),
        None,
    )
    request = DeviceRequest(MTHREADS, 1, 64, 0, 1)
    assert ADAPTER.fit(slots, request, ctx, [held])[0] is not None
    assert ADAPTER.fit(slots, request, ctx, [other]) == (None, "1/1 CardNotFoundCustomFilterRule")


def test_pod_annotations() -> None:
    grant = Grant("test1", MTHREADS, 1000, 1, 0)
    assigned = {keys.VGPU_NODE: "node-a", keys.VGPU_TIME: "1700000000"}
    assert BACKEND.pod_annotations([(grant,)], PatchContext(assigned=assigned)) == {
        "hami.io/mthreads-vgpu-devices-allocated": "test1,Mthreads,1000,1:;",
        "mthreads.com/gpu-index": "0",
        "mthreads.com/predicate-time": "1700000000000000000",
        "mthreads.com/predicate-node": "node-a",
    }
    assert BACKEND.pod_annotations([], PatchContext(assigned=assigned)) == {}
