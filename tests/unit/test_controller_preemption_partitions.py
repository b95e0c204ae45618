"""Preemption for and of MIG partitions, on H100 80GB cards in NVIDIA's placement table.

The pools are the kubelet plugin's own (tests/mig_slices.py); the holdings, the
counters, the engine's usage and the quota are read from allocated claims by the
controller's own code (claim_shares, partition_usage, usage_by_node, quota_ledger),
and the pod's variants by pod_variants with real CEL. On an H100 a 3g.40gb sits at 0
or 4 (memory slices 0-3 or 4-7, 3 of 7 compute slices), the 4g.40gb only at 0
(slices 0-3, 4 compute slices), a 1g.10gb at any of 0-6 (its slice, 1 compute slice);
HAMi takes a 3g at 4 before 0. The expected victims are worked out in each docstring.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from controller.inventory import build_inventory, quota_ledger, usage_by_node
from controller.partition_inventory import partition_usage
from controller.preemption import (
    NO_VICTIMS,
    Holder,
    Holdings,
    NodeVictims,
    NoPreemption,
    Preemptor,
    plan_preemption,
)
from controller.preemption_shares import claim_shares
from controller.requests import pod_variants
from dra_driver.engine.engine import Engine
from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
from dra_driver.objects.node_predicates import NodeRoom
from tests.mig_slices import (
    ALLOCATION_TAINT,
    DRIVER,
    partition_request,
    pool_slices,
    profile_selector,
)
from tests.partition_context import SHARE_CLASS, gpumem_quota, partition_request_context

INFEASIBLE = "CardMigTopologyInfeasible"


def holding(name: str, node: str, *devices: str, holders: Sequence[str], ns: str = "ns") -> dict:
    """An allocated claim reserved by `holders`: each device a MIG partition of the node
    (`gpu-1-mig-...`), or `gpu-<i>:<GiB>` for a share of that many GiB of a shared card."""
    results = []
    for device in devices:
        if ":" in device:
            card, gib = device.split(":")
            consumed = {"memory": f"{gib}Gi", "shares": "1"}
            extra = {"shareID": f"share-{name}", "consumedCapacity": consumed}
            results.append({"driver": DRIVER, "pool": node, "device": card, **extra})
        else:
            results.append({"driver": DRIVER, "pool": node, "device": device})
    for result in results:
        result["request"] = "gpu"
    return {
        "metadata": {"name": name, "namespace": ns, "uid": name},
        "status": {
            "allocation": {"devices": {"results": results}},
            "reservedFor": [{"resource": "pods", "name": h, "uid": h} for h in holders],
        },
    }


class World:
    """Nodes' pools and the allocated claims, read as the controller's view reads them."""

    def __init__(
        self,
        slices: Sequence[dict[str, Any]],
        claims: Sequence[dict[str, Any]],
        quotas: Sequence[dict[str, Any]] = (),
    ) -> None:
        self.inventory = build_inventory(slices, DRIVER, frozenset({ALLOCATION_TAINT["key"]}))
        vendors = dra_vendor_registry()
        quota = quota_ledger(quotas, claims, self.inventory, vendors) if quotas else None
        usage = usage_by_node(claims, self.inventory)
        self.engine = Engine(self.inventory.nodes.values(), usage, vendors=vendors, quota=quota)
        self.counters = partition_usage(claims, self.inventory.partitions)
        self.shares = claim_shares(claims, self.inventory, vendors)
        self.context = partition_request_context(self.inventory)

    def plan(
        self,
        priority: int,
        pods: Sequence[Holder],
        *requests: dict[str, Any],
        ns: str = "ns",
        rooms: Mapping[str, NodeRoom] | None = None,
        cpu: int = 0,
    ) -> NodeVictims | NoPreemption:
        """The plan for a pod of `priority` in `ns` (asking `cpu` cores) whose one claim
        makes `requests`; `rooms` are the nodes short of room as they stand."""
        claim = {
            "metadata": {"name": "hi-claim", "namespace": ns, "uid": "hi-claim"},
            "spec": {"devices": {"requests": list(requests)}},
        }
        variants = pod_variants(
            {"metadata": {"name": "hi", "namespace": ns}}, [claim], self.context
        )
        holdings = Holdings({p.uid: p for p in pods}, self.shares, (), rooms or {})
        nodes = list(self.inventory.nodes)
        return plan_preemption(
            Preemptor(priority, variants, requests={"cpu": Decimal(cpu)}),
            self.engine,
            self.inventory,
            nodes,
            holdings,
            0,
            self.counters,
        )


def mig(profile: str) -> dict[str, Any]:
    return partition_request("mig", profile_selector(profile))


def share(gib: int) -> dict[str, Any]:
    return {
        "name": "gpu",
        "exactly": {
            "deviceClassName": SHARE_CLASS,
            "capacity": {"requests": {"memory": f"{gib}Gi"}},
        },
    }


def pod(uid: str, priority: int = 0, started: float = 0.0) -> Holder:
    return Holder(uid, f"ns/{uid}", priority, started)


def victims(plan: NodeVictims | NoPreemption) -> tuple[str, list[str]]:
    assert isinstance(plan, NodeVictims), plan
    return plan.node, [v.uid for v in plan.victims]


def partitioned(node: str = "a") -> list[dict[str, Any]]:
    """One H100 in MIG mode, card 1 (its partitions are `gpu-1-mig-...`)."""
    return pool_slices(node, mig_cards=(1,))


def test_the_victim_is_the_holder_whose_placement_blocks_the_profile() -> None:
    """A 4g.40gb sits only at 0. low1 holds a 1g at 0 (in its way), low0 a 3g at 4 (not:
    3 + 4 compute slices is the card's 7). All gone: it fits. low1 back first (higher
    priority): the 1g blocks slice 0, victim; low0 back: still fits, kept. The lowest
    priority is reprieved because HAMi's placement, not the order, decides."""
    claims = [
        holding("small", "a", "gpu-1-mig-1g-10gb-at-0", holders=["low1"]),
        holding("side", "a", "gpu-1-mig-3g-40gb-at-4", holders=["low0"]),
    ]
    world = World(partitioned(), claims)
    plan = world.plan(10, [pod("low1", 1, started=1), pod("low0", 0, started=2)], mig("4g.40gb"))
    assert victims(plan) == ("a", ["low1"])
    assert isinstance(plan, NodeVictims) and plan.freed == ("ns/small",)


