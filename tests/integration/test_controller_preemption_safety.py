"""Preemption's safety (issue 34, "Bad input and safety"), against the API emulator with
the real controller: a leader whose lease lapses just as it would preempt writes
nothing and a successor preempts from the cluster's state; a victim's delete refused
by the API is a Warning on the preemptor, evicts nothing beyond the plan, and a later
attempt succeeds. The setup (one 80 GiB GPU full of four 20 GiB priority-0 pods held
terminating by a finalizer) is test_controller_preemption_flow's; the replica under
leader election is test_controller_frozen_leader's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from controller_cluster import NAMESPACE, WAIT_S, Cluster, cluster, controller
from test_controller_frozen_leader import CONTROLLER, JumpingClock, first_of, replica, take_over
from test_controller_preemption_flow import (
    DOUBLE,
    HIGH,
    add_node,
    events,
    fill_the_gpu,
    pod,
    release,
    terminating,
)

from dra_driver.kube.leader import LeadershipLostError

POD_WRITES = ("pods", "pods/status")
"""The controller's writes a preemption makes: the nomination and the DisruptionTarget
condition (pods/status) and the victims' deletion (pods)."""


def pod_writes(c: Cluster) -> dict[str, int]:
    counts = c.server.audit.write_counts().get(CONTROLLER, {})
    return {resource: counts.get(resource, 0) for resource in POD_WRITES}


async def test_a_leader_whose_lease_lapses_as_it_would_preempt_writes_nothing(
    tmp_path: Path,
) -> None:
    """The old leader's clock jumps past its lease once the GPU is full and before the
    high-priority pod arrives: it drops the nomination and every eviction and steps
    down; the successor, from the cluster alone, preempts two victims and the
    preemptor is allocated once they are gone, so nothing is held for ever."""
    async with cluster(tmp_path) as c:
        await add_node(c)
        old_clock = JumpingClock()
        async with replica(c, "old", old_clock, retry_period_s=3600.0) as (old, old_task):
            async with asyncio.timeout(WAIT_S):
                await old.is_leader.wait()
            await fill_the_gpu(c)
            before = pod_writes(c)
            old_clock.jump(20.0)
            await c.add_pod_with_claim("high", DOUBLE, priorityClassName=HIGH)
            await first_of(old_task, c.wait_event("high", "Preempting"))
            assert pod_writes(c) == before
            assert old_task.done() and not old.is_leader.is_set()
            with pytest.raises(LeadershipLostError, match="write dropped, stepping down"):
                old_task.result()
            assert terminating(c) == []
            assert not pod(c, "high")["status"].get("nominatedNodeName")
            assert events(c, "Preempting") == []
        await take_over(c, "new")
        async with replica(c, "new", JumpingClock(), retry_period_s=0.05) as (new, _):
            async with asyncio.timeout(WAIT_S):
                await new.is_leader.wait()
            await c.wait_event("high", "Preempting")
            await c.pods.wait_for(lambda store: len(terminating(c)) == 2)
            assert pod(c, "high")["status"]["nominatedNodeName"] == "node-a"
            for name in terminating(c):
                await release(c, name)
            await c.wait_allocated("high-claim")
        assert len(events(c, "Preempted")) == 2


async def test_a_refused_victim_delete_is_a_warning_and_a_later_attempt_succeeds(
    tmp_path: Path,
) -> None:
    """The API refuses the first victim's delete (403): the plan stops there, nothing is
    evicted, the preemptor is told with a PreemptionFailed Warning and loses its
    nomination; the next attempt evicts exactly the two victims it needs and the
    preemptor is allocated once they are gone."""
    async with cluster(tmp_path) as c:
        await add_node(c)
        async with controller(c.client):
            await fill_the_gpu(c)
            rule = c.server.faults.fail(
                f"/namespaces/{NAMESPACE}/pods/low-", verb="DELETE", status=403, times=1
            )
            before = pod_writes(c)
            await c.add_pod_with_claim("high", DOUBLE, priorityClassName=HIGH)
            failed = await c.wait_event("high", "PreemptionFailed")
            assert failed["type"] == "Warning"
            assert f"could not preempt pod {NAMESPACE}/low-" in failed["message"]
            await c.wait_event("high", "Preempting")
            await c.pods.wait_for(lambda store: len(terminating(c)) == 2)
            assert rule.hits == 1
            # The refused delete never reached the audit (the fault answers first).
            assert pod_writes(c)["pods"] - before["pods"] == 2
            assert pod(c, "high")["status"]["nominatedNodeName"] == "node-a"
            assert len(events(c, "Preempted")) == 2
            for name in terminating(c):
                await release(c, name)
            await c.wait_allocated("high-claim")
            assert len(terminating(c)) == 0
