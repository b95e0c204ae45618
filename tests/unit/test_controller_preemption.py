"""Preemption's decision against kube-scheduler's rules, on hand-checked clusters.

Each GPU is 24 GiB unless said otherwise; a share is one claim's memory on one
GPU. The expected victims are worked out in each test's docstring.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from controller.inventory import build_inventory
from controller.preemption import (
    NO_VICTIMS,
    NOT_ELIGIBLE_NEVER,
    PREEMPT_NEVER,
    DisruptionBudget,
    Holder,
    Holdings,
    NodeVictims,
    NoPreemption,
    Preemptor,
    candidates_wanted,
    pick_node,
    plan_preemption,
)
from controller.preemption_shares import Share, claim_shares
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.requests import DeviceFilters, DeviceRequest, PodRequest
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.objects.node_predicates import NodeRoom

DRIVER = "vgpu.hami.io"
GIB = 1024
A10 = "NVIDIA-A10"
T4 = "NVIDIA-T4"


def gpu(index: int, memory_gib: int = 24, kind: str = A10, numa: int = 0) -> dict[str, Any]:
    return {"index": index, "memory": memory_gib, "type": kind, "numa": numa}


def device_slice(node: str, gpus: Sequence[dict[str, Any]]) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{g['index']}",
            "allowMultipleAllocations": True,
            "attributes": {
                "uuid": {"string": f"{node}-{g['index']}"},
                "index": {"int": g["index"]},
                "type": {"string": g["type"]},
                "numa": {"int": g["numa"]},
            },
            "capacity": {
                "memory": {"value": f"{g['memory']}Gi"},
                "cores": {"value": "100"},
                "shares": {"value": "10"},
            },
        }
        for g in gpus
    ]
    return {
        "metadata": {"uid": f"slice-{node}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


class World:
    """Nodes with GPUs, and the engine charged with every share."""

    def __init__(
        self,
        nodes: dict[str, Sequence[dict[str, Any]]],
        shares: Sequence[Share],
        quota: QuotaLedger | None = None,
    ) -> None:
        self.inventory = build_inventory([device_slice(n, g) for n, g in nodes.items()], DRIVER)
        usage: dict[str, dict[str, DeviceUsage]] = {}
        for share in shares:
            on_node = usage.setdefault(share.node, {})
            for uuid, amount in share.usage.items():
                on_node[uuid] = on_node.get(uuid, DeviceUsage()).plus(amount)
        self.engine = Engine(self.inventory.nodes.values(), usage, quota=quota)
        self.nodes = list(nodes)
        self.shares = list(shares)

    def plan(
        self,
        preemptor: Preemptor,
        pods: Sequence[Holder],
        budgets: Sequence[DisruptionBudget] = (),
        offset: int = 0,
    ) -> NodeVictims | NoPreemption:
        holdings = Holdings({p.uid: p for p in pods}, self.shares, budgets)
        return plan_preemption(preemptor, self.engine, self.inventory, self.nodes, holdings, offset)


def share(key: str, node: str, memory: dict[int, int], *holders: str, ns: str = "ns") -> Share:
    """`memory`: GPU index -> GiB held there."""
    usage = {f"{node}-{i}": DeviceUsage(1, gib * GIB, 0) for i, gib in memory.items()}
    quota_use = tuple((ns, "NVIDIA", gib * GIB, 0) for gib in memory.values())
    return Share(key, node, usage, frozenset(holders), quota_use)


def pod(uid: str, priority: int = 0, started: float = 0.0) -> Holder:
    return Holder(uid, f"ns/{uid}", priority, started)


def wants(
    *memory_gib: int,
    priority: int = 1000,
    count: int = 1,
    filters: DeviceFilters | None = None,
    namespace: str = "ns",
) -> Preemptor:
    """One claim per entry, each `count` GPUs with that much memory."""
    containers = tuple(
        (DeviceRequest("NVIDIA", count, gib * GIB, filters=filters or DeviceFilters()),)
        for gib in memory_gib
    )
    claims = tuple(
        ClaimVariant({"spec": {}}, (c,), (f"gpu{i}",), ("c",), None, None)
        for i, c in enumerate(containers)
    )
    return Preemptor(priority, [PodVariant(PodRequest(namespace, "hi", containers), claims)])


def victims(plan: NodeVictims | NoPreemption) -> tuple[str, list[str]]:
    assert isinstance(plan, NodeVictims), plan
    return plan.node, [v.uid for v in plan.victims]


def test_only_as_many_victims_as_needed_the_most_important_reprieved_first() -> None:
    """24 GiB GPU, a b c hold 8 GiB each; 16 GiB wanted. All gone: 24 free. a back
    (earliest): 16 free, kept. b back: 8, victim. c back: 8, victim."""
    world = World(
        {"n1": [gpu(0)]},
        [
            share("a", "n1", {0: 8}, "a"),
            share("b", "n1", {0: 8}, "b"),
            share("c", "n1", {0: 8}, "c"),
        ],
    )
    plan = world.plan(wants(16), [pod("a", started=1), pod("b", started=2), pod("c", started=3)])
    assert victims(plan) == ("n1", ["b", "c"])
    assert isinstance(plan, NodeVictims) and plan.freed == ("b", "c")


def test_a_higher_priority_holder_reprieved_before_an_older_lower_one() -> None:
    world = World(
        {"n1": [gpu(0)]}, [share("a", "n1", {0: 12}, "a"), share("b", "n1", {0: 12}, "b")]
    )
    plan = world.plan(wants(12), [pod("a", 1, started=1), pod("b", 5, started=2)])
    assert victims(plan) == ("n1", ["a"])


def test_equal_priority_is_never_a_victim() -> None:
    """Only `low` (8 GiB) may go; 16 GiB free then is not 24: no candidate."""
    world = World(
        {"n1": [gpu(0)]}, [share("eq", "n1", {0: 16}, "eq"), share("low", "n1", {0: 8}, "low")]
    )
    plan = world.plan(wants(24, priority=100), [pod("eq", 100), pod("low", 0)])
    assert isinstance(plan, NoPreemption)
    assert "CardInsufficientMemory" in plan.message
    only_equal = World({"n1": [gpu(0)]}, [share("eq", "n1", {0: 24}, "eq")])
    plan = only_equal.plan(wants(8, priority=100), [pod("eq", 100)])
    assert plan == NoPreemption(f"0/1 nodes are available: 1 {NO_VICTIMS}.")


def test_preemption_that_cannot_help_does_nothing_and_never_preempts_never() -> None:
    world = World({"n1": [gpu(0)], "n2": [gpu(0)]}, [share("a", "n1", {0: 24}, "a")])
    plan = world.plan(wants(32), [pod("a")])
    assert plan == NoPreemption(
        f"0/2 nodes are available: 1 1/1 CardInsufficientMemory, 1 {NO_VICTIMS}."
    )
    never = wants(16)
    never = Preemptor(never.priority, never.variants, PREEMPT_NEVER)
    assert world.plan(never, [pod("a")]) == NoPreemption(NOT_ELIGIBLE_NEVER)


def test_a_budget_steers_the_node_choice() -> None:
    """Same victims on both nodes; n1's would violate its budget: n2, though n1 is first."""
    world = World(
        {"n1": [gpu(0)], "n2": [gpu(0)]},
        [share("a", "n1", {0: 24}, "a"), share("b", "n2", {0: 24}, "b")],
    )
    budget = DisruptionBudget(0, frozenset({"a"}))
    plan = world.plan(wants(16), [pod("a"), pod("b")], [budget])
    assert victims(plan) == ("n2", ["b"]) and isinstance(plan, NodeVictims)
    assert plan.pdb_violations == 0
    alone = World({"n1": [gpu(0)]}, [share("a", "n1", {0: 24}, "a")])
    plan = alone.plan(wants(16), [pod("a")], [budget])
    assert isinstance(plan, NodeVictims) and plan.pdb_violations == 1


