"""The whole-device vendors' legacy backends against HAMi's own test values:
Metax GPU (`pkg/device/metax/device_test.go`), Enflame GCU (`enflame/gcu_test.go`),
Vastai (`vastai/device_test.go`) and Biren (`biren/device_test.go`), at 4707fb02."""

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
from dra_driver.engine.model import Device, Node
from dra_driver.engine.vendor_backends.base import LockKind
from dra_driver.engine.vendor_backends.biren import biren_backend
from dra_driver.engine.vendor_backends.enflame_gcu import EnflameGcuBackend, EnflameGcuConfig
from dra_driver.engine.vendor_backends.metax_gpu import MetaxGpuBackend, topology_value
from dra_driver.engine.vendor_backends.vastai import (
    WholeDeviceConfig,
    best_combination,
    vastai_backend,
)

NOW = datetime(2026, 1, 8, tzinfo=UTC)
METAX = MetaxGpuBackend()
GCU = EnflameGcuBackend(EnflameGcuConfig(resourceNameGCU="enflame.com/gcu"))
VASTAI = vastai_backend(WholeDeviceConfig(resourceCountName="vastaitech.com/va"))
BIREN = biren_backend(WholeDeviceConfig(resourceCountName="birentech.com/gpu"))


def read(backend, limits, requests=None):
    return as_hami(
        backend.adapter.read_request(container(limits, requests), {}, "c", None)
        if backend.adapter.read_request
        else _nvidia_reading(backend, limits, requests)
    )


def _nvidia_reading(backend, limits, requests):
    from dra_driver.engine.vendors import VendorRegistry
    from dra_driver.objects.pod_workloads import container_request

    found = container_request(
        container(limits, requests),
        {},
        VendorRegistry([backend.adapter]),
        "c",
        admission_defaults=False,
    )
    return found[0] if found else None


@pytest.mark.parametrize(
    ("backend", "limits", "requests", "want"),
    [
        (
            METAX,
            {"metax-tech.com/gpu": "1"},
            {"metax-tech.com/gpu": "1"},
            HamiRequest(1, "Metax-GPU", 0, 100, 100),
        ),
        (METAX, {}, {}, NO_REQUEST),
        (GCU, {"enflame.com/gcu": "3"}, None, HamiRequest(3, "GCU", 100, 101, 100)),
        (GCU, {}, {"enflame.com/gcu": "2"}, HamiRequest(2, "GCU", 100, 101, 100)),
        (GCU, {}, {}, NO_REQUEST),
        (VASTAI, {"vastaitech.com/va": "1"}, None, HamiRequest(1, "Vastai", 0, 100, 0)),
        (VASTAI, {}, {"vastaitech.com/va": "1"}, HamiRequest(1, "Vastai", 0, 100, 0)),
        (VASTAI, {}, {}, NO_REQUEST),
        (
            BIREN,
            {"birentech.com/gpu": "1"},
            {"birentech.com/gpu": "1"},
            HamiRequest(1, "Biren", 0, 100, 0),
        ),
        (BIREN, {}, {}, NO_REQUEST),
    ],
)
def test_request_generation(backend, limits, requests, want) -> None:
    """HAMi's rows; GCU's percentage is HAMi's 100 with a memory amount, which Fit
    never reads (here: unset, 101)."""
    assert read(backend, limits, requests) == want


@pytest.mark.parametrize(
    ("backend", "resource"),
    [
        (METAX, "metax-tech.com/gpu"),
        (GCU, "enflame.com/gcu"),
        (VASTAI, "vastaitech.com/va"),
        (BIREN, "birentech.com/gpu"),
    ],
)
def test_admission_reports_the_count_in_limits(backend, resource) -> None:
    assert backend.mutate(container({resource: "1"}), {}, "c").has_resource
    assert not backend.mutate(container({}), {}, "c").has_resource


def test_metax_node_devices_from_capacity() -> None:
    node = {"metadata": {"name": "test"}, "status": {"capacity": {"metax-tech.com/gpu": "1"}}}
    (device,) = METAX.node_devices(node, NOW, timedelta(seconds=60)).devices
    assert (device.id, device.index, device.memory_mib, device.cores) == (
        "test-metax-0",
        0,
        65536,
        100,
    )
    assert device.count == 1, "HAMi's code registers one share (its test does not compare Count)"
    assert not METAX.node_devices({"metadata": {"name": "x"}}, NOW, timedelta(0)).usable
    assert METAX.lock.kind is LockKind.NONE


