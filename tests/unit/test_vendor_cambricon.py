"""Cambricon MLU's legacy backend against HAMi's own test values.

Every table row is a row of HAMi's `pkg/device/cambricon/device_test.go`
(4707fb02): its inputs and the outputs HAMi's test expects.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hami_vendor_cases import (
    NO_REQUEST,
    FitCase,
    HamiDevice,
    HamiRequest,
    RequestCase,
    as_hami,
    container,
    run_fit,
)

from dra_driver.engine.grants import Grant
from dra_driver.engine.vendor_backends.base import LockKind
from dra_driver.engine.vendor_backends.cambricon import (
    LOCK_EXPIRY,
    LOCK_KEY,
    CambriconBackend,
    CambriconConfig,
)
from dra_driver.objects.node_lock import LockState, NodeLockError, lock_value, view_lock
from dra_driver.objects.quotas import quota_limits

TEST_CONFIG = CambriconConfig(
    resourceCountName="cambricon.com/mlu",
    resourceMemoryName="cambricon.com/mlu.smlu.vmemory",
    resourceCoreName="cambricon.com/mlu.smlu.vcore",
)
BACKEND = CambriconBackend(TEST_CONFIG)
ADAPTER = BACKEND.adapter
MLU = "MLU"
COUNT, MEMORY, CORES = (
    "cambricon.com/mlu",
    "cambricon.com/mlu.smlu.vmemory",
    "cambricon.com/mlu.smlu.vcore",
)


def mlu(id_: str, **kw) -> HamiDevice:
    values = {"count": 100, "totalmem": 1280, "totalcore": 100, "type": MLU, **kw}
    return HamiDevice(id_, **values)


REQUEST_CASES = (
    RequestCase("don't set to limits and request", {}, {}, NO_REQUEST),
    RequestCase(
        "count, memory and cores set",
        {COUNT: "1", MEMORY: "1000", CORES: "2"},
        {COUNT: "1", MEMORY: "1000", CORES: "2"},
        HamiRequest(1, MLU, 256000, 0, 2),
    ),
    RequestCase(
        "cores not set: exclusive",
        {COUNT: "1", MEMORY: "1000"},
        {COUNT: "1", MEMORY: "1000"},
        HamiRequest(1, MLU, 256000, 0, 100),
    ),
    RequestCase(
        "memory not set: whole card",
        {COUNT: "1", CORES: "2"},
        {COUNT: "1", CORES: "2"},
        HamiRequest(1, MLU, 0, 100, 2),
    ),
    RequestCase(
        "memory overflowing int32 is rejected", {COUNT: "1", MEMORY: "16Gi"}, {}, NO_REQUEST
    ),
    RequestCase("decimal-form memory is rejected", {COUNT: "1", MEMORY: "16.0Gi"}, {}, NO_REQUEST),
)

FIT_CASES = (
    FitCase(
        "fit success",
        (mlu("dev-0", totalmem=128), mlu("dev-1", totalmem=128)),
        HamiRequest(1, MLU, 64, 0, 50),
        True,
        1,
        ("dev-1",),
    ),
    FitCase(
        "fit fail: memory not enough",
        (mlu("dev-0", totalmem=128),),
        HamiRequest(1, MLU, 512, 0, 50),
        False,
        0,
        reason="1/1 CardInsufficientMemory",
    ),
    FitCase(
        "fit fail: core not enough",
        (mlu("dev-0", totalmem=1024, usedcores=100),),
        HamiRequest(1, MLU, 512, 0, 50),
        False,
        0,
        reason="1/1 CardInsufficientCore",
    ),
    FitCase(
        "fit fail: type mismatch",
        (mlu("dev-0", totalmem=128),),
        HamiRequest(1, "OtherType", 512, 0, 50),
        False,
        0,
        reason="1/1 CardTypeMismatch",
    ),
    FitCase(
        "fit fail: user assign use uuid mismatch",
        (mlu("dev-1"),),
        HamiRequest(2, MLU, 512, 0, 50),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={"cambricon.com/use-gpuuuid": "dev-0"},
    ),
    FitCase(
        "fit fail: user assign no use uuid match",
        (mlu("dev-0"),),
        HamiRequest(2, MLU, 512, 0, 50),
        False,
        0,
        reason="1/1 CardUuidMismatch",
        annotations={"cambricon.com/nouse-gpuuuid": "dev-0"},
    ),
    FitCase(
        "fit fail: card overused",
        (mlu("dev-0", used=100),),
        HamiRequest(1, MLU, 512, 0, 50),
        False,
        0,
        reason="1/1 CardTimeSlicingExhausted",
    ),
    FitCase(
        "fit success: but core limit can't exceed 100",
        (mlu("dev-0"),),
        HamiRequest(1, MLU, 512, 0, 120),
        True,
        1,
        ("dev-0",),
    ),
    FitCase(
        "fit fail: card exclusively",
        (mlu("dev-0", used=20),),
        HamiRequest(1, MLU, 512, 0, 100),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
    ),
    FitCase(
        "fit fail: CardComputeUnitsExhausted",
        (mlu("dev-0", used=20, usedcores=100),),
        HamiRequest(1, MLU, 512, 0, 0),
        False,
        0,
        reason="1/1 CardComputeUnitsExhausted",
    ),
    FitCase(
        "fit fail: AllocatedCardsInsufficientRequest",
        (mlu("dev-0", used=20, usedcores=10),),
        HamiRequest(2, MLU, 512, 0, 20),
        False,
        1,
        reason="1/1 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "fit success: memory percentage",
        (mlu("dev-0", used=20, usedcores=10),),
        HamiRequest(1, MLU, 0, 10, 20),
        True,
        1,
        ("dev-0",),
    ),
    FitCase(
        "mutex policy rejects used device",
        (mlu("dev-0", used=1, totalmem=128),),
        HamiRequest(1, MLU, 64, 0, 50),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    ),
    FitCase(
        "fit fail: partial allocation for multiple cards",
        (mlu("dev-0"), mlu("dev-1", index=1)),
        HamiRequest(3, MLU, 512, 0, 20),
        False,
        2,
        reason="2/2 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "fit fail: CardNotHealth",
        (mlu("dev-0", totalmem=128, health=False),),
        HamiRequest(1, MLU, 64, 0, 50),
        False,
        0,
        reason="1/1 CardNotHealth",
    ),
)


@pytest.mark.parametrize("case", REQUEST_CASES, ids=lambda c: c.name)
def test_request_generation(case: RequestCase) -> None:
    dropped: list[str] = []
    request = ADAPTER.read_request(container(case.limits, case.requests), {}, "c", dropped)
    assert as_hami(request) == case.want
    assert bool(dropped) == ("rejected" in case.name)


def test_default_config_counts_vmlu() -> None:
    """HAMi's InitDefaultDevices configures `cambricon.com/vmlu`, not the flag's `mlu`."""
    default = CambriconBackend().adapter
    assert default.resources.count == "cambricon.com/vmlu"
    asked = container({"cambricon.com/vmlu": "1"})
    assert as_hami(default.read_request(asked, {}, "c", None)) == HamiRequest(1, MLU, 0, 100, 100)


def test_admission_reports_the_count_and_changes_nothing() -> None:
    mutation = BACKEND.mutate(container({COUNT: "1"}), {}, "c")
    assert mutation.has_resource
    assert (mutation.limits, mutation.requests, mutation.env) == ({}, {}, ())
    assert not BACKEND.mutate(container({}), {}, "c").has_resource


def test_node_devices_from_capacity() -> None:
    node = {"metadata": {"name": "test"}, "status": {"capacity": {CORES: "1", MEMORY: "1"}}}
    found = BACKEND.node_devices(node, datetime.now(UTC), timedelta(seconds=60))
    (device,) = found.devices
    assert found.usable and found.healthy
    assert (device.id, device.index, device.count, device.memory_mib, device.cores) == (
        "test-cambricon-mlu-0",
        0,
        100,
        25600,
        100,
    )
    assert device.type == MLU


def test_node_devices_split_capacity_per_card() -> None:
    """HAMi's setupTest node: 200 vcore and 4096 vmemory are two cards of 524288 MiB."""
    node = {
        "metadata": {"name": "test-node"},
        "status": {"capacity": {CORES: "200", MEMORY: "4096"}},
    }
    found = BACKEND.node_devices(node, datetime.now(UTC), timedelta(seconds=60))
    assert [(d.id, d.memory_mib) for d in found.devices] == [
        ("test-node-cambricon-mlu-0", 524288),
        ("test-node-cambricon-mlu-1", 524288),
    ]


