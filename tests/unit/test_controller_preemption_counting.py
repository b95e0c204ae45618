"""Counting a give-back's fit device by device gives the plan of the full check.

The reference is SelectVictimsOnNode written plainly: every fit is `decide_pod` on
an engine over the node alone, with the usage and quota built afresh from the
shares still freed. On random nodes (card types of two vendors, sizes, split
counts, unhealthy and cordoned cards, devices that are not multi-allocatable),
shares, priorities and requests (memory by MiB or percentage, cores 0 to 100,
several devices, type and uuid filters, every GPU policy), `plan_preemption`
must choose the same victims and free the same shares, or refuse with the same
reason. Each case is built to be counted, or to fall outside what counting may
judge (several variants, an init container, two containers, a distinctAttribute
constraint, a requestPolicy or an unpublished capacity, a quota, NUMA binding,
a card not in HAMi-core mode), and the test checks that counting is used exactly
in the first kind. Some shares carry a tag, which hands the trial back to the
engine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controller.decide import NoFit, decide_pod
from controller.inventory import Inventory, build_inventory
from controller.preemption import (
    NO_VICTIMS,
    Holder,
    Holdings,
    NodeVictims,
    Preemptor,
    plan_preemption,
)
from controller.preemption_counting import counted_request
from controller.preemption_shares import Share, quota_without, usage_without
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.requests import DeviceFilters, DeviceRequest, PodRequest
from dra_driver.errors import InvalidParameterError

DRIVER = "vgpu.hami.io"
NODE = "node-a"
GIB = 1024
POLICIES = (None, "binpack", "spread", "topology-aware", "mutex")
COUNTED = "counted"
OUTSIDE = (
    "two variants",
    "init container",
    "two containers",
    "distinct",
    "request policy",
    "unpublished capacity",
    "quota",
    "numa",
    "other mode",
    "unplaced request",
)
MAX_8GI = {"validRange": {"min": "0", "max": "8Gi"}}
"""A memory requestPolicy that refuses a share of more than 8 GiB."""

Card = tuple[str, int, int, bool, bool, bool]
"""(type, GiB, split count, healthy, multi-allocatable, memory capped by MAX_8GI)."""


def node_slice(cards: Sequence[Card]) -> dict[str, Any]:
    devices = []
    for i, (kind, gib, shares, healthy, multi, capped) in enumerate(cards):
        memory: dict[str, Any] = {"value": f"{gib}Gi"}
        if capped:
            memory["requestPolicy"] = MAX_8GI
        devices.append(
            {
                "name": f"gpu-{i}",
                "allowMultipleAllocations": multi,
                "attributes": {
                    "uuid": {"string": f"{NODE}-{i}"},
                    "index": {"int": i},
                    "type": {"string": kind},
                },
                "capacity": {
                    "memory": memory,
                    "cores": {"value": "100"},
                    "shares": {"value": str(shares)},
                },
                "taints": [] if healthy else [{"key": "broken", "effect": "NoSchedule"}],
            }
        )
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"uid": "slice"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": pool, "devices": devices},
    }


def claim(name: str, capacity: str | None, distinct: bool, unplaced: bool) -> dict[str, Any]:
    """A claim whose request `name` is the engine's; `unplaced` adds one it does not
    place (as a MIG partition request is decided beside the engine)."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu"}
    if capacity is not None:
        exactly["capacity"] = {"requests": {capacity: "1Gi"}}
    requests = [{"name": name, "exactly": exactly}]
    if unplaced:
        requests.append({"name": "partition", "exactly": {"deviceClassName": "mig"}})
    devices: dict[str, Any] = {"requests": requests}
    if distinct:
        devices["constraints"] = [{"distinctAttribute": "type"}]
    return {"spec": {"devices": devices}}