@pytest.mark.parametrize(
    ("index", "value"),
    [(1, 0), (2, 110), (3, 270), (4, 540), (5, 580), (6, 730), (7, 930), (8, 1240)],
)
def test_metax_topology_annotation(index, value) -> None:
    table = '{"1":0,"2":110,"3":270,"4":540,"5":580,"6":730,"7":930,"8":1240}'
    assert topology_value(table, index) == value


@pytest.mark.parametrize(
    ("annotations", "taken", "policy", "want"),
    [
        ({"metax-tech.com/gpu.topology.losses": '{"1":100,"2":200}'}, 2, "binpack", 1800.0),
        ({"metax-tech.com/gpu.topology.scores": '{"1":100,"2":200}'}, 1, "spread", 1900.0),
        ({}, 1, "binpack", 0.0),
    ],
)
def test_metax_score(annotations, taken, policy, want) -> None:
    node = {
        "metadata": {"name": "n", "annotations": annotations},
        "status": {"capacity": {"metax-tech.com/gpu": "2"}},
    }
    devices = METAX.node_devices(node, NOW, timedelta(0)).devices
    grants = [tuple(Grant(d.id, "Metax-GPU", 1000, 1, d.index) for d in devices[:taken])]
    assert METAX.adapter.score(Node("n", devices), grants, [], policy) == want


def test_metax_one_card_per_pod() -> None:
    device = Device("test-1111", 0, "Metax-GPU", 1, 65536, 100)
    held = Grant("test-0000", "Metax-GPU", 1000, 1, 0)
    from dra_driver.engine.vendor_backends.mthreads import one_card_per_pod

    assert one_card_per_pod(device, [(held,)]) is False
    assert one_card_per_pod(Device("test-0000", 0, "Metax-GPU", 1, 65536, 100), [(held,)])


def gcu(id_: str, **kw) -> HamiDevice:
    return HamiDevice(id_, **{"count": 1, "totalmem": 100, "totalcore": 100, "type": "GCU", **kw})


def va(id_: str, **kw) -> HamiDevice:
    return HamiDevice(id_, **{"count": 1, "type": kw.pop("type", "Vastai"), **kw})


GCU_FIT = (
    FitCase(
        "fit success",
        (gcu("dev-0"), gcu("dev-1", index=1)),
        HamiRequest(1, "GCU", 100, 100, 100),
        True,
        1,
        ("dev-1",),
    ),
    FitCase(
        "type mismatch",
        (gcu("dev-0"),),
        HamiRequest(1, "OtherType", 100, 100, 100),
        False,
        0,
        reason="1/1 CardTypeMismatch",
    ),
    FitCase(
        "already used",
        (gcu("dev-0", used=1),),
        HamiRequest(1, "GCU", 100, 100, 100),
        False,
        0,
        reason="1/1 ExclusiveDeviceAllocateConflict",
    ),
    FitCase(
        "insufficient",
        (gcu("dev-0"),),
        HamiRequest(2, "GCU", 100, 100, 100),
        False,
        1,
        reason="1/1 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "partial",
        (gcu("dev-0"), gcu("dev-1", index=1)),
        HamiRequest(3, "GCU", 100, 100, 100),
        False,
        2,
        reason="2/2 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "not healthy",
        (gcu("dev-0", health=False),),
        HamiRequest(1, "GCU", 100, 100, 100),
        False,
        0,
        reason="1/1 CardNotHealth",
    ),
)

DIE = {"DeviceStrategy": "die"}


