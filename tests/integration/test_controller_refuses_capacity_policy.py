"""The controller against the emulator refuses what kube-scheduler refuses: a claim asking
more cores than the published requestPolicy allows is never allocated (it used to get the
whole card's 100), and the pod's and the claim's events name the claim's request, the
capacity, the amount asked and the policy."""

from __future__ import annotations

from pathlib import Path

from controller_cluster import NAMESPACE, capacity, cluster, controller, request, results

CORES_REFUSED = (
    "ResourceClaim default/over-claim ({uid}) request gpu: capacity cores: request 101 is "
    "outside its requestPolicy {{validRange {{min: 0, max: 100, step: 1}}; default 0}}"
)


async def test_cores_above_the_policy_max_are_refused_with_a_reason_naming_it(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        claim = await c.add_claim("over-claim", request(**capacity(cores="101")))
        await c.add_pod("over")
        await c.add_pod_with_claim("full", request(**capacity(cores="100")))
        async with controller(c.client):
            on_claim = await c.wait_event("over-claim", "FilteringFailed")
            on_pod = await c.wait_event("over", "FilteringFailed")
            [full] = await c.wait_allocated("full-claim")
        refused = c.claims.store[f"{NAMESPACE}/over-claim"]
    expected = CORES_REFUSED.format(uid=claim["metadata"]["uid"])
    assert expected in on_claim["message"] and expected in on_pod["message"]
    assert on_claim["message"].startswith(
        "no available node, 1 nodes do not meet: 1 nodes CapacityRequestPolicyNotFit(node-a)"
    )
    assert on_claim["type"] == "Warning"
    assert not (refused.get("status") or {}).get("allocation")
    assert results(full)[0]["consumedCapacity"]["cores"] == "100"
