"""A vendor's ScoreNode deciding between nodes through the engine (HAMi's OverrideScore).

Kunlun whole cards score the fragmentation of the pod's cards against the cards
already busy on the node, so the engine must hand the score the usage before the
pod; Metax GPUs score the node's MetaLink topology by the node policy (losses under
binpack, scores under spread). In each case the node the vendor score picks is
not the one the plain node score prefers, so the test fails if either input is
missing. Values: HAMi's kunlun `Test_ScoreNode` / `calcscore` and metax
`Test_ScoreNode` (`2000 - value`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.grants import Grant, Slot
from dra_driver.engine.model import Device, DeviceUsage, Node
from dra_driver.engine.policy import BINPACK, SPREAD
from dra_driver.engine.requests import DeviceRequest, PodRequest
from dra_driver.engine.vendor_backends import kunlun
from dra_driver.engine.vendor_backends.metax_gpu import LOSSES, METAX_GPU, SCORES, MetaxGpuBackend
from dra_driver.engine.vendors import NVIDIA, VendorRegistry

NOW = datetime(2026, 12, 1, tzinfo=UTC)
WHOLE_CARD = DeviceUsage(1, kunlun.CARD_MEMORY_MIB, 100)


def kunlun_node(name: str, cards: int = 8) -> Node:
    node = {"metadata": {"name": name}, "status": {"capacity": {kunlun.WHOLE_COUNT: str(cards)}}}
    devices = kunlun.KunlunBackend().node_devices(node, NOW, timedelta(0)).devices
    return Node(name, devices)


def busy(node: Node, *indexes: int) -> dict[str, DeviceUsage]:
    return {device.id: WHOLE_CARD for device in node.devices if device.index in indexes}


def one_kunlun_card(name: str) -> PodRequest:
    """What `whole_request` reads from `kunlunxin.com/xpu: 1`."""
    return PodRequest("ns", name, ((DeviceRequest(kunlun.WHOLE_TYPE, 1, 0, 100, 0),),))


@pytest.mark.parametrize(
    ("busy_indexes", "placed", "score"),
    [
        ((0, 1, 2, 3), (0, 1, 2, 3, 4, 5, 6, 7), 3000.0),  # Test_ScoreNode, Scenario 1
        ((), (0,), 0.0),  # Test_ScoreNode, Scenario 2
    ],
)
def test_whole_card_score_reads_the_busy_cards(busy_indexes, placed, score) -> None:
    node = kunlun_node("k")
    slots = [Slot(d, int(d.index in busy_indexes), 0, 0) for d in node.devices]
    grants = [tuple(Grant(f"k-{i}", kunlun.WHOLE_TYPE, 0, 100, i) for i in placed)]
    assert kunlun.whole_score(slots, grants, [], BINPACK) == score
    assert kunlun.whole_score(slots, grants, [], SPREAD) == score


def test_whole_card_score_is_zero_on_a_node_with_other_devices() -> None:
    """HAMi returns 0 as soon as a device before the pod is not a kunlun card."""
    cards = kunlun_node("k").devices
    other = Device("GPU-x", 8, "NVIDIA-A100", 10, 81920, 100)
    slots = [Slot(d, int(d.index == 0), 0, 0) for d in cards]
    next_to_busy = [(Grant("k-1", kunlun.WHOLE_TYPE, 0, 100, 1),)]
    assert kunlun.whole_score(slots, next_to_busy, [], BINPACK) == 2000.0
    assert kunlun.whole_score([*slots, Slot(other, 0, 0, 0)], next_to_busy, [], BINPACK) == 0.0


def test_kunlun_fragmentation_decides_between_two_nodes() -> None:
    """Binpack's node score prefers `full-wing` (4 of 8 cards busy); its one free
    card breaks into the idle wing (0), while on `one-busy` it goes next to the
    busy card (2000), so `one-busy` wins. Without the busy cards both would
    score 0 and `full-wing` would win."""
    full, one = kunlun_node("full-wing"), kunlun_node("one-busy")
    usage = {full.name: busy(full, 0, 1, 2, 3), one.name: busy(one, 0)}
    engine = Engine(
        [full, one],
        usage,
        settings=EngineSettings(node_policy=BINPACK),
        vendors=VendorRegistry((kunlun.WHOLE, NVIDIA)),
    )
    assert engine.node_state(full.name).score > engine.node_state(one.name).score
    placement = engine.decide(one_kunlun_card("p")).placement
    assert placement is not None
    assert placement.node == one.name
    assert [grant.index for grant in placement.containers[0]] == [1]
    assert placement.score == engine.node_state(one.name).score + 2000


def metax_node(name: str, losses: str, scores: str) -> Node:
    node = {
        "metadata": {"name": name, "annotations": {LOSSES: losses, SCORES: scores}},
        "status": {"capacity": {"metax-tech.com/gpu": "2"}},
    }
    return Node(name, MetaxGpuBackend().node_devices(node, NOW, timedelta(0)).devices)


@pytest.mark.parametrize(
    ("node_policy", "winner", "vendor_score"),
    [
        # binpack: 2000 - losses[1]; the idle node's 0 loss beats the busy node's 500
        (BINPACK, "m-idle", 2000),
        # spread: 2000 - scores[1], lowest wins; the busy node's 900 beats the idle's 100
        (SPREAD, "m-busy", 1100),
    ],
)
def test_metax_topology_decides_between_two_nodes_by_policy(
    node_policy, winner, vendor_score
) -> None:
    """The plain node score prefers the busy node under binpack and the idle one
    under spread; the topology annotation picks the other one each time."""
    busy_node = metax_node("m-busy", '{"1":500}', '{"1":900}')
    idle_node = metax_node("m-idle", '{"1":0}', '{"1":100}')
    first = busy_node.devices[0]
    engine = Engine(
        [busy_node, idle_node],
        {busy_node.name: {first.id: DeviceUsage(1, 0, 100)}},
        settings=EngineSettings(node_policy=node_policy),
        vendors=VendorRegistry((MetaxGpuBackend().adapter, NVIDIA)),
    )
    pod = PodRequest("ns", "p", ((DeviceRequest(METAX_GPU, 1, 0, 100, 100),),))
    placement = engine.decide(pod).placement
    assert placement is not None
    assert placement.node == winner
    assert placement.score == engine.node_state(winner).score + vendor_score