def whole_fit_cases(name: str, domain: str) -> tuple[FitCase, ...]:
    mutex = {"hami.io/gpu-scheduler-policy": "mutex"}
    return (
        FitCase(
            "fit success",
            (va("dev-0", type=name), va("dev-1", index=1, type=name)),
            HamiRequest(1, name),
            True,
            1,
            ("dev-1",),
        ),
        FitCase(
            "type mismatch",
            (va("dev-0", type=name),),
            HamiRequest(1, "OtherType", 512, 0, 50),
            False,
            0,
            reason="1/1 CardTypeMismatch",
        ),
        FitCase(
            "use uuid mismatch",
            (va("dev-1", type=name),),
            HamiRequest(1, name),
            False,
            0,
            reason="1/1 CardUuidMismatch",
            annotations={f"{domain}/use-gpuuuid": "dev-0"},
        ),
        FitCase(
            "no use uuid",
            (va("dev-0", type=name),),
            HamiRequest(1, name),
            False,
            0,
            reason="1/1 CardUuidMismatch",
            annotations={f"{domain}/nouse-gpuuuid": "dev-0"},
        ),
        FitCase(
            "overused",
            (va("dev-0", used=1, type=name),),
            HamiRequest(1, name),
            False,
            0,
            reason="1/1 CardTimeSlicingExhausted",
        ),
        FitCase(
            "insufficient",
            (va("dev-0", type=name),),
            HamiRequest(2, name),
            False,
            1,
            reason="1/1 AllocatedCardsInsufficientRequest",
        ),
        FitCase(
            "mutex",
            (va("dev-0", used=1, count=2, type=name),),
            HamiRequest(1, name),
            False,
            0,
            reason="1/1 ExclusiveDeviceAllocateConflict",
            annotations=mutex,
        ),
        FitCase(
            "partial",
            (
                va("dev-0", count=100, totalmem=1280, totalcore=100, type=name),
                va("dev-1", index=1, count=100, totalmem=1280, totalcore=100, type=name),
            ),
            HamiRequest(3, name, 512, 0, 20),
            False,
            2,
            reason="2/2 AllocatedCardsInsufficientRequest",
        ),
        FitCase(
            "not healthy",
            (va("dev-0", health=False, type=name),),
            HamiRequest(1, name),
            False,
            0,
            reason="1/1 CardNotHealth",
        ),
    )


VASTAI_DIES = (
    FitCase(
        "mutex die mode picks a die on a free card",
        (
            va("dev-0", used=1, count=2, custom_info={**DIE, "AIC": "1"}),
            va("dev-1", index=1, custom_info={**DIE, "AIC": "1"}),
            va("dev-2", index=2, custom_info={**DIE, "AIC": "2"}),
        ),
        HamiRequest(1, "Vastai"),
        True,
        1,
        ("dev-2",),
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    ),
    FitCase(
        "mutex die mode refuses idle dies of an occupied card",
        (
            va("dev-0", used=1, count=2, custom_info={**DIE, "AIC": "1"}),
            va("dev-1", index=1, custom_info={**DIE, "AIC": "1"}),
        ),
        HamiRequest(1, "Vastai"),
        False,
        0,
        reason="2/2 ExclusiveDeviceAllocateConflict",
        annotations={"hami.io/gpu-scheduler-policy": "mutex"},
    ),
)


@pytest.mark.parametrize(
    ("backend", "case"),
    [(GCU, c) for c in GCU_FIT]
    + [(VASTAI, c) for c in whole_fit_cases("Vastai", "vastaitech.com") + VASTAI_DIES]
    + [(BIREN, c) for c in whole_fit_cases("Biren", "birentech.com")],
    ids=lambda v: getattr(v, "name", None) or type(v).__name__,
)
def test_fit(backend, case: FitCase) -> None:
    picks, reason = run_fit(case, backend.adapter)
    assert ((picks is not None), reason) == (case.fit, case.reason)
    if case.fit:
        assert tuple(grant.uuid for grant in picks) == case.ids
        assert all(grant.memory_mib == case.request.memreq for grant in picks)


@pytest.mark.parametrize(
    ("wanted", "aics", "want"),
    [
        (2, "111", ("dev1", "dev2")),
        (3, "111223", ("dev1", "dev2", "dev3")),
        (4, "111223", ("dev1", "dev2", "dev3", "dev4")),
        (5, "112", ("dev1", "dev2", "dev3")),
    ],
)
def test_vastai_best_combination(wanted, aics, want) -> None:
    """HAMi's TestComputeBestCombination rows (dev<i> on AIC aics[i-1])."""
    picks = [Grant(f"dev{i}", "Vastai", 0, 0, i) for i in range(1, len(aics) + 1)]
    infos = {f"dev{i}": {"AIC": aic} for i, aic in enumerate(aics, start=1)}
    assert tuple(g.uuid for g in best_combination(wanted, picks, infos)) == want


