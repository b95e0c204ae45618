"""MIG partitions in the controller's decision: inventory, HAMi's policies over nodes,
cards and profiles, the counters, and the refusal that names the card and what is free.

The slices are built in the contract's shape (tests/mig_slices.py); everything else is
the controller's own code: build_inventory, pod_variants with real CEL, decide_pod."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from controller.allocation import build_allocation
from controller.decide import NoFit, PodAllocation, decide_pod, partition_quota
from controller.inventory import Inventory, build_inventory, quota_ledger
from controller.partition_inventory import CounterUsage, partition_usage
from controller.requests import RequestContext, pod_variants
from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.quota import QuotaLedger
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
from dra_driver.objects.mig_devices import PARTITION_CLASS
from tests.mig_slices import (
    ALLOCATION_TAINT,
    DRIVER,
    partition_request,
    pool_slices,
    profile_selector,
)
from tests.partition_context import SHARE_CLASS, gpumem_quota, partition_request_context


@dataclass
class Cluster:
    """The controller's decision inputs over some pools, charged as claims are decided."""

    slices: Sequence[Mapping[str, Any]]
    gpu_policy: str = "spread"
    node_policy: str = "binpack"
    quota: QuotaLedger | None = None
    inventory: Inventory = field(init=False)
    engine: Engine = field(init=False)
    usage: CounterUsage = field(init=False)
    context: RequestContext = field(init=False)

    def __post_init__(self) -> None:
        self.inventory = build_inventory(self.slices, DRIVER, frozenset({ALLOCATION_TAINT["key"]}))
        self.engine = Engine(
            self.inventory.nodes.values(),
            settings=EngineSettings(self.gpu_policy, self.node_policy),
            vendors=dra_vendor_registry(),
            quota=self.quota,
        )
        self.usage = partition_usage((), self.inventory.partitions)
        self.context = partition_request_context(self.inventory)

    def decide(self, *requests: dict[str, Any]) -> PodAllocation | NoFit:
        claim = {
            "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
            "spec": {"devices": {"requests": list(requests)}},
        }
        pod = {"metadata": {"name": "p", "namespace": "ns"}}
        variants = pod_variants(pod, [claim], self.context)
        nodes = list(self.inventory.nodes)
        return decide_pod(self.engine, variants, self.inventory, nodes, {}, self.usage)

    def allocate(self, *requests: dict[str, Any]) -> list[tuple[str, str, str]]:
        """Decide and charge, as the controller's commit does: (node, request, device)."""
        outcome = self.decide(*requests)
        assert isinstance(outcome, PodAllocation), outcome
        self.engine.commit(outcome.variant.request, outcome.placement)
        quota = partition_quota(self.engine, outcome.variant, self.inventory)
        found = []
        for result in outcome.results[0]:
            partition = self.inventory.partitions.get(result.device.key)
            if partition is not None:
                self.usage.charge(partition)
                if quota is not None:
                    quota.charge(partition)
            found.append((outcome.node, result.request, result.device.name))
        return found