def test_a_budget_protected_pod_is_reprieved_first_on_its_node() -> None:
    """a (older) and b hold 12 GiB each; 12 wanted. Without a budget a is kept, b goes;
    with b's budget exhausted, b is given back first and a goes."""
    world = World(
        {"n1": [gpu(0)]}, [share("a", "n1", {0: 12}, "a"), share("b", "n1", {0: 12}, "b")]
    )
    holders = [pod("a", started=1), pod("b", started=2)]
    assert victims(world.plan(wants(12), holders)) == ("n1", ["b"])
    plan = world.plan(wants(12), holders, [DisruptionBudget(0, frozenset({"b"}))])
    assert victims(plan) == ("n1", ["a"]) and isinstance(plan, NodeVictims)
    assert plan.pdb_violations == 0


def test_a_budget_allows_its_disruptions_in_importance_order() -> None:
    """One disruption allowed over a and b: a (more important) takes it, b violates, so b
    is given back first."""
    world = World(
        {"n1": [gpu(0)]}, [share("a", "n1", {0: 12}, "a"), share("b", "n1", {0: 12}, "b")]
    )
    budget = DisruptionBudget(1, frozenset({"a", "b"}))
    plan = world.plan(wants(12), [pod("a", started=1), pod("b", started=2)], [budget])
    assert victims(plan) == ("n1", ["a"])


