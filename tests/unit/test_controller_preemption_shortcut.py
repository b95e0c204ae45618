"""The reprieve loop's shortcut gives the plan of the full check, on random nodes.

The reference below is SelectVictimsOnNode written plainly: every fit is
`decide_pod` on an engine over the node alone, with the usage and quota built
afresh from the shares still freed. `plan_preemption` on that one node must
choose the same victims and free the same shares, or refuse with the same reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.decide import NoFit, decide_pod
from controller.inventory import build_inventory
from controller.preemption import (
    NO_VICTIMS,
    Holder,
    Holdings,
    NodeVictims,
    Preemptor,
    plan_preemption,
)
from controller.preemption_shares import Share, quota_without, usage_without
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.requests import DeviceFilters, DeviceRequest, PodRequest

DRIVER = "vgpu.hami.io"
NODE = "node-a"
GIB = 1024
POLICIES = (None, "binpack", "spread", "topology-aware", "mutex", "numa,binpack")


def node_slice(gpus: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """`gpus`: (GiB, NUMA node) per GPU."""
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "attributes": {
                "uuid": {"string": f"{NODE}-{i}"},
                "index": {"int": i},
                "type": {"string": "NVIDIA-A10"},
                "numa": {"int": numa},
            },
            "capacity": {
                "memory": {"value": f"{gib}Gi"},
                "cores": {"value": "100"},
                "shares": {"value": "4"},
            },
        }
        for i, (gib, numa) in enumerate(gpus)
    ]
    pool = {"name": NODE, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"uid": "slice"},
        "spec": {"driver": DRIVER, "nodeName": NODE, "pool": pool, "devices": devices},
    }


@st.composite
def cases(
    draw: st.DrawFn,
) -> tuple[list[dict[str, Any]], list[Share], dict[str, Holder], Preemptor, bool]:
    gpus = draw(
        st.lists(st.tuples(st.sampled_from([8, 16, 24]), st.integers(0, 1)), min_size=1, max_size=4)
    )
    pods = {
        f"p{i}": Holder(
            f"p{i}", f"ns{i % 2}/p{i}", draw(st.integers(0, 2)), float(draw(st.integers(0, 5)))
        )
        for i in range(draw(st.integers(1, 7)))
    }
    shares: list[Share] = []
    for index in range(draw(st.integers(1, 9))):
        on = draw(st.lists(st.integers(0, len(gpus) - 1), min_size=1, max_size=2, unique=True))
        usage = {
            f"{NODE}-{g}": DeviceUsage(
                1, draw(st.integers(1, 12)) * GIB, draw(st.sampled_from([0, 30]))
            )
            for g in on
        }
        holders = frozenset(draw(st.lists(st.sampled_from(sorted(pods)), min_size=1, max_size=2)))
        namespace = f"ns{index % 2}"
        quota_use = tuple(
            (namespace, "NVIDIA", amount.memory_mib, amount.cores) for amount in usage.values()
        )
        shares.append(Share(f"{namespace}/c{index}", NODE, usage, holders, quota_use))
    containers = tuple(
        (
            DeviceRequest(
                "NVIDIA",
                draw(st.integers(1, 2)),
                draw(st.integers(1, 16)) * GIB,
                draw(st.sampled_from([0, 30, 100])),
                filters=DeviceFilters(numa_bind=draw(st.booleans())),
            ),
        )
        for _ in range(draw(st.integers(1, 2)))
    )
    request = PodRequest("ns0", "hi", containers, gpu_policy=draw(st.sampled_from(POLICIES)))
    claims = tuple(
        ClaimVariant({"spec": {}}, (c,), (f"gpu{i}",), ("c",), None, None)
        for i, c in enumerate(containers)
    )
    preemptor = Preemptor(draw(st.integers(1, 3)), [PodVariant(request, claims)])
    return [node_slice(gpus)], shares, pods, preemptor, draw(st.booleans())


def reference(
    preemptor: Preemptor,
    engine: Engine,
    inventory: Any,
    shares: Sequence[Share],
    pods: dict[str, Holder],
) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
    """(victim uids, freed share keys) or the node's refusal, every fit judged in full."""
    base = {
        slot.device.id: DeviceUsage(slot.used, slot.memory, slot.cores)
        for slot in engine.node_state(NODE).slots
    }
    alone = Engine([engine.node_state(NODE).node], settings=engine.settings, quota=engine.quota)

    def refusal(freed: set[int]) -> str | None:
        chosen = [shares[i] for i in freed]
        alone.set_usage(NODE, usage_without(base, chosen))
        alone.quota = quota_without(engine.quota, chosen)
        outcome = decide_pod(alone, preemptor.variants, inventory, (NODE,), {})
        return outcome.reasons.get(NODE, NO_VICTIMS) if isinstance(outcome, NoFit) else None

    # Ties in importance keep the order the holders are met in, as the module's sort does.
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


@settings(max_examples=300, deadline=None)
@given(cases())
def test_the_shortcut_chooses_what_the_full_check_chooses(case) -> None:
    slices, shares, pods, preemptor, limited = case
    inventory = build_inventory(slices, DRIVER)
    usage: dict[str, DeviceUsage] = {}
    for share in shares:
        for uuid, amount in share.usage.items():
            usage[uuid] = usage.get(uuid, DeviceUsage()).plus(amount)
    quota = None
    if limited:
        used = {
            ns: sum(u[2] for s in shares for u in s.quota_use if u[0] == ns)
            for ns in ("ns0", "ns1")
        }
        quota = QuotaLedger(
            {(ns, "NVIDIA"): NamespaceQuota(used[ns] + 8 * GIB, 0, used[ns], 0) for ns in used}
        )
    engine = Engine(inventory.nodes.values(), {NODE: usage}, quota=quota)
    plan = plan_preemption(preemptor, engine, inventory, [NODE], Holdings(pods, shares))
    expected = reference(preemptor, engine, inventory, shares, pods)
    if isinstance(expected, str):
        assert not isinstance(plan, NodeVictims), plan
        assert plan.message == f"0/1 nodes are available: 1 {expected}."
    else:
        assert isinstance(plan, NodeVictims), (plan, expected)
        assert (tuple(v.uid for v in plan.victims), plan.freed) == expected