def share(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": SHARE_CLASS, **exactly}}


def profile(name: str) -> dict[str, Any]:
    return partition_request("mig", profile_selector(name))


def test_partitions_and_counters_are_indexed_apart_from_the_engine() -> None:
    inventory = build_inventory(pool_slices("a", mig_cards=(1,), shared_cards=(0,)), DRIVER)
    assert [d.id for d in inventory.nodes["a"].devices] == ["GPU-a-0"]
    assert all("mig" not in key[2] for key in inventory.by_key)
    assert len(inventory.partitions) == 25  # H100 -lgipp: 7 + 7 + 4 + 3 + 2 + 1 + 1 placements
    [(card, counters)] = inventory.counter_sets.items()
    assert card == ("a", "gpu-1-mig-counters")
    assert counters["compute-slices"] == 7 and counters["memory-slice-7"] == 1
    assert set(inventory.partition_cards["a"]) == {card}


def test_a_3g_profile_goes_where_hami_places_it() -> None:
    cluster = Cluster(pool_slices("a"))
    assert cluster.allocate(profile("3g.40gb")) == [("a", "mig", "gpu-0-mig-3g-40gb-at-4")]
    assert cluster.allocate(profile("3g.40gb")) == [("a", "mig", "gpu-0-mig-3g-40gb-at-0")]


def test_the_smallest_partition_with_the_memory_asked_is_taken() -> None:
    cluster = Cluster(pool_slices("a"))
    at_least = partition_request("mig", capacity={"requests": {"memory": "19Gi"}})
    # 1g.20gb and 2g.20gb both have 19.62 GiB: the 1g leaves a compute slice more.
    assert cluster.allocate(at_least) == [("a", "mig", "gpu-0-mig-1g-20gb-at-6")]
    more = partition_request("mig", capacity={"requests": {"memory": "20Gi"}})
    assert cluster.allocate(more) == [("a", "mig", "gpu-0-mig-3g-40gb-at-0")]


@pytest.mark.parametrize(
    ("gpu_policy", "second"),
    [("binpack", "gpu-0-mig-1g-10gb-at-5"), ("spread", "gpu-1-mig-1g-10gb-at-6")],
)
def test_gpu_policy_packs_or_spreads_over_cards(gpu_policy: str, second: str) -> None:
    cluster = Cluster(pool_slices("a", mig_cards=(0, 1)), gpu_policy=gpu_policy)
    assert cluster.allocate(profile("1g.10gb")) == [("a", "mig", "gpu-0-mig-1g-10gb-at-6")]
    assert cluster.allocate(profile("1g.10gb")) == [("a", "mig", second)]


@pytest.mark.parametrize(("node_policy", "second"), [("binpack", "a"), ("spread", "b")])
def test_node_policy_packs_or_spreads_over_nodes(node_policy: str, second: str) -> None:
    cluster = Cluster([*pool_slices("a"), *pool_slices("b")], node_policy=node_policy)
    assert cluster.allocate(profile("2g.20gb"))[0][0] == "a"
    assert cluster.allocate(profile("2g.20gb"))[0][0] == second


def test_counters_never_let_two_partitions_overlap() -> None:
    cluster = Cluster(pool_slices("a"))
    assert cluster.allocate(profile("4g.40gb")) == [("a", "mig", "gpu-0-mig-4g-40gb-at-0")]
    refused = cluster.decide(profile("4g.40gb"))
    assert isinstance(refused, NoFit)
    assert refused.reasons == {"a": "1/1 CardMigTopologyInfeasible"}
    assert "no free placement of 4g.40gb" in refused.message
    # 4 compute slices taken: a 3g (3 compute) fits beside it, at 4; then a 1g no more.
    assert cluster.allocate(profile("3g.40gb")) == [("a", "mig", "gpu-0-mig-3g-40gb-at-4")]
    assert "free: nothing" in str(cluster.decide(profile("1g.10gb")))


def test_a_profile_the_card_lacks_is_refused_naming_the_card_and_what_is_free() -> None:
    cluster = Cluster(pool_slices("a"))
    cluster.allocate(profile("3g.40gb"))
    refused = cluster.decide(profile("5g.60gb"))
    assert isinstance(refused, NoFit)
    assert refused.reasons == {"a": "1/1 CardMigTopologyInfeasible"}
    message = refused.message
    assert "card gpu-0 (GPU-a-0): no profile matches (it has 1g.10gb, 1g.10gb+me," in message
    assert "profile == '5g.60gb'" in message
    assert "free: 1g.10gb at 0,1,2,3; 1g.10gb+me at 0,1,2,3; 1g.20gb at 0,2;" in message
    free = message.split("free: ")[1]
    assert "4g.40gb at 0" in free and "7g.80gb" not in free


def test_a_node_without_mig_cards_has_no_partitions() -> None:
    cluster = Cluster(pool_slices("a", mig_cards=(), shared_cards=(0,)))
    refused = cluster.decide(profile("1g.10gb"))
    assert isinstance(refused, NoFit) and refused.reasons == {"a": "NodeHasNoDevices"}
    assert "a has no card in MIG mode" in refused.message


def test_first_available_tries_the_share_then_the_partition() -> None:
    either = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "share", "deviceClassName": SHARE_CLASS},
            {"name": "mig", "deviceClassName": PARTITION_CLASS},
        ],
    }
    only_mig = Cluster(pool_slices("a"))
    assert only_mig.allocate(either) == [("a", "gpu/mig", "gpu-0-mig-1g-10gb-at-6")]
    both = Cluster(pool_slices("a", mig_cards=(1,), shared_cards=(0,)))
    assert both.allocate(either) == [("a", "gpu/share", "gpu-0")]
    either["firstAvailable"].reverse()
    assert both.allocate(either) == [("a", "gpu/mig", "gpu-1-mig-1g-10gb-at-6")]


def test_a_share_and_a_partition_on_one_node_each_go_to_their_card() -> None:
    cluster = Cluster(pool_slices("a", mig_cards=(1,), shared_cards=(0,)))
    outcome = cluster.decide(share(capacity={"requests": {"memory": "10Gi"}}), profile("2g.20gb"))
    assert isinstance(outcome, PodAllocation)
    [[shared, mig]] = outcome.results
    assert (shared.request, shared.device.name) == ("gpu", "gpu-0") and shared.consumed
    assert (mig.request, mig.device.name, mig.consumed) == ("mig", "gpu-1-mig-2g-20gb-at-0", None)
    allocation = build_allocation(
        outcome.variant.claims[0], outcome.results[0], {}, "a", "2026-01-01T00:00:00Z"
    )
    written = allocation["devices"]["results"][1]
    assert written == {
        "request": "mig",
        "driver": DRIVER,
        "pool": "a",
        "device": "gpu-1-mig-2g-20gb-at-0",
    }