def test_a_holder_of_equal_or_higher_priority_is_never_a_victim() -> None:
    """The 1g at 0 is held at the pod's own priority, then above it: only the 3g at 4 may
    go, which leaves slice 0 taken, so no node is a candidate."""
    claims = [
        holding("small", "a", "gpu-1-mig-1g-10gb-at-0", holders=["peer"]),
        holding("side", "a", "gpu-1-mig-3g-40gb-at-4", holders=["low"]),
    ]
    world = World(partitioned(), claims)
    for priority in (10, 20):
        plan = world.plan(10, [pod("peer", priority), pod("low", 0)], mig("4g.40gb"))
        assert plan == NoPreemption(f"0/1 nodes are available: 1 1/1 {INFEASIBLE}.")


def test_a_3g_that_needs_two_1g_placements_freed_evicts_both() -> None:
    """top (above the pod) holds the 3g at 0; x and y hold 1g at 4 and 5, both in the
    only other 3g placement. All gone: the 3g fits at 4. x back: slice 4 taken, victim;
    y back: slice 5 taken, victim."""
    claims = [
        holding("big", "a", "gpu-1-mig-3g-40gb-at-0", holders=["top"]),
        holding("x", "a", "gpu-1-mig-1g-10gb-at-4", holders=["x"]),
        holding("y", "a", "gpu-1-mig-1g-10gb-at-5", holders=["y"]),
    ]
    world = World(partitioned(), claims)
    holders = [pod("top", 100), pod("x", started=1), pod("y", started=2)]
    plan = world.plan(10, holders, mig("3g.40gb"))
    assert victims(plan) == ("a", ["x", "y"])
    assert isinstance(plan, NodeVictims) and plan.freed == ("ns/x", "ns/y")


def test_a_share_pod_never_evicts_a_partition_holder() -> None:
    """Node a has a shared card (gpu-0) and a partitioned one (gpu-1), node b only a
    partitioned one; mig-a and mig-b hold partitions, s holds 50 of gpu-0's 80 GiB, all
    below the pod. 40 GiB wanted: only s goes (mig-a, the oldest, is no candidate: its
    going frees nothing a share can use). With s above the pod no node is a candidate,
    though partition holders of lower priority are on both."""
    slices = [*pool_slices("a", mig_cards=(1,), shared_cards=(0,)), *partitioned("b")]
    claims = [
        holding("mig-a", "a", "gpu-1-mig-7g-80gb-at-0", holders=["mig-a"]),
        holding("mig-b", "b", "gpu-1-mig-3g-40gb-at-4", holders=["mig-b"]),
        holding("s", "a", "gpu-0:50", holders=["s"]),
    ]
    world = World(slices, claims)
    plan = world.plan(10, [pod("mig-a"), pod("mig-b"), pod("s", started=1)], share(40))
    assert victims(plan) == ("a", ["s"])
    plan = world.plan(10, [pod("mig-a"), pod("mig-b"), pod("s", 100)], share(40))
    assert plan == NoPreemption(f"0/2 nodes are available: 2 {NO_VICTIMS}.")