@st.composite
def device_requests(draw: st.DrawFn, uuids: Sequence[str], numa: bool) -> DeviceRequest:
    def some_uuids() -> tuple[str, ...]:
        return tuple(draw(st.lists(st.sampled_from(uuids), max_size=2, unique=True)))

    rarely = st.integers(0, 3).map(lambda n: n == 0)
    filters = DeviceFilters(
        use_types=draw(st.sampled_from([(), (), (), ("A10",), ("T4",)])),
        no_use_types=draw(st.sampled_from([(), (), (), ("T4",)])),
        use_uuids=some_uuids() if draw(rarely) else (),
        no_use_uuids=some_uuids() if draw(rarely) else (),
        numa_bind=numa,
    )
    return DeviceRequest(
        "NVIDIA",
        draw(st.sampled_from([1, 1, 2, 3])),
        draw(st.sampled_from([0, 2 * GIB, 4 * GIB, 6 * GIB, 8 * GIB, 12 * GIB])),
        draw(st.sampled_from([101, 101, 25, 50, 100])),
        draw(st.sampled_from([0, 0, 30, 70, 100])),
        filters=filters,
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, list[Card], frozenset[str], list[Share], Any, Any]:
    kind = draw(st.sampled_from([COUNTED] * len(OUTSIDE) + list(OUTSIDE)))
    cards: list[Card] = draw(
        st.lists(
            st.tuples(
                st.sampled_from(["NVIDIA-A10", "NVIDIA-T4", "MOCK-M1"]),
                st.sampled_from([8, 16]),
                st.integers(1, 3),
                st.integers(0, 4).map(bool),
                st.integers(0, 4).map(bool),
                st.just(False),
            ),
            min_size=1,
            max_size=6,
        )
    )
    # A requestPolicy on a device that is not multi-allocatable is never read.
    cards = [(*card[:5], not card[4] and draw(st.booleans())) for card in cards]
    if kind in ("request policy", "unpublished capacity"):
        cards[0] = (*cards[0][:4], True, kind == "request policy")
    uuids = [f"{NODE}-{i}" for i in range(len(cards))]
    cordoned = frozenset(draw(st.lists(st.sampled_from(uuids), max_size=1)))
    pods = {
        f"p{i}": Holder(
            f"p{i}", f"ns{i % 2}/p{i}", draw(st.integers(0, 2)), float(draw(st.integers(0, 5)))
        )
        for i in range(draw(st.integers(1, 8)))
    }
    shares: list[Share] = []
    for index in range(draw(st.integers(2, 12))):
        on = draw(st.lists(st.sampled_from(uuids), min_size=1, max_size=2, unique=True))
        usage = {
            uuid: DeviceUsage(
                1,
                draw(st.integers(1, 6)) * GIB,
                draw(st.sampled_from([0, 0, 30, 70, 100])),
                draw(st.sampled_from([()] * 7 + [("tagged",)])),
            )
            for uuid in on
        }
        holders = frozenset(draw(st.lists(st.sampled_from(sorted(pods)), min_size=1, max_size=2)))
        namespace = f"ns{index % 2}"
        quota_use = tuple((namespace, "NVIDIA", a.memory_mib, a.cores) for a in usage.values())
        shares.append(Share(f"{namespace}/c{index}", NODE, usage, holders, quota_use))
    request = draw(device_requests(uuids, kind == "numa"))
    containers: tuple[tuple[DeviceRequest, ...], ...] = ((request,),)
    init: tuple[tuple[DeviceRequest, ...], ...] = ()
    if kind == "two containers":
        containers = (*containers, (draw(device_requests(uuids, False)),))
    if kind == "init container":
        init = ((draw(device_requests(uuids, False)),),)
    elif draw(st.booleans()):
        init = ((replace(request, count=0),),)
    capacity = {"unpublished capacity": "bandwidth"}.get(
        kind, draw(st.sampled_from([None, "memory"]))
    )
    claims = tuple(
        ClaimVariant(
            claim(f"gpu{i}", capacity, kind == "distinct", kind == "unplaced request"),
            (c,),
            (f"gpu{i}",),
            ("c",),
            None,
            None,
        )
        for i, c in enumerate(containers)
    )
    policy = draw(st.sampled_from(POLICIES))
    variants = [PodVariant(PodRequest("ns0", "hi", containers, init, gpu_policy=policy), claims)]
    if kind == "two variants":
        other = (draw(device_requests(uuids, False)),)
        variants.append(PodVariant(PodRequest("ns0", "hi", (other,), gpu_policy=policy), claims))
    preemptor = Preemptor(draw(st.sampled_from([1, 2, 3, 3, 3])), variants)
    # A quota on another namespace leaves the pod's devices independent of each other.
    limited = ("ns0",) if kind == "quota" else draw(st.sampled_from([(), ("ns1",)]))
    mode = "mps" if kind == "other mode" else None
    return kind, cards, cordoned, shares, pods, (preemptor, limited, mode)


