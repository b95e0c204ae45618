"""Ascend's Fit and ScoreNode against HAMi's TestDevices_Fit, TestDevices_Fit_910C and the
910C pairing tests, row for row and chip by chip, then through the engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from ascend_fit_cases import (
    FIT_910C_SUPERPOD,
    FIT_ROWS,
    MUTEX,
    PAIRING_CASES,
    REGISTERED_NETWORKS,
    PairingCase,
    rows_for,
)
from ascend_hami_configs import ASCEND_910C_SUPERPOD, fit_configs
from hami_vendor_cases import FitCase, HamiDevice

from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.grants import Grant, Slot
from dra_driver.engine.model import Device, DeviceUsage, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import DEFAULT_WEIGHTS, DeviceRequest, PodRequest
from dra_driver.engine.vendor_backends import ascend
from dra_driver.engine.vendor_backends.ascend import AscendBackend
from dra_driver.engine.vendor_backends.ascend_chips import VnpuChip, VnpusConfig
from dra_driver.engine.vendors import FitContext, VendorRegistry
from dra_driver.objects.pod_workloads import vendor_filters

CHIPS = [VnpuChip.model_validate(config) for config in fit_configs()]
SECTION = VnpusConfig(configs=tuple(CHIPS))
BACKENDS = {chip.common_word: AscendBackend(chip, SECTION) for chip in CHIPS}


def device(d: HamiDevice, mode: str) -> Device:
    return Device(
        id=d.id,
        index=d.index,
        type=d.type,
        count=d.count,
        memory_mib=d.totalmem,
        cores=d.totalcore,
        numa=d.numa,
        healthy=d.health,
        mode=mode,
        custom_info=dict(d.custom_info),
    )


def run_fit(
    backend: AscendBackend,
    case: FitCase,
    node_annotations: Mapping[str, str] | None = None,
) -> tuple[list[Grant] | None, str]:
    """HAMi's `dev.Fit(devices, request, pod, nodeInfo)`, devices in the row's order."""
    hami_node = {"metadata": {"annotations": dict(node_annotations or {})}}
    mode = ascend.HAMI_CORE if backend.node_runs_hami_core(hami_node) else ascend.HARD_SPLIT
    slots = [
        Slot(device(d, mode), d.used, d.usedmem, d.usedcores) for d in case.devices
    ]  # fmt: skip
    request = DeviceRequest(
        vendor=case.request.type,
        count=case.request.nums,
        memory_mib=case.request.memreq,
        memory_percent=case.request.mempct,
        cores=case.request.coresreq,
        filters=vendor_filters(backend.adapter, case.annotations),
    )
    policy = parse_gpu_policy(case.annotations.get(MUTEX_KEY, "binpack"))
    ctx = FitContext(
        Node("node1", tuple(s.device for s in slots)),
        "default",
        policy,
        DEFAULT_WEIGHTS,
        VendorRegistry([backend.adapter]),
        None,
    )
    return backend.fit(slots, request, ctx, [])


MUTEX_KEY = next(iter(MUTEX))
CHIP_ROWS = [
    pytest.param(word, case, row.node_annotations, id=f"{word}:{case.name}")
    for word in BACKENDS
    for row, case in zip(FIT_ROWS, rows_for(word), strict=True)
]


@pytest.mark.parametrize(("word", "case", "node_annotations"), CHIP_ROWS)
def test_fit_rows(word: str, case: FitCase, node_annotations) -> None:
    picks, reason = run_fit(BACKENDS[word], case, node_annotations)
    assert (picks is not None) is case.fit
    assert reason == case.reason
    if case.fit:
        assert picks is not None and len(picks) == case.held
        assert tuple(grant.uuid for grant in picks)[: len(case.ids)] == case.ids


def test_core_limit_is_clamped_to_100_in_the_grant() -> None:
    case = next(c for c in rows_for("Ascend910A") if "can't exceed 100" in c.name)
    picks, _ = run_fit(BACKENDS["Ascend910A"], case)
    assert picks is not None and picks[0].cores == 100 and picks[0].memory_mib == 512


def test_memory_percentage_takes_its_share_of_the_device() -> None:
    case = next(c for c in rows_for("Ascend910A") if "memory percentage" in c.name)
    picks, _ = run_fit(BACKENDS["Ascend910A"], case)
    assert picks is not None and picks[0].memory_mib == 128


def test_network_grouping_applies_to_910_chips_only() -> None:
    """TestDevices_Fit's NetworkID row: 910 chips collect all three devices and keep
    NetworkID 1's pair; 310P takes the first two it meets (the same two)."""
    case = next(c for c in rows_for("Ascend910A") if "NetworkID" in c.name)
    for word, backend in BACKENDS.items():
        adapted = next(c for c in rows_for(word) if "NetworkID" in c.name)
        picks, _ = run_fit(backend, adapted)
        assert [g.uuid for g in picks or []] == ["dev-2", "dev-1"]
    assert {d.id: int(d.custom_info["NetworkID"]) for d in case.devices} == REGISTERED_NETWORKS