def test_allocated_claims_hold_their_counters() -> None:
    cluster = Cluster(pool_slices("a"))
    held = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"driver": DRIVER, "pool": "a", "device": "gpu-0-mig-7g-80gb-at-0"}]
                }
            }
        }
    }
    cluster.usage = partition_usage([held], cluster.inventory.partitions)
    refused = cluster.decide(profile("1g.10gb"))
    assert isinstance(refused, NoFit) and "free: nothing" in refused.message


def test_a_constraint_over_a_partition_request_is_refused() -> None:
    cluster = Cluster(pool_slices("a"))
    claim = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [profile("1g.10gb"), share()],
                "constraints": [{"matchAttribute": f"{DRIVER}/uuid", "requests": ["mig"]}],
            }
        },
    }
    with pytest.raises(InvalidParameterError, match="constraints over requests of a partition"):
        pod_variants({"metadata": {}}, [claim], cluster.context)


def quota_for(cluster: Cluster, *quotas: dict[str, Any], claims: Sequence[Any] = ()) -> QuotaLedger:
    return quota_ledger(quotas, claims, cluster.inventory, dra_vendor_registry())


def test_partitions_are_charged_to_the_namespace_quota_and_refused_past_it() -> None:
    probe = Cluster(pool_slices("a"))
    sizes = {p.profile: p.memory_mib for p in probe.inventory.partitions.values()}
    room = sizes["1g.10gb"] + sizes["2g.20gb"] - 1  # one 1g, never a 2g beside it
    cluster = Cluster(pool_slices("a"), quota=quota_for(probe, gpumem_quota("ns", room)))
    assert cluster.allocate(profile("1g.10gb")) == [("a", "mig", "gpu-0-mig-1g-10gb-at-6")]
    refused = cluster.decide(profile("2g.20gb"))
    assert isinstance(refused, NoFit)
    assert refused.reasons == {"a": "1/1 ResourceQuotaNotFit"}
    left = room - sizes["1g.10gb"]
    assert f"2g.20gb needs {sizes['2g.20gb']} MiB, 29% cores" in refused.message
    assert f"namespace ns has {left} MiB of its NVIDIA quota left" in refused.message
    # What the quota still holds is served: two more 1g.10gb, then no third.
    assert left // sizes["1g.10gb"] == 2
    assert cluster.allocate(profile("1g.10gb")) == [("a", "mig", "gpu-0-mig-1g-10gb-at-5")]
    assert cluster.allocate(profile("1g.10gb")) == [("a", "mig", "gpu-0-mig-1g-10gb-at-4")]
    assert "ResourceQuotaNotFit" in str(cluster.decide(profile("1g.10gb")))


def test_a_capacity_request_takes_the_smallest_partition_the_quota_holds() -> None:
    probe = Cluster(pool_slices("a"))
    cluster = Cluster(pool_slices("a"), quota=quota_for(probe, gpumem_quota("ns", 100_000, 50)))
    at_least = partition_request("mig", capacity={"requests": {"memory": "10Gi"}})
    # 1g.20gb (2 memory slices, 1 compute slice: 15% cores) before 3g.40gb (43%).
    assert cluster.allocate(at_least) == [("a", "mig", "gpu-0-mig-1g-20gb-at-6")]
    assert cluster.allocate(at_least) == [("a", "mig", "gpu-0-mig-1g-20gb-at-4")]
    assert cluster.allocate(at_least) == [("a", "mig", "gpu-0-mig-1g-20gb-at-2")]
    refused = cluster.decide(at_least)  # 45% of 50 used: a fourth 15% exceeds the cores
    assert isinstance(refused, NoFit) and refused.reasons == {"a": "1/1 ResourceQuotaNotFit"}
    assert "and 5% cores of its NVIDIA quota left" in refused.message


def test_allocated_partitions_count_against_the_quota_of_their_namespace_only() -> None:
    cluster = Cluster(pool_slices("a"))
    whole = {
        "metadata": {"namespace": "ns"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"driver": DRIVER, "pool": "a", "device": "gpu-0-mig-7g-80gb-at-0"}]
                }
            }
        },
    }
    other = {**whole, "metadata": {"namespace": "elsewhere"}}
    ledger = quota_for(
        cluster, gpumem_quota("ns", 200_000), gpumem_quota("spare", 1), claims=[whole, other]
    )
    held = ledger.quotas[("ns", "NVIDIA")]
    seven = next(p for p in cluster.inventory.partitions.values() if p.profile == "7g.80gb")
    assert (held.memory_used_mib, held.cores_used) == (seven.memory_mib, 100)
    assert ledger.quotas[("spare", "NVIDIA")].memory_used_mib == 0