def test_node_without_vcore_capacity_has_no_devices() -> None:
    found = BACKEND.node_devices({"metadata": {"name": "x"}}, datetime.now(UTC), timedelta(0))
    assert not found.usable and found.devices == ()
    assert found.problem == f"device not found {CORES}"


def test_type_routing_is_by_vendor_name() -> None:
    """HAMi's checkType: the MLU request takes MLU devices and no other type."""
    assert ADAPTER.matches("MLU")
    assert not ADAPTER.matches("TEST")


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda c: c.name)
def test_fit(case: FitCase) -> None:
    if case.request.type != MLU:
        pytest.skip("a request of another Type never reaches this vendor's Fit here")
    picks, reason = run_fit(case, ADAPTER)
    assert (picks is not None) == case.fit
    assert reason == case.reason
    if case.fit:
        assert tuple(grant.uuid for grant in picks) == case.ids


def test_fit_whole_card_request_is_charged_to_the_namespace_quota() -> None:
    """HAMi#2468: a whole-card ask (no memory, 100 %) counts against `limits.<vmemory>`
    (50 units = 12800 MiB) and is refused on a 40960 MiB card."""
    hard = {"limits.cambricon.com/mlu.smlu.vmemory": "50"}
    quota = {"metadata": {"namespace": "q", "name": "mlu-quota"}, "spec": {"hard": hard}}
    ledger = quota_limits([quota], [ADAPTER])
    case = FitCase(
        "whole card over quota",
        (mlu("dev-0", totalmem=40960),),
        HamiRequest(1, MLU, 0, 100, 10),
        False,
        0,
        reason="1/1 ResourceQuotaNotFit",
    )
    picks, reason = run_fit(case, ADAPTER, ledger, namespace="q")
    assert (picks, reason) == (None, "1/1 ResourceQuotaNotFit")