def shared_claim(name: str, node: str, gib: int, *holders: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "driver": DRIVER,
                            "pool": node,
                            "device": "gpu-0",
                            "request": "gpu",
                            "shareID": f"share-{name}",
                            "consumedCapacity": {"memory": f"{gib}Gi", "shares": "1"},
                        }
                    ]
                }
            },
            "reservedFor": [{"resource": "pods", "name": h, "uid": h} for h in holders],
        },
    }


def test_a_shared_claim_frees_only_when_every_reserving_pod_goes() -> None:
    """x (16 GiB) is reserved by a and b, y (8 GiB) by c; 16 wanted. Giving a back keeps
    x held: 8 free, a is a victim; so is b; c back leaves x's 16 free: kept."""
    claims = [shared_claim("x", "n1", 16, "a", "b"), shared_claim("y", "n1", 8, "c")]
    inventory = build_inventory([device_slice("n1", [gpu(0)])], DRIVER)
    shares = claim_shares(claims, inventory, VendorRegistry())
    assert [(s.key, s.holders) for s in shares] == [
        ("ns/x", frozenset({"a", "b"})),
        ("ns/y", frozenset({"c"})),
    ]
    world = World({"n1": [gpu(0)]}, shares)
    holders = [pod("a", started=1), pod("b", started=2), pod("c", started=3)]
    plan = world.plan(wants(16), holders)
    assert victims(plan) == ("n1", ["a", "b"]) and isinstance(plan, NodeVictims)
    assert plan.freed == ("ns/x",)


def test_a_claim_shared_with_a_pod_that_stays_frees_nothing() -> None:
    """x is also reserved by a pod of the preemptor's priority: nothing frees it."""
    world = World({"n1": [gpu(0)]}, [share("x", "n1", {0: 24}, "a", "peer")])
    plan = world.plan(wants(16), [pod("a", 0), pod("peer", 1000)])
    assert isinstance(plan, NoPreemption) and "CardInsufficientMemory" in plan.message


def test_a_pod_with_several_claims_frees_them_all_and_the_preemptor_needs_all_of_its_own() -> None:
    """a holds 16 GiB on gpu0 and on gpu1 (two claims), b 8 on gpu0; two claims of 16
    wanted. a back: 8 and 8 free, victim. b back: 16 on gpu0, 24 on gpu1: kept."""
    world = World(
        {"n1": [gpu(0), gpu(1)]},
        [
            share("a0", "n1", {0: 16}, "a"),
            share("a1", "n1", {1: 16}, "a"),
            share("b", "n1", {0: 8}, "b"),
        ],
    )
    plan = world.plan(wants(16, 16), [pod("a", started=1), pod("b", started=2)])
    assert victims(plan) == ("n1", ["a"]) and isinstance(plan, NodeVictims)
    assert plan.freed == ("a0", "a1")