def test_network_grouping_prefers_the_largest_group_over_fit_order() -> None:
    """Fit meets dev-3 (NetworkID 7) first; the pair on NetworkID 2 still wins."""
    devices = tuple(
        HamiDevice(id, count=100, totalmem=128, totalcore=100, type="Ascend910B3",
                   custom_info={"NetworkID": float(network)})
        for id, network in (("dev-0", 2), ("dev-1", 2), ("dev-2", 5), ("dev-3", 7))
    )  # fmt: skip
    base = next(c for c in rows_for("Ascend910B3") if "NetworkID" in c.name)
    case = FitCase("largest group", devices, base.request, True, 2)
    picks, _ = run_fit(BACKENDS["Ascend910B3"], case)
    assert [g.uuid for g in picks or []] == ["dev-1", "dev-0"]


def test_network_grouping_refuses_rather_than_hand_out_too_few() -> None:
    """A NetworkID that is not a number joins no group: HAMi would answer fit with one
    device for a request of two; here the node is refused."""
    devices = tuple(
        HamiDevice(id, count=100, totalmem=128, totalcore=100, type="Ascend910B3",
                   custom_info={"NetworkID": network})
        for id, network in (("dev-0", 1.0), ("dev-1", "one"), ("dev-2", "two"))
    )  # fmt: skip
    base = next(c for c in rows_for("Ascend910B3") if "NetworkID" in c.name)
    picks, reason = run_fit(BACKENDS["Ascend910B3"], FitCase("x", devices, base.request, False, 0))
    assert picks is None and reason == "1/3 AllocatedCardsInsufficientRequest"


MODULE_BACKEND = AscendBackend(VnpuChip.model_validate(ASCEND_910C_SUPERPOD))


def test_fit_910c_takes_a_whole_module() -> None:
    picks, reason = run_fit(MODULE_BACKEND, FIT_910C_SUPERPOD)
    assert reason == ""
    assert tuple(g.uuid for g in picks or []) == FIT_910C_SUPERPOD.ids


def pairing_fit(case: PairingCase) -> tuple[list[Grant] | None, str]:
    request = FIT_910C_SUPERPOD.request
    fit_case = FitCase(
        case.name,
        case.devices,
        type(request)(case.nums, "Ascend910C", 0, 0, 0),
        case.fit,
        case.held,
    )
    return run_fit(MODULE_BACKEND, fit_case)


PAIRING_REASONS = {
    "TestAscend910C_FitPartialAllocationBug": "2/4 AllocatedCardsInsufficientRequest",
    "TestAscend910C_FitExactCountBypassBug": "0/2 AllocatedCardsInsufficientRequest",
    "TestAscend910C_FitWithoutNetworkID_ValidatesPairing (different modules)": (
        "0/2 AllocatedCardsInsufficientRequest"
    ),
    "TestComputeBestCombination910C_NoFullPairsReturnsEmpty": (
        "0/4 AllocatedCardsInsufficientRequest"
    ),
}
"""The exact reasons of the failing pairing tests (HAMi's tests check that the reason
names AllocatedCardsInsufficientRequest; the counts are what its code writes: the
NPUs in whole modules over the NPUs asked)."""