def reference(
    preemptor: Preemptor,
    engine: Engine,
    inventory: Inventory,
    shares: Sequence[Share],
    pods: dict[str, Holder],
) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
    """(victim uids, freed share keys) or the node's refusal, every fit judged in full."""
    state = engine.node_state(NODE)
    base = {slot.device.id: DeviceUsage(slot.used, slot.memory, slot.cores) for slot in state.slots}
    alone = Engine([state.node], settings=engine.settings, quota=engine.quota)

    def refusal(freed: set[int]) -> str | None:
        chosen = [shares[i] for i in freed]
        alone.set_usage(NODE, usage_without(base, chosen))
        alone.quota = quota_without(engine.quota, chosen)
        outcome = decide_pod(alone, preemptor.variants, inventory, (NODE,), {})
        return outcome.reasons.get(NODE, NO_VICTIMS) if isinstance(outcome, NoFit) else None

    holders = dict.fromkeys(uid for share in shares for uid in share.holders)
    lower = sorted(
        (pods[uid] for uid in holders if uid in pods and pods[uid].priority < preemptor.priority),
        key=lambda p: (-p.priority, p.started),
    )
    if not lower:
        return NO_VICTIMS
    removed = {p.uid for p in lower}
    freed = {i for i, share in enumerate(shares) if share.holders <= removed}
    first = refusal(freed)
    if first is not None:
        return first
    victims: list[str] = []
    for candidate in lower:
        still = {i for i in freed if candidate.uid not in shares[i].holders}
        if still != freed and refusal(still) is not None:
            victims.append(candidate.uid)
            continue
        freed = still
    if not victims:
        return NO_VICTIMS
    return tuple(victims), tuple(shares[i].key for i in sorted(freed))


def engine_for(
    cards: Sequence[Card],
    cordoned: frozenset[str],
    shares: Sequence[Share],
    limited: Sequence[str],
    mode: str | None = None,
) -> tuple[Engine, Inventory]:
    """The node (its first card in `mode`, when given) with the shares' usage, and a
    quota on each `limited` namespace."""
    inventory = build_inventory([node_slice(cards)], DRIVER)
    node = replace(inventory.nodes[NODE], cordoned=cordoned)
    if mode is not None:
        node = replace(node, devices=(replace(node.devices[0], mode=mode), *node.devices[1:]))
    usage: dict[str, DeviceUsage] = {}
    for share in shares:
        for uuid, amount in share.usage.items():
            usage[uuid] = usage.get(uuid, DeviceUsage()).plus(amount)
    used = {
        ns: sum(u[2] for s in shares for u in s.quota_use if u[0] == ns) for ns in ("ns0", "ns1")
    }
    quota = QuotaLedger(
        {(ns, "NVIDIA"): NamespaceQuota(used[ns] + 8 * GIB, None, used[ns], 0) for ns in limited}
    )
    return Engine([node], {NODE: usage}, quota=quota if limited else None), inventory