def test_vastai_score_is_the_share_of_dies_on_one_aic() -> None:
    devices = tuple(
        Device(f"d{i}", i, "Vastai", 1, 0, 100, custom_info={**DIE, "AIC": a})
        for i, a in enumerate("1123")
    )
    node = Node("n", devices)
    grants = [tuple(Grant(d.id, "Vastai", 0, 0, d.index) for d in devices[:3])]
    assert VASTAI.adapter.score(node, grants, [], "binpack") == pytest.approx(2 / 3)
    plain = Node("n", (Device("p0", 0, "Vastai", 1, 0, 100),))
    assert VASTAI.adapter.score(plain, [(Grant("p0", "Vastai", 0, 0, 0),)], [], "binpack") == 0.0


@pytest.mark.parametrize(
    ("backend", "key", "handshake"),
    [
        (VASTAI, "hami.io/node-va-register", "hami.io/node-handshake-va"),
        (BIREN, "hami.io/node-biren-register", "hami.io/node-handshake-biren"),
    ],
)
def test_json_register_and_handshake(backend, key, handshake) -> None:
    name = backend.name
    value = (
        f'[{{"id":"7-0","count":1,"devmem":32768,"type":"{name}",'
        '"health":true,"devicepairscore":{}}]'
    )
    node = {"metadata": {"name": "n", "annotations": {key: value}}}
    (device,) = backend.node_devices(node, NOW, timedelta(seconds=60)).devices
    assert (
        device.id,
        device.count,
        device.memory_mib,
        device.cores,
        device.type,
        device.index,
    ) == (
        "7-0",
        1,
        32768,
        100,
        name,
        0,
    )
    assert device.healthy
    for bad in (":", ""):
        broken = {"metadata": {"name": "n", "annotations": {key: bad}}}
        assert not backend.node_devices(broken, NOW, timedelta(seconds=60)).usable
    expired = {
        "metadata": {
            "name": "n",
            "annotations": {key: value, handshake: "Requesting_2025-01-07 00:00:00"},
        }
    }
    assert not backend.node_devices(expired, NOW, timedelta(seconds=60)).devices[0].healthy
    unknown = {"metadata": {"name": "n", "annotations": {key: value, handshake: "Unknown"}}}
    assert backend.node_devices(unknown, NOW, timedelta(seconds=60)).devices[0].healthy
    assert backend.lock.kind is LockKind.SHARED


def test_gcu_capacity_and_health() -> None:
    node = {"metadata": {"name": "testnode"}, "status": {"capacity": {"enflame.com/gcu": "2"}}}
    found = GCU.node_devices(node, NOW, timedelta(0))
    assert [(d.id, d.index, d.count, d.memory_mib, d.cores, d.type) for d in found.devices] == [
        ("testnode-GCU-0", 0, 1, 100, 100, "GCU"),
        ("testnode-GCU-1", 1, 1, 100, 100, "GCU"),
    ]
    missing = GCU.node_devices({"metadata": {"name": "testnode"}}, NOW, timedelta(0))
    assert not missing.usable and missing.devices == ()


@pytest.mark.parametrize(
    ("backend", "grant", "want"),
    [
        (
            GCU,
            Grant("testnode-GCU-0", "GCU", 0, 0, 0),
            {
                "hami.io/enflame-gcu-devices-to-allocate": "testnode-GCU-0,GCU,0,0:;",
                "hami.io/enflame-gcu-devices-allocated": "testnode-GCU-0,GCU,0,0:;",
            },
        ),
        (
            VASTAI,
            Grant("test1", "Vastai", 2048, 1, 1),
            {
                "hami.io/Vastai-devices-to-allocate": "test1,Vastai,2048,1:;",
                "hami.io/Vastai-devices-allocated": "test1,Vastai,2048,1:;",
            },
        ),
        (
            BIREN,
            Grant("test1", "Biren", 2048, 1, 1),
            {
                "hami.io/Biren-devices-to-allocate": "test1,Biren,2048,1:;",
                "hami.io/Biren-devices-allocated": "test1,Biren,2048,1:;",
            },
        ),
        (
            METAX,
            Grant("m-0", "Metax-GPU", 65536, 100, 0),
            {
                "hami.io/metax-gpu-devices-to-allocate": "m-0,Metax-GPU,65536,100:;",
                "hami.io/metax-gpu-devices-allocated": "m-0,Metax-GPU,65536,100:;",
            },
        ),
    ],
)
def test_pod_annotations(backend, grant, want) -> None:
    assert backend.pod_annotations([(grant,)]) == want
    assert backend.pod_annotations([]) == {}
