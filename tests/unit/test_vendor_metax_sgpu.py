"""Metax sGPU's legacy backend against HAMi's own test values.

Rows come from HAMi's `pkg/device/metax/sdevice_test.go` (4707fb02):
TestMutateAdmission, TestGenerateResourceRequests, TestGetMetaxSDevices,
TestCheckDeviceQos, TestAddJitteryQos, TestMetaxSDevices_Fit,
TestPrioritizeExclusiveDevices, TestNeedScore, TestScoreExclusiveDevices,
TestCheckAppClass, TestPrioritizeOnlineDevices, TestScoreOnlineDevices, and the
Metax-SGPU rows of `pkg/scheduler/policy/node_policy_test.go` TestOverrideScore.
A pod already on a card is a share with its tag (HAMi's PodInfos).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hami_vendor_cases import NO_REQUEST, FitCase, HamiDevice, HamiRequest, as_hami, container
from vendor_fit_helpers import slots_of

from dra_driver.engine.grants import Grant, Slot
from dra_driver.engine.model import Device, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import DEFAULT_WEIGHTS, DeviceRequest
from dra_driver.engine.vendor_backends.base import PatchContext
from dra_driver.engine.vendor_backends.metax_sgpu import (
    MetaxSgpuBackend,
    MetaxSgpuConfig,
    read_sgpu_request,
)
from dra_driver.engine.vendor_backends.metax_sgpu_fit import (
    APP_CLASS,
    METAX_SGPU,
    OFFLINE,
    ONLINE,
    QOS_POLICY,
    TOPOLOGY_AWARE,
    app_class_fits,
    prefer_link_zone,
    prefer_online,
    qos_fits,
    score_exclusive,
    score_online,
    sgpu_score,
    share_tag,
    topology_scored,
)
from dra_driver.engine.vendor_backends.registry import build_backends, read_sections
from dra_driver.engine.vendors import FitContext, VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_workloads import vendor_filters

COUNT, CORE, MEMORY = "metax-tech.com/sgpu", "metax-tech.com/vcore", "metax-tech.com/vmemory"
CONFIG = MetaxSgpuConfig(
    resourceVCountName=COUNT, resourceVCoreName=CORE, resourceVMemoryName=MEMORY
)
BACKEND = MetaxSgpuBackend(CONFIG)
ADAPTER = BACKEND.adapter
NOW = datetime(2026, 8, 21, 6, 0, 0, tzinfo=UTC)
BEST, FIXED, BURST = "best-effort", "fixed-share", "burst-share"


def pod(annotations: dict[str, str] | None) -> dict:
    return {"metadata": {"annotations": annotations}} if annotations is not None else {}


# -- TestMutateAdmission


@pytest.mark.parametrize(
    ("limits", "annotations", "has", "added"),
    [
        ({}, {QOS_POLICY: BEST}, False, {}),
        ({COUNT: "1"}, {}, True, {QOS_POLICY: BEST}),
        ({COUNT: "1"}, None, True, {QOS_POLICY: BEST}),
        ({COUNT: "1"}, {QOS_POLICY: BURST}, True, {}),
        ({COUNT: "1"}, {APP_CLASS: ONLINE, QOS_POLICY: "best-effortx"}, True, {}),
    ],
)
def test_admission(limits, annotations, has, added) -> None:
    mutation = BACKEND.mutate(container(limits), pod(annotations), "spec.containers[0]")
    assert mutation.has_resource is has
    assert dict(mutation.pod_annotations) == added


def test_admission_reads_limits_only() -> None:
    assert not BACKEND.mutate(container({}, {COUNT: "1"}), pod({}), "c").has_resource


@pytest.mark.parametrize(
    ("limits", "annotations", "field", "message"),
    [
        (
            {COUNT: "1"},
            {QOS_POLICY: "best-effortx"},
            f"metadata.annotations[{QOS_POLICY}]",
            f"{QOS_POLICY} must be set one of [best-effort, fixed-share, burst-share]",
        ),
        (
            {COUNT: "2"},
            {APP_CLASS: ONLINE},
            f"spec.containers[0].resources.limits.{COUNT}",
            "app-class pod must request single device",
        ),
        (
            {COUNT: "1"},
            {APP_CLASS: "oNLine"},
            f"metadata.annotations[{APP_CLASS}]",
            f"{APP_CLASS} must be set one of [online, offline]",
        ),
        (
            {COUNT: "1"},
            {APP_CLASS: OFFLINE, QOS_POLICY: "best-effortx"},
            f"metadata.annotations[{QOS_POLICY}]",
            f"{QOS_POLICY} must be set one of [best-effort, fixed-share, burst-share]",
        ),
    ],
)
def test_admission_refusals_carry_hamis_messages(limits, annotations, field, message) -> None:
    with pytest.raises(InvalidParameterError) as refused:
        BACKEND.mutate(container(limits), pod(annotations), "spec.containers[0]")
    assert refused.value.field == field
    assert refused.value.reason == message


# -- TestGenerateResourceRequests


@pytest.mark.parametrize(
    ("limits", "want"),
    [
        ({COUNT: "1"}, HamiRequest(1, METAX_SGPU, 0, 100, 100)),
        ({COUNT: "2"}, HamiRequest(2, METAX_SGPU, 0, 100, 100)),
        ({COUNT: "1", CORE: "30"}, HamiRequest(1, METAX_SGPU, 0, 100, 30)),
        ({COUNT: "1", MEMORY: "16"}, HamiRequest(1, METAX_SGPU, 16 * 1024, 0, 100)),
        ({COUNT: "1", CORE: "60", MEMORY: "16"}, HamiRequest(1, METAX_SGPU, 16 * 1024, 0, 60)),
        ({COUNT: "1", CORE: "60", MEMORY: "1024Mi"}, HamiRequest(1, METAX_SGPU, 1024, 0, 60)),
        ({COUNT: "1", CORE: "60", MEMORY: "16Gi"}, HamiRequest(1, METAX_SGPU, 16 * 1024, 0, 60)),
        ({COUNT: "1", MEMORY: "2100001"}, NO_REQUEST),
        ({COUNT: "2200000000"}, NO_REQUEST),
        ({COUNT: "1", CORE: "2200000000"}, NO_REQUEST),
    ],
)
def test_request_generation(limits, want) -> None:
    dropped: list[str] = []
    request = read_sgpu_request(ADAPTER, container(limits), {}, "spec.containers[0]", dropped)
    assert as_hami(request) == want


def test_request_reads_limits_only_and_names_a_dropped_memory() -> None:
    assert read_sgpu_request(ADAPTER, container({}, {COUNT: "1"}), {}, "c", None) is None
    dropped: list[str] = []
    read_sgpu_request(ADAPTER, container({COUNT: "1", MEMORY: "2100001"}), {}, "c", dropped)
    assert dropped and dropped[0].startswith(f"c.resources.limits.{MEMORY}: 2100001")


def test_a_decimal_thousand_reads_as_bytes_as_its_canonical_form_has_a_unit() -> None:
    """Quantity.String() of 2000 is `2k`: HAMi sees a unit and divides bytes to MiB."""
    request = read_sgpu_request(ADAPTER, container({COUNT: "1", MEMORY: "2000"}), {}, "c", None)
    assert as_hami(request) == HamiRequest(1, METAX_SGPU, 0, 100, 100)


def test_request_carries_the_pods_metax_annotations_and_uuid_filters() -> None:
    annotations = {APP_CLASS: ONLINE, "metax-tech.com/use-gpuuuid": "GPU-1", "other": "x"}
    request = read_sgpu_request(ADAPTER, container({COUNT: "1"}), annotations, "c", None)
    assert request is not None
    assert request.pod_facts == ((APP_CLASS, ONLINE),)
    assert request.filters.use_uuids == ("GPU-1",)


# -- TestGetMetaxSDevices

REGISTER = (
    '[{"uuid": "GPU-123", "model": "sgpu", "totalDevCount": 16, "totalCompute": 100, '
    '"bdf": "0000:44:00.0", "totalVRam" : 32768, "numa": 1, "healthy": true, '
    '"qosPolicy": "fixed-share"}]'
)


def node_with(annotations: dict[str, str]) -> dict:
    return {"metadata": {"name": "normal", "annotations": annotations}}


def test_register_decodes_to_devices_with_custom_info() -> None:
    read = BACKEND.node_devices(
        node_with({"metax-tech.com/node-gpu-devices": REGISTER}), NOW, timedelta(seconds=60)
    )
    assert read.usable
    assert read.devices == (
        Device(
            id="GPU-123",
            index=0,
            type=METAX_SGPU,
            count=16,
            memory_mib=32768,
            cores=100,
            numa=1,
            healthy=True,
            mode="",
            custom_info={"QosPolicy": FIXED, "Model": "sgpu", "LinkZone": 0},
        ),
    )


@pytest.mark.parametrize(
    "annotations",
    [
        {},
        {"metax-tech.com/node-gpu-devices": ""},
        {"metax-tech.com/node-gpu-devices": "[]"},
        {"metax-tech.com/node-gpu-devices": '[{"uuid": "GPU-1", "totalVRam": "big"}]'},
    ],
    ids=["annotations nil", "Unmarshal fail", "devices len 0", "wrong type"],
)
def test_register_without_devices_gives_none(annotations) -> None:
    read = BACKEND.node_devices(node_with(annotations), NOW, timedelta(seconds=60))
    assert not read.usable
    assert read.devices == ()


def test_register_keys_match_case_insensitively_as_go_json() -> None:
    value = '[{"UUID": "GPU-9", "TotalVRam": 1024, "LinkZone": 2, "Healthy": false}]'
    read = BACKEND.node_devices(
        node_with({"metax-tech.com/node-gpu-devices": value}), NOW, timedelta(seconds=60)
    )
    (device,) = read.devices
    assert (device.id, device.memory_mib, device.healthy) == ("GPU-9", 1024, False)
    assert device.custom_info["LinkZone"] == 2


# -- shares already on a card: TestCheckDeviceQos, TestAddJitteryQos, TestCheckAppClass


def card(used: int = 0, tags: tuple[str, ...] = (), qos: str = "", zone: int = 0, uid="GPU-123"):
    device = Device(
        uid, 0, METAX_SGPU, 100, 1024, 100, custom_info={"QosPolicy": qos, "LinkZone": zone}
    )
    return Slot(device, used, 0, 0, tags)


def share(app_class: str = "", qos: str = "", cores: int = 50) -> str:
    return share_tag(app_class, qos, cores)


@pytest.mark.parametrize(
    ("slot", "cores", "fits"),
    [
        (card(0, qos=BURST), 50, True),
        (card(2, qos=BURST), 100, True),
        (card(2, qos=BURST), 50, False),
        (card(2, qos=BEST), 50, True),
    ],
    ids=["no use device", "request exclusive", "check fail", "check pass"],
)
def test_check_device_qos(slot, cores, fits) -> None:
    request = DeviceRequest(METAX_SGPU, 1, cores=cores)
    assert qos_fits(BEST, slot, request, []) is fits


def test_the_latest_shares_promise_wins_over_the_register_as_hamis_jittery_cache() -> None:
    """TestAddJitteryQos: a best-effort pod at 50 cores promises best-effort, a whole
    card promises none; that promise, not the register, is what the card runs."""
    request = DeviceRequest(METAX_SGPU, 1, cores=50)
    assert share_tag("", BEST, 50) == ";best-effort"
    assert share_tag("", BEST, 100) == ";"
    assert not qos_fits(FIXED, card(1, (share("", BEST),), qos=FIXED), request, [])
    assert qos_fits(FIXED, card(1, (share("", BEST, 100),), qos=BEST), request, [])


@pytest.mark.parametrize(
    ("asked", "slot", "fits"),
    [
        (ONLINE, card(0), True),
        ("", card(1, (share(ONLINE),)), False),
        ("", card(1, (share(OFFLINE, BEST),)), False),
        ("", card(1, (share("", BEST),)), True),
        (ONLINE, card(1, (share("", BEST),)), False),
        (ONLINE, card(2, (share(ONLINE), share(OFFLINE, BEST))), True),
        (OFFLINE, card(2, (share(ONLINE), share(OFFLINE, BEST))), False),
    ],
)
def test_check_app_class(asked, slot, fits) -> None:
    assert app_class_fits(asked, slot) is fits


# -- TestMetaxSDevices_Fit


def sgpu(id: str = "dev-0", **fields) -> HamiDevice:
    values = {"count": 100, "totalmem": 128, "totalcore": 100, "type": METAX_SGPU} | fields
    return HamiDevice(id, **values)


def ask(nums=1, memreq=512, mempct=0, cores=50, type=METAX_SGPU) -> HamiRequest:
    return HamiRequest(nums, type, memreq, mempct, cores)


ON_CARD = "on card"
"""FitCase annotations key (not a pod annotation): the tags of the shares on dev-0."""

FIT_CASES = [
    FitCase("fit success", (sgpu(), sgpu("dev-1")), ask(memreq=64), True, 1, ("dev-1",)),
    FitCase("memory not enough", (sgpu(),), ask(), False, 0, (), "1/1 CardInsufficientMemory"),
    FitCase(
        "core not enough",
        (sgpu(totalmem=1024, usedcores=100),),
        ask(),
        False,
        0,
        (),
        "1/1 CardInsufficientCore",
    ),
    FitCase(
        "type mismatch", (sgpu(),), ask(type="OtherType"), False, 0, (), "1/1 CardTypeMismatch"
    ),
    FitCase(
        "online task, app class unfit",
        (sgpu(used=1, usedmem=64, usedcores=10),),
        ask(),
        False,
        0,
        (),
        "1/1 CardAppClassMismatch",
        {APP_CLASS: ONLINE, ON_CARD: share("", "")},
    ),
    FitCase(
        "normal task, app class unfit",
        (sgpu(used=1, usedmem=64, usedcores=10),),
        ask(),
        False,
        0,
        (),
        "1/1 CardAppClassMismatch",
        {ON_CARD: share(ONLINE)},
    ),
    FitCase("device unhealthy", (sgpu(health=False),), ask(), False, 0, (), "1/1 CardUnhealthy"),
    FitCase(
        "card overused",
        (sgpu(used=100, totalmem=1280),),
        ask(),
        False,
        0,
        (),
        "1/1 CardTimeSlicingExhausted",
    ),
    FitCase(
        "core limit can't exceed 100",
        (sgpu(totalmem=1280),),
        ask(cores=120),
        False,
        0,
        (),
        "1/1 CardInsufficientCore",
    ),
    FitCase(
        "card exclusively",
        (sgpu(used=20, totalmem=1280),),
        ask(cores=100),
        False,
        0,
        (),
        "1/1 ExclusiveDeviceAllocateConflict",
    ),
    FitCase(
        "use uuid mismatch",
        (sgpu("dev-1", totalmem=1280),),
        ask(nums=2),
        False,
        0,
        (),
        "1/1 CardUuidMismatch",
        {"metax-tech.com/use-gpuuuid": "dev-0"},
    ),
    FitCase(
        "no use uuid match",
        (sgpu(totalmem=1280),),
        ask(nums=2),
        False,
        0,
        (),
        "1/1 CardUuidMismatch",
        {"metax-tech.com/nouse-gpuuuid": "dev-0"},
    ),
    FitCase(
        "CardComputeUnitsExhausted",
        (sgpu(used=20, totalmem=1280, usedcores=100),),
        ask(cores=0),
        False,
        0,
        (),
        "1/1 CardComputeUnitsExhausted",
    ),
    FitCase(
        "AllocatedCardsInsufficientRequest",
        (sgpu(used=20, totalmem=1280, usedcores=10),),
        ask(nums=2, cores=20),
        False,
        0,
        (),
        "1/1 AllocatedCardsInsufficientRequest",
    ),
    FitCase(
        "memory percentage",
        (sgpu(used=20, totalmem=1280, usedcores=10),),
        ask(memreq=0, mempct=10, cores=20),
        True,
        1,
        ("dev-0",),
    ),
    FitCase(
        "mutex policy rejects used device",
        (sgpu(used=1),),
        ask(memreq=64),
        False,
        0,
        (),
        "1/1 ExclusiveDeviceAllocateConflict",
        {"hami.io/gpu-scheduler-policy": "mutex"},
    ),
]


def run_sgpu_fit(case: FitCase):
    annotations = {k: v for k, v in case.annotations.items() if k != ON_CARD}
    slots = slots_of(case.devices)
    if ON_CARD in case.annotations:
        slots[0].tags = (case.annotations[ON_CARD],)
    request = DeviceRequest(
        vendor=case.request.type,
        count=case.request.nums,
        memory_mib=case.request.memreq,
        memory_percent=case.request.mempct,
        cores=case.request.coresreq,
        filters=vendor_filters(ADAPTER, annotations),
        pod_facts=tuple(annotations.items()),
    )
    policy = parse_gpu_policy(annotations.get("hami.io/gpu-scheduler-policy", "spread"))
    ctx = FitContext(
        Node("n", tuple(s.device for s in slots)),
        "default",
        policy,
        DEFAULT_WEIGHTS,
        VendorRegistry([ADAPTER]),
        None,
    )
    assert ADAPTER.fit is not None
    return ADAPTER.fit(slots, request, ctx, [])


@pytest.mark.parametrize("case", FIT_CASES, ids=lambda case: case.name)
def test_fit(case: FitCase) -> None:
    grants, reason = run_sgpu_fit(case)
    assert (grants is not None, reason) == (case.fit, case.reason)
    if case.fit:
        assert grants is not None
        assert len(grants) == case.held
        assert tuple(grant.uuid for grant in grants) == case.ids


def test_an_online_grant_takes_no_cores_and_tags_the_card() -> None:
    case = FitCase(
        "online",
        (sgpu(totalmem=1024),),
        ask(cores=60),
        True,
        1,
        ("dev-0",),
        "",
        {APP_CLASS: ONLINE},
    )
    grants, _ = run_sgpu_fit(case)
    assert grants == [Grant("dev-0", METAX_SGPU, 512, 0, 0, tag="online;")]


# -- TestPrioritizeExclusiveDevices, TestPrioritizeOnlineDevices


def zoned(*zones_by_id: tuple[str, int]) -> list[Slot]:
    return [card(zone=zone, uid=uid) for uid, zone in zones_by_id]


@pytest.mark.parametrize(
    ("zones", "wanted", "want"),
    [
        ((("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2)), 1, ["GPU-5"]),
        (
            (("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)),
            2,
            ["GPU-1", "GPU-2"],
        ),
        (
            (("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2), ("GPU-8", 2)),
            4,
            ["GPU-5", "GPU-6", "GPU-7", "GPU-8"],
        ),
        (
            (("GPU-1", 1), ("GPU-2", 1), ("GPU-5", 2), ("GPU-6", 2), ("GPU-7", 2)),
            4,
            ["GPU-1", "GPU-2", "GPU-5", "GPU-6"],
        ),
        ((("GPU-5", 0), ("GPU-6", 0), ("GPU-7", 0)), 2, ["GPU-5", "GPU-6"]),
        ((("GPU-3", 0), ("GPU-4", 0), ("GPU-7", 1), ("GPU-8", 1)), 2, ["GPU-7", "GPU-8"]),
        (
            (("GPU-3", 0), ("GPU-4", 0), ("GPU-6", 1), ("GPU-7", 1), ("GPU-8", 1)),
            4,
            ["GPU-6", "GPU-7", "GPU-8", "GPU-3"],
        ),
    ],
)
def test_prioritize_exclusive_devices(zones, wanted, want) -> None:
    assert [s.device.id for s in prefer_link_zone(zoned(*zones), wanted)] == want


def loaded(uid: str, *classes: str) -> Slot:
    return card(len(classes), tuple(share(c, BEST) for c in classes), uid=uid)


@pytest.mark.parametrize(
    ("cards", "want"),
    [
        (
            [
                loaded("GPU-1"),
                loaded("GPU-2", ONLINE),
                loaded("GPU-3", ONLINE, ONLINE),
                loaded("GPU-4", ONLINE, OFFLINE),
                loaded("GPU-5", ONLINE, ONLINE, OFFLINE),
                loaded("GPU-6", OFFLINE),
                loaded("GPU-7", OFFLINE, OFFLINE),
            ],
            "GPU-1",
        ),
        (
            [
                loaded("GPU-1", ONLINE),
                loaded("GPU-2", ONLINE, ONLINE),
                loaded("GPU-3", ONLINE, ONLINE, ONLINE, OFFLINE),
                loaded("GPU-4", OFFLINE, OFFLINE),
            ],
            "GPU-1",
        ),
        (
            [
                loaded("GPU-1", ONLINE, ONLINE, ONLINE),
                loaded("GPU-2", ONLINE, OFFLINE),
                loaded("GPU-3", ONLINE, ONLINE, OFFLINE),
                loaded("GPU-4", OFFLINE),
                loaded("GPU-5", OFFLINE, OFFLINE),
            ],
            "GPU-2",
        ),
        ([loaded("GPU-1", OFFLINE), loaded("GPU-2", OFFLINE, OFFLINE)], "GPU-1"),
    ],
    ids=["idle", "onlyOnline", "online&offline", "onlyOffline"],
)
def test_prioritize_online_devices(cards, want) -> None:
    assert [s.device.id for s in prefer_online(cards, 1)] == [want]


# -- TestNeedScore, TestScoreExclusiveDevices, TestScoreOnlineDevices, TestOverrideScore


def whole(uid: str, cores: int = 100) -> Grant:
    return Grant(uid, METAX_SGPU, 0, cores, 0)


@pytest.mark.parametrize(
    ("grants", "value", "want"),
    [
        ([whole("a")], "true", True),
        ([whole("a")], "false", False),
        ([whole("a", 99)], "true", False),
        ([whole("a", 99), whole("b")], "true", True),
    ],
)
def test_need_score(grants, value, want) -> None:
    assert topology_scored(grants, {TOPOLOGY_AWARE: value}, False) is want


def used_zones(*cards: tuple[str, int, int]) -> list[Slot]:
    return [card(used, zone=zone, uid=uid) for uid, used, zone in cards]


@pytest.mark.parametrize(
    ("taken", "cards", "want"),
    [
        (["GPU-4"], [("GPU-1", 1, 1), ("GPU-2", 1, 1), ("GPU-3", 1, 1), ("GPU-4", 0, 1)], 0),
        (["GPU-4"], [("GPU-1", 0, 1), ("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1)], -30),
        (["GPU-3", "GPU-4"], [(f"GPU-{i}", 0, 1) for i in range(1, 5)], 60),
        (
            ["GPU-4", "GPU-5"],
            [(f"GPU-{i}", 0 if i in (4, 5) else 1, 1 if i <= 4 else 2) for i in range(1, 9)],
            0,
        ),
        (
            ["GPU-1", "GPU-2", "GPU-3", "GPU-4"],
            [*((f"GPU-{i}", 0, 1) for i in range(1, 5)), ("GPU-5", 0, 2)],
            600,
        ),
        (
            ["GPU-3", "GPU-4", "GPU-5", "GPU-6"],
            [("GPU-2", 0, 1), ("GPU-3", 0, 1), ("GPU-4", 0, 1), ("GPU-5", 0, 2), ("GPU-6", 0, 2)],
            180,
        ),
        (
            [f"GPU-{i}" for i in range(1, 9)],
            [(f"GPU-{i}", 0, 1 if i <= 4 else 2) for i in range(1, 9)],
            1200,
        ),
    ],
)
def test_score_exclusive_devices(taken, cards, want) -> None:
    assert score_exclusive([whole(uid) for uid in taken], used_zones(*cards)) == want


@pytest.mark.parametrize(
    ("classes", "want"),
    [
        ((), 0),
        ((ONLINE, ONLINE), -40),
        ((OFFLINE, OFFLINE), -200),
        ((OFFLINE, OFFLINE, ONLINE, ONLINE), -44),
    ],
)
def test_score_online_devices(classes, want) -> None:
    assert score_online([whole("GPU-123", 0)], [loaded("GPU-123", *classes)]) == want


@pytest.mark.parametrize(("policy", "want"), [("binpack", 600000.0), ("spread", -600000.0)])
def test_override_score_weights_the_policy_neutral_score(policy, want) -> None:
    slots = used_zones(*((f"GPU-{i}", 0, 1) for i in range(1, 5)))
    request = DeviceRequest(METAX_SGPU, 2, cores=100, pod_facts=((TOPOLOGY_AWARE, "true"),))
    grants = [(whole("GPU-3"), whole("GPU-4"))]
    assert sgpu_score(slots, grants, [(request,)], policy, topology_default=False) == want
    assert ADAPTER.usage_score is not None
    assert ADAPTER.usage_score(slots, grants, [(request,)], policy) == want


def test_no_topology_or_online_hint_scores_zero() -> None:
    request = DeviceRequest(METAX_SGPU, 1, cores=50)
    grants = [(whole("GPU-1", 50),)]
    assert (
        sgpu_score(
            used_zones(("GPU-1", 0, 0)), grants, [(request,)], "binpack", topology_default=True
        )
        == 0
    )


# -- PatchAnnotations, lock, config, usage read-back


def test_pod_annotations() -> None:
    containers = [
        (Grant("GPU-1", METAX_SGPU, 1024, 50, 0),),
        (),
        (Grant("GPU-2", METAX_SGPU, 0, 0, 1),),
    ]
    result = BACKEND.pod_annotations(containers, PatchContext(now_ns=1_787_292_000_000_000_000))
    encoded = "GPU-1,Metax-SGPU,1024,50:;;GPU-2,Metax-SGPU,0,0:;"
    assert result == {
        "hami.io/metax-sgpu-devices-to-allocate": encoded,
        "hami.io/metax-sgpu-devices-allocated": encoded,
        "metax-tech.com/gpu-devices-allocated": (
            '[[{"uuid":"GPU-1","compute":50,"vRam":1024}],[],[{"uuid":"GPU-2"}]]'
        ),
        "metax-tech.com/predicate-time": "1787292000000000000",
    }
    assert json.loads(result["metax-tech.com/gpu-devices-allocated"])[0][0]["vRam"] == 1024
    assert BACKEND.pod_annotations([()]) == {}


def test_shared_lock_and_usage_tags_read_back() -> None:
    assert BACKEND.lock.key == "hami.io/mutex.lock"
    tag = BACKEND.usage_tag({APP_CLASS: OFFLINE, QOS_POLICY: FIXED}, whole("GPU-1", 30))
    assert tag == "offline;fixed-share"


def test_config_section_is_shared_with_metax_gpu() -> None:
    sections = read_sections(
        {"metax": {"resourceCountName": "metax-tech.com/gpu", "resourceVCountName": COUNT}}
    )
    assert sections is not None
    backends = build_backends(sections)
    assert backends.get("Metax-GPU") is not None
    sgpu_backend = backends.get(METAX_SGPU)
    assert sgpu_backend is not None and sgpu_backend.count_resource == COUNT
    default = build_backends(None).get(METAX_SGPU)
    assert default is not None and default.count_resource == ""