def test_a_type_filter_makes_the_victim_the_pod_on_the_right_card() -> None:
    """x fills the T4, y holds 16 of the A10; 16 on an A10 wanted: x (older) comes back
    without harm, y must go."""
    world = World(
        {"n1": [gpu(0, kind=A10), gpu(1, kind=T4, numa=1)]},
        [share("x", "n1", {1: 24}, "x"), share("y", "n1", {0: 16}, "y")],
    )
    holders = [pod("x", started=1), pod("y", started=2)]
    plan = world.plan(wants(16, filters=DeviceFilters(use_types=("A10",))), holders)
    assert victims(plan) == ("n1", ["y"])
    plan = world.plan(wants(16, filters=DeviceFilters(use_types=("T4",))), holders)
    assert victims(plan) == ("n1", ["x"])


def test_numa_binding_needs_both_cards_on_one_numa_node() -> None:
    """gpu0, gpu1 on NUMA 0, gpu2, gpu3 on 1; a, b, c hold 16 on gpu0, gpu2, gpu3. Two
    cards of 16: a back still leaves NUMA 1 free; b back leaves no NUMA node with two
    free cards; nor does c. Without binding, c alone goes (gpu1 and gpu2 after b)."""
    world = World(
        {"n1": [gpu(0), gpu(1), gpu(2, numa=1), gpu(3, numa=1)]},
        [
            share("a", "n1", {0: 16}, "a"),
            share("b", "n1", {2: 16}, "b"),
            share("c", "n1", {3: 16}, "c"),
        ],
    )
    holders = [pod("a", started=1), pod("b", started=2), pod("c", started=3)]
    bound = wants(16, count=2, filters=DeviceFilters(numa_bind=True))
    assert victims(world.plan(bound, holders)) == ("n1", ["b", "c"])
    assert victims(world.plan(wants(16, count=2), holders)) == ("n1", ["c"])


def test_a_freed_quota_lets_the_preemptor_fit() -> None:
    """gpu1 is free, but the namespace's 24 GiB quota holds v's 16: only v's going helps."""
    quota = QuotaLedger({("ns", "NVIDIA"): NamespaceQuota(24 * GIB, None, 16 * GIB, 0)})
    world = World({"n1": [gpu(0), gpu(1)]}, [share("v", "n1", {0: 16}, "v")], quota)
    assert victims(world.plan(wants(16), [pod("v")])) == ("n1", ["v"])


def candidate(node: str, *victim_priorities: int, pdb: int = 0, started=(0.0,)) -> NodeVictims:
    starts = list(started) + [0.0] * (len(victim_priorities) - len(started))
    pods = tuple(Holder(f"{node}-{i}", "", p, starts[i]) for i, p in enumerate(victim_priorities))
    return NodeVictims(node, pods, pdb, ())


def test_node_order_fewest_budget_violations_first() -> None:
    assert pick_node([candidate("a", 1, pdb=1), candidate("b", 9, 9, 9)]).node == "b"


def test_node_order_then_lowest_most_important_victim() -> None:
    assert pick_node([candidate("a", 5), candidate("b", 4, 4, 4)]).node == "b"


def test_node_order_then_smallest_sum_of_priorities_each_plus_max_int32_plus_one() -> None:
    assert pick_node([candidate("a", 5, 4), candidate("b", 5, 3)]).node == "b"
    # -10 - 10 + 3 x 2^31 is more than 4 + 2 x 2^31: the third victim costs more.
    assert pick_node([candidate("a", 5, -10, -10), candidate("b", 5, 4)]).node == "b"


def test_node_order_then_fewest_victims() -> None:
    # 0 + 2^31 == 0 + (-2^31 + 2^31) + 2^31: equal sums, one victim fewer.
    assert pick_node([candidate("a", 0, -(2**31)), candidate("b", 0)]).node == "b"


def test_node_order_then_latest_earliest_start_of_the_most_important_victims() -> None:
    first = candidate("a", 5, 1, started=(30.0, 1.0))
    second = candidate("b", 5, 1, started=(20.0, 99.0))
    assert pick_node([second, first]).node == "a"


def test_node_order_else_the_first() -> None:
    assert pick_node([candidate("b", 5), candidate("a", 5)]).node == "b"