def test_a_share_pod_evicts_a_partition_holder_for_the_cpu_its_going_gives() -> None:
    """gpu-0 is free, but the node's 2 cores are m's (it holds the whole MIG card) and
    the pod asks 1: as kube-scheduler's dry run runs NodeResourcesFit, m is a victim
    though its partition frees nothing the share needs."""
    slices = pool_slices("a", mig_cards=(1,), shared_cards=(0,))
    world = World(slices, [holding("m", "a", "gpu-1-mig-7g-80gb-at-0", holders=["m"])])
    two_cores = {"cpu": Decimal(2), "pods": Decimal(110)}
    room = NodeRoom(two_cores, {"cpu": Decimal(2)}, 1, {"m": {"cpu": Decimal(2)}})
    plan = world.plan(10, [pod("m")], share(10), rooms={"a": room}, cpu=1)
    assert victims(plan) == ("a", ["m"])


def test_a_share_pod_evicts_its_own_namespaces_partition_holder_for_quota() -> None:
    """The namespace is held to 50000 MiB and its mine holds a 3g.40gb (40448 MiB):
    20 GiB more (20480) exceeds it, though gpu-0 is free. Freeing mine gives the quota
    back, so it is the victim; theirs (another namespace, older) frees no quota and no
    card a share can use: no candidate."""
    slices = pool_slices("a", mig_cards=(1,), shared_cards=(0,))
    claims = [
        holding("theirs", "a", "gpu-1-mig-3g-40gb-at-0", holders=["theirs"], ns="other"),
        holding("mine", "a", "gpu-1-mig-3g-40gb-at-4", holders=["mine"]),
    ]
    world = World(slices, claims, [gpumem_quota("ns", 50_000)])
    plan = world.plan(10, [pod("theirs"), pod("mine", started=1)], share(20))
    assert victims(plan) == ("a", ["mine"])


def test_a_pod_asking_a_share_and_a_partition_frees_both_kinds() -> None:
    """s holds 60 of gpu-0's 80 GiB, m the whole of gpu-1 (7g). 40 GiB and a 3g wanted:
    both go. 10 GiB and a 3g: s (older) back leaves 20 GiB, kept; m goes."""
    slices = pool_slices("a", mig_cards=(1,), shared_cards=(0,))
    claims = [
        holding("s", "a", "gpu-0:60", holders=["s"]),
        holding("m", "a", "gpu-1-mig-7g-80gb-at-0", holders=["m"]),
    ]
    world = World(slices, claims)
    holders = [pod("s", started=1), pod("m", started=2)]
    assert victims(world.plan(10, holders, share(40), mig("3g.40gb"))) == ("a", ["s", "m"])
    assert victims(world.plan(10, holders, share(10), mig("3g.40gb"))) == ("a", ["m"])


def test_a_claim_reserved_by_two_pods_frees_its_partition_only_when_both_go() -> None:
    """pair (the whole card) is reserved by a and b. a back: b still holds it, no fit,
    victim; b back likewise. Reserved by a pod of the preemptor's priority too, it
    frees nothing."""
    claims = [holding("pair", "a", "gpu-1-mig-7g-80gb-at-0", holders=["a", "b"])]
    world = World(partitioned(), claims)
    [held] = world.shares
    assert (held.key, held.holders, held.usage) == ("ns/pair", frozenset({"a", "b"}), {})
    assert [p.name for p in held.partitions] == ["gpu-1-mig-7g-80gb-at-0"]
    plan = world.plan(10, [pod("a", started=1), pod("b", started=2)], mig("1g.10gb"))
    assert victims(plan) == ("a", ["a", "b"])
    assert isinstance(plan, NodeVictims) and plan.freed == ("ns/pair",)
    shared = World(
        partitioned(), [holding("pair", "a", "gpu-1-mig-7g-80gb-at-0", holders=["a", "peer"])]
    )
    plan = shared.plan(10, [pod("a"), pod("peer", 10)], mig("1g.10gb"))
    assert plan == NoPreemption(f"0/1 nodes are available: 1 1/1 {INFEASIBLE}.")


def test_a_namespace_at_its_quota_frees_it_by_preempting_its_own_partition_pod() -> None:
    """The namespace is held to 30000 MiB and mine holds a 2g.20gb (20096 MiB): a second
    one exceeds it, though the card has room. theirs (another namespace, older) holds a
    1g: given back, the 2g still fits (at 2 or 4) and the quota is unchanged, kept;
    mine back exceeds the quota: victim."""
    claims = [
        holding("theirs", "a", "gpu-1-mig-1g-10gb-at-6", holders=["theirs"], ns="other"),
        holding("mine", "a", "gpu-1-mig-2g-20gb-at-0", holders=["mine"]),
    ]
    world = World(partitioned(), claims, [gpumem_quota("ns", 30_000)])
    plan = world.plan(10, [pod("theirs", started=1), pod("mine", started=2)], mig("2g.20gb"))
    assert victims(plan) == ("a", ["mine"])
    unlimited = World(partitioned(), claims)
    plan = unlimited.plan(10, [pod("theirs", started=1), pod("mine", started=2)], mig("2g.20gb"))
    assert plan == NoPreemption(f"0/1 nodes are available: 1 {NO_VICTIMS}.")
