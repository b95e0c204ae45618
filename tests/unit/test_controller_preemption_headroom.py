"""A give-back the headroom test calls hopeless is one the engine refuses.

`lacks_headroom` lets the reprieve loop make a victim without asking the engine.
That is exact only if `decide_pod` (every variant, HAMi's full fit rules) refuses
whenever it says so: random nodes (unhealthy cards, split counts, usage), random
variants (several containers, init containers, memory by MiB or by percentage,
cores) and a vendor with a Fit of its own, whose requests it must not count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.decide import NoFit, PodAllocation, decide_pod
from controller.inventory import build_inventory
from controller.preemption_headroom import headroom_needs, lacks_headroom
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.fit import fit_request
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.requests import DeviceRequest, PodRequest
from dra_driver.engine.vendors import MOCK, NVIDIA, VendorRegistry

DRIVER = "vgpu.hami.io"
NODE = "node-a"
GIB = 1024
OWN_FIT = VendorRegistry([NVIDIA, replace(MOCK, fit=fit_request)])
"""MOCK with a Fit of its own (the standard one, so the engine can place it)."""

Card = tuple[str, int, int, bool]
"""(type, GiB, split count, healthy)."""


def node_slice(cards: Sequence[Card]) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "attributes": {
                "uuid": {"string": f"{NODE}-{i}"},
                "index": {"int": i},
                "type": {"string": kind},
            },
            "capacity": {
                "memory": {"value": f"{gib}Gi"},
                "cores": {"value": "100"},
                "shares": {"value": str(shares)},
            },
            "taints": [] if healthy else [{"key": "broken", "effect": "NoSchedule"}],
        }
        for i, (kind, gib, shares, healthy) in enumerate(cards)
    ]
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"uid": "slice"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": pool, "devices": devices},
    }


requests = st.builds(
    DeviceRequest,
    vendor=st.sampled_from(["NVIDIA", "NVIDIA", "MOCK"]),
    count=st.integers(0, 3),
    memory_mib=st.sampled_from([0, 2 * GIB, 6 * GIB, 12 * GIB]),
    memory_percent=st.sampled_from([101, 25, 50, 100]),
    cores=st.sampled_from([0, 30, 70, 100]),
)
containers = st.lists(requests, min_size=1, max_size=2, unique_by=lambda r: r.vendor).map(tuple)


@st.composite
def variants(draw: st.DrawFn) -> PodVariant:
    app = tuple(draw(st.lists(containers, min_size=1, max_size=2)))
    init = tuple(draw(st.lists(containers, max_size=1)))
    request = PodRequest("ns", "hi", app, init_containers=init)
    claims = tuple(
        ClaimVariant({"spec": {}}, (c,), (f"gpu{i}",), ("c",), None, None)
        for i, c in enumerate(app)
    )
    return PodVariant(request, claims)


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Card], dict[str, DeviceUsage], list[PodVariant]]:
    cards: list[Card] = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["NVIDIA-A10", "MOCK-M1"]),
                st.sampled_from([8, 16]),
                st.integers(1, 3),
                st.booleans(),
            ),
            min_size=1,
            max_size=4,
        )
    )
    usage = {
        f"{NODE}-{i}": DeviceUsage(
            draw(st.integers(0, shares)),
            draw(st.integers(0, gib)) * GIB,
            draw(st.sampled_from([0, 30, 100])),
        )
        for i, (_kind, gib, shares, _healthy) in enumerate(cards)
    }
    return cards, usage, draw(st.lists(variants(), min_size=1, max_size=2))


def judged(
    cards: Sequence[Card], usage: dict[str, DeviceUsage], pod: Sequence[PodVariant]
) -> tuple[bool, PodAllocation | NoFit]:
    """(what `lacks_headroom` says, what `decide_pod` decides) on the node."""
    inventory = build_inventory([node_slice(cards)], DRIVER)
    engine = Engine(inventory.nodes.values(), {NODE: usage}, vendors=OWN_FIT)
    needs = [headroom_needs(variant, OWN_FIT) for variant in pod]
    hopeless = lacks_headroom(inventory.nodes[NODE].devices, usage, needs)
    return hopeless, decide_pod(engine, pod, inventory, (NODE,), {})


@settings(max_examples=400, deadline=None)
@given(cases())
def test_the_engine_refuses_what_lacks_headroom(case) -> None:
    cards, usage, pod = case
    hopeless, outcome = judged(cards, usage, pod)
    if hopeless:
        assert isinstance(outcome, NoFit), outcome


def one_variant(*request: DeviceRequest) -> list[PodVariant]:
    claim = ClaimVariant({"spec": {}}, (request,), ("gpu",), ("c",), None, None)
    return [PodVariant(PodRequest("ns", "hi", (request,)), (claim,))]


def test_a_card_short_of_memory_or_slots_or_health_is_hopeless() -> None:
    cards = [("NVIDIA-A10", 16, 2, True), ("NVIDIA-A10", 16, 1, True), ("NVIDIA-A10", 16, 2, False)]
    usage = {f"{NODE}-0": DeviceUsage(1, 12 * GIB, 0), f"{NODE}-1": DeviceUsage(1, 0, 0)}
    hopeless, outcome = judged(cards, usage, one_variant(DeviceRequest("NVIDIA", 1, 8 * GIB)))
    assert hopeless
    assert isinstance(outcome, NoFit)


def test_one_card_with_room_is_not_hopeless_and_takes_the_pod() -> None:
    cards = [("NVIDIA-A10", 16, 2, True), ("NVIDIA-A10", 16, 2, True)]
    usage = {f"{NODE}-0": DeviceUsage(1, 12 * GIB, 0), f"{NODE}-1": DeviceUsage(1, 8 * GIB, 0)}
    hopeless, outcome = judged(cards, usage, one_variant(DeviceRequest("NVIDIA", 1, 8 * GIB)))
    assert not hopeless
    assert isinstance(outcome, PodAllocation)
    assert [grant.uuid for grant in outcome.placement.containers[0]] == [f"{NODE}-1"]


def test_requests_of_a_vendor_with_its_own_fit_are_not_counted() -> None:
    cards = [("MOCK-M1", 8, 1, True)]
    usage = {f"{NODE}-0": DeviceUsage(1, 8 * GIB, 100)}
    hopeless, outcome = judged(cards, usage, one_variant(DeviceRequest("MOCK", 1, 4 * GIB)))
    assert not hopeless
    assert isinstance(outcome, NoFit)