@pytest.mark.parametrize("case", PAIRING_CASES, ids=lambda c: c.name)
def test_910c_pairing(case: PairingCase) -> None:
    picks, reason = pairing_fit(case)
    assert (picks is not None) is case.fit
    assert case.reason_contains in reason
    if case.fit:
        assert picks is not None and len(picks) == case.held
        assert {g.index // 2 for g in picks} == {0}
    else:
        assert reason == PAIRING_REASONS[case.name]


def test_910c_odd_count_overshoots_to_whole_modules_and_is_refused() -> None:
    devices = tuple(
        HamiDevice(f"dev-{i}", index=i, count=1, totalmem=32000, type="Ascend910C")
        for i in range(4)
    )
    case = FitCase("odd", devices, type(FIT_910C_SUPERPOD.request)(3, "Ascend910C"), False, 0)
    picks, reason = run_fit(MODULE_BACKEND, case)
    assert picks is None and reason == "4/3 AllocatedCardsInsufficientRequest"


# -- ScoreNode


def score(word: str, networks: Sequence[float | None], containers: Sequence[Sequence[int]]):
    backend = BACKENDS.get(word) or MODULE_BACKEND
    devices = tuple(
        Device(f"d{i}", i, word, 1, 1, 100,
               custom_info={} if network is None else {"NetworkID": network})
        for i, network in enumerate(networks)
    )  # fmt: skip
    grants = [tuple(Grant(f"d{i}", word, 1, 0, i) for i in ctr) for ctr in containers]
    return backend.score(Node("n", devices), grants, [], "binpack")


@pytest.mark.parametrize(
    ("word", "networks", "containers", "expected"),
    [
        ("Ascend910B3", (0.0, 0.0, 1.0, 1.0), [[0, 1]], 10.0),
        ("Ascend910B3", (0.0, 0.0, 1.0, 1.0), [[0, 2]], 5.0),
        ("Ascend910B3", (0.0, 0.0, 1.0, 1.0), [[0, 1, 2]], 10 * 2 / 3),
        ("Ascend910B3", (0.0, 0.0, 1.0, 1.0), [[0, 1], [], [2, 3]], 20.0),
        ("Ascend910B3", (0.0, None, 1.0, 1.0), [[2, 3], [0, 1]], 0.0),
        ("Ascend310P", (0.0, 0.0), [[0, 1]], 0.0),
        ("Ascend910C", (3.0, 3.0), [[0, 1]], 10.0),
    ],
    ids=["one network", "split", "two of three", "per container", "a device without",
         "not a 910", "910C"],
)  # fmt: skip
def test_score_node_by_network_share(word, networks, containers, expected: float) -> None:
    assert score(word, networks, containers) == pytest.approx(expected)


# -- through the engine


def ascend_node(name: str, networks: Sequence[int], word: str = "Ascend910B3") -> Node:
    devices = tuple(
        Device(f"{name}-{i}", i, word, 4, 65536, 100, mode=ascend.HARD_SPLIT,
               custom_info={"NetworkID": float(network)})
        for i, network in enumerate(networks)
    )  # fmt: skip
    return Node(name, devices)


def two_npus(word: str = "Ascend910B3") -> PodRequest:
    request = BACKENDS[word].read_request(
        {"resources": {"limits": {f"huawei.com/{word}": "2"}}}, {}, "c", []
    )
    assert request is not None
    return PodRequest("ns", "p", containers=((request,),))


@pytest.mark.parametrize(
    ("node_policy", "chosen"), [("binpack", "b-joined"), ("spread", "a-split")]
)
def test_engine_adds_the_network_score_to_the_node_score(node_policy: str, chosen: str) -> None:
    """Both nodes are idle (equal node scores, so the name would decide); the pod's
    two NPUs share a NetworkID on b-joined (+10) but not on a-split (+5). HAMi adds
    Ascend's ScoreNode to the node score under either policy, so binpack takes the
    higher total and spread the lower."""
    vendors = VendorRegistry([b.adapter for b in BACKENDS.values()])
    nodes = [ascend_node("a-split", (0, 1)), ascend_node("b-joined", (4, 4))]
    engine = Engine(nodes, settings=EngineSettings(node_policy=node_policy), vendors=vendors)
    decision = engine.decide(two_npus())
    assert decision.placement is not None and decision.placement.node == chosen
    assert decision.placement.score == (10.0 if chosen == "b-joined" else 5.0)


def test_engine_keeps_chips_apart() -> None:
    """A 910B4 pod never lands on 910B3 NPUs, though both names share a prefix."""
    vendors = VendorRegistry([b.adapter for b in BACKENDS.values()])
    engine = Engine([ascend_node("b3", (0, 0))], vendors=vendors)
    decision = engine.decide(two_npus("Ascend910B4"))
    assert decision.placement is None


def test_engine_charges_usage_between_pods() -> None:
    vendors = VendorRegistry([b.adapter for b in BACKENDS.values()])
    node = ascend_node("n", (0, 0))
    used = {"n": {"n-0": DeviceUsage(1, 65536, 0), "n-1": DeviceUsage(0, 0, 0)}}
    engine = Engine([node], used, vendors=vendors)
    decision = engine.decide(two_npus())
    assert decision.placement is None
    assert "CardInsufficientMemory" in decision.failures["n"]