@settings(max_examples=600, deadline=None)
@given(cases())
def test_counting_chooses_what_the_full_check_chooses(case) -> None:
    kind, cards, cordoned, shares, pods, (preemptor, limited, mode) = case
    engine, inventory = engine_for(cards, cordoned, shares, limited, mode)
    counted = counted_request(
        preemptor.variants, engine.vendors, engine.settings.gpu_policy, engine.quota
    )
    counts = counted is not None and counted.on_node(engine.node_state(NODE), inventory) is not None
    assert counts == (kind == COUNTED), kind
    plan = plan_preemption(preemptor, engine, inventory, [NODE], Holdings(pods, shares))
    expected = reference(preemptor, engine, inventory, shares, pods)
    if isinstance(expected, str):
        assert not isinstance(plan, NodeVictims), plan
        assert plan.message == f"0/1 nodes are available: 1 {expected}."
    else:
        assert isinstance(plan, NodeVictims), (plan, expected)
        assert (tuple(v.uid for v in plan.victims), plan.freed) == expected


def one_gpu_case(request: DeviceRequest, capped: bool) -> tuple[Any, ...]:
    """Two 16 GiB cards, each half full of one low-priority pod's share."""
    cards: list[Card] = [("NVIDIA-A10", 16, 4, True, True, capped)] * 2
    pods = {p: Holder(p, f"ns0/{p}", 0, float(i)) for i, p in enumerate(("a", "b"))}
    shares = [
        Share(f"ns0/{p}", NODE, {f"{NODE}-{i}": DeviceUsage(1, 8 * GIB, 0)}, frozenset({p}))
        for i, p in enumerate(pods)
    ]
    claims = (
        ClaimVariant(
            claim("gpu0", None, False, False), ((request,),), ("gpu0",), ("c",), None, None
        ),
    )
    variant = PodVariant(PodRequest("ns0", "hi", ((request,),)), claims)
    return cards, pods, shares, Preemptor(1, [variant])


def test_a_counted_pod_keeps_the_holder_it_fits_beside() -> None:
    cards, pods, shares, preemptor = one_gpu_case(DeviceRequest("NVIDIA", 1, 12 * GIB), False)
    engine, inventory = engine_for(cards, frozenset(), shares, ())
    plan = plan_preemption(preemptor, engine, inventory, [NODE], Holdings(pods, shares))
    assert isinstance(plan, NodeVictims)
    assert [v.uid for v in plan.victims] == ["b"]


def test_a_request_policy_that_refuses_the_placed_card_is_left_to_the_engine() -> None:
    """12 GiB on a card whose policy allows 8: a count would keep pod a; the engine's
    placement is refused, so both pods go and the refusal is what the plan says."""
    cards, pods, shares, preemptor = one_gpu_case(DeviceRequest("NVIDIA", 1, 12 * GIB), True)
    engine, inventory = engine_for(cards, frozenset(), shares, ())
    counted = counted_request(preemptor.variants, engine.vendors, "spread", None)
    assert counted is not None
    assert counted.on_node(engine.node_state(NODE), inventory) is None
    plan = plan_preemption(preemptor, engine, inventory, [NODE], Holdings(pods, shares))
    assert not isinstance(plan, NodeVictims)
    assert "CapacityRequestPolicyNotFit" in plan.message


def test_an_unknown_gpu_policy_is_left_to_the_engine() -> None:
    """Counting never judges a policy the engine refuses: with no lower-priority pod the
    plan is what it was, and a trial that asks the engine gets its error."""
    cards, pods, shares, preemptor = one_gpu_case(DeviceRequest("NVIDIA", 1, 12 * GIB), False)
    (variant,) = preemptor.variants
    bogus = PodVariant(replace(variant.request, gpu_policy="bogus"), variant.claims)
    engine, inventory = engine_for(cards, frozenset(), shares, ())
    assert counted_request([bogus], engine.vendors, "spread", None) is None
    equal = Preemptor(0, [bogus])
    plan = plan_preemption(equal, engine, inventory, [NODE], Holdings(pods, shares))
    assert not isinstance(plan, NodeVictims)
    assert plan.message == f"0/1 nodes are available: 1 {NO_VICTIMS}."
    with pytest.raises(InvalidParameterError):
        plan_preemption(Preemptor(1, [bogus]), engine, inventory, [NODE], Holdings(pods, shares))