def test_pod_annotations() -> None:
    grant = Grant("device-0", MLU, 256000, 1, 0)
    assert BACKEND.pod_annotations([(grant,)]) == {
        "CAMBRICON_DSMLU_ASSIGNED": "false",
        "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
        "hami.io/cambricon-mlu-devices-to-allocate": "device-0,MLU,256000,1:;",
        "hami.io/cambricon-mlu-devices-allocated": "device-0,MLU,256000,1:;",
    }


def test_pod_annotations_with_a_leading_container_without_device() -> None:
    grant = Grant("device-0", MLU, 256000, 1, 0)
    assert BACKEND.pod_annotations([(), (grant,)]) == {
        "CAMBRICON_DSMLU_ASSIGNED": "false",
        "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
        "hami.io/cambricon-mlu-devices-to-allocate": ";device-0,MLU,256000,1:;",
        "hami.io/cambricon-mlu-devices-allocated": ";device-0,MLU,256000,1:;",
    }


def test_pod_annotations_without_devices() -> None:
    assert BACKEND.pod_annotations([]) == {}


def test_own_lock_is_a_bare_time_that_expires_after_two_minutes() -> None:
    """HAMi's Test_LockNode rows through the lock rules with Cambricon's LockRule."""
    rule = BACKEND.lock
    assert (rule.kind, rule.key, rule.records_owner, rule.expiry) == (
        LockKind.OWN,
        LOCK_KEY,
        False,
        LOCK_EXPIRY,
    )
    now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    assert lock_value("", "", now) == "2026-01-01T12:00:00Z"

    def state(value: str | None) -> LockState:
        return view_lock("n", value, "default", "p", now, LOCK_EXPIRY).state

    assert state(None) is LockState.FREE
    assert state(lock_value("", "", now - timedelta(minutes=1))) is LockState.BLOCKED
    assert state(lock_value("", "", now - timedelta(hours=1))) is LockState.EXPIRED
    with pytest.raises(NodeLockError):
        state("invalid-format")


def test_lock_taken_only_for_app_containers_asking_for_mlu() -> None:
    from dra_driver.engine.requests import DeviceRequest, PodRequest

    mlu_request = DeviceRequest(MLU, 1)
    assert BACKEND.needs_lock(PodRequest("d", "p", ((mlu_request,),)))
    assert not BACKEND.needs_lock(PodRequest("d", "p", ((),), init_containers=((mlu_request,),)))