def test_the_search_stops_at_kube_schedulers_number_of_candidates() -> None:
    """200 nodes: 100 candidates are enough, so a cheaper victim on node 150 is found only
    when the search starts past node 50."""
    assert [candidates_wanted(n) for n in (5, 150, 1000, 2000)] == [5, 100, 100, 200]
    nodes = {f"n{i:03d}": [gpu(0)] for i in range(200)}
    shares = [share(f"p{i:03d}", f"n{i:03d}", {0: 24}, f"p{i:03d}") for i in range(200)]
    holders = [pod(f"p{i:03d}", 0 if i == 150 else 5) for i in range(200)]
    world = World(nodes, shares)
    assert victims(world.plan(wants(16), holders)) == ("n000", ["p000"])
    assert victims(world.plan(wants(16), holders, offset=100)) == ("n150", ["p150"])


def test_the_search_goes_on_until_a_candidate_violates_no_budget() -> None:
    nodes = {f"n{i:03d}": [gpu(0)] for i in range(150)}
    shares = [share(f"p{i:03d}", f"n{i:03d}", {0: 24}, f"p{i:03d}") for i in range(150)]
    budget = DisruptionBudget(0, frozenset(f"p{i:03d}" for i in range(120)))
    world = World(nodes, shares)
    plan = world.plan(wants(16), [pod(s.key) for s in shares], [budget])
    assert victims(plan) == ("n120", ["p120"])


def cpu_room(cpu: int, bound: dict[str, int], pods: int = 110) -> NodeRoom:
    """A node of `cpu` cores whose bound pods (uid -> cores) leave it short."""
    requests = {uid: {"cpu": Decimal(cores)} for uid, cores in bound.items()}
    used = {"cpu": Decimal(sum(bound.values()))}
    return NodeRoom({"cpu": Decimal(cpu), "pods": Decimal(pods)}, used, len(bound), requests)


def test_a_node_short_of_cpu_is_judged_with_its_victims_gone() -> None:
    """The GPU has room (a, b hold 8 GiB each of 24), but the node's 4 cores are taken
    (a 2, b 2) and the pod asks 2: all gone, it fits; a back (earliest): cpu 2 of 4
    used, 2 left, kept; b back: 4 used, b is a victim, though its share frees nothing
    the GPU needs."""
    world = World({"n1": [gpu(0)]}, [share("a", "n1", {0: 8}, "a"), share("b", "n1", {0: 8}, "b")])
    preemptor = replace(wants(8), requests={"cpu": Decimal(2)})
    holders = [pod("a", started=1), pod("b", started=2)]
    room = cpu_room(4, {"a": 2, "b": 2})
    holdings = Holdings({p.uid: p for p in holders}, world.shares, (), {"n1": room})
    plan = plan_preemption(preemptor, world.engine, world.inventory, ["n1"], holdings)
    assert victims(plan) == ("n1", ["b"])


def test_a_node_where_even_all_victims_gone_leave_too_little_cpu_is_no_candidate() -> None:
    """Only a may go (b outranks the pod): 2 of 4 cores free is less than 3."""
    world = World({"n1": [gpu(0)]}, [share("a", "n1", {0: 8}, "a"), share("b", "n1", {0: 8}, "b")])
    preemptor = replace(wants(8, priority=10), requests={"cpu": Decimal(3)})
    holders = [pod("a", 0, started=1), pod("b", 100, started=2)]
    room = cpu_room(4, {"a": 2, "b": 2})
    holdings = Holdings({p.uid: p for p in holders}, world.shares, (), {"n1": room})
    plan = plan_preemption(preemptor, world.engine, world.inventory, ["n1"], holdings)
    assert plan == NoPreemption("0/1 nodes are available: 1 Insufficient cpu.")


def test_a_node_out_of_pod_slots_needs_one_pod_gone() -> None:
    """Pod count 2 of 2; the GPU needs nothing freed, so the most important (a) is
    reprieved and only b goes, for the slot."""
    world = World({"n1": [gpu(0)]}, [share("a", "n1", {0: 4}, "a"), share("b", "n1", {0: 4}, "b")])
    holders = [pod("a", started=1), pod("b", started=2)]
    room = cpu_room(8, {"a": 0, "b": 0}, pods=2)
    holdings = Holdings({p.uid: p for p in holders}, world.shares, (), {"n1": room})
    plan = plan_preemption(wants(8), world.engine, world.inventory, ["n1"], holdings)
    assert victims(plan) == ("n1", ["b"])
