"""The controller's process parts against the emulator: leader election on a Lease, the
event recorder, the API check that refuses an unsuitable cluster, and the metrics."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from controller_cluster import NAMESPACE, capacity, cluster, controller, request
from prometheus_client import CollectorRegistry

from controller.service import ApiUnsupportedError, check_api, slice_feature_problems
from dra_driver.kube.events import WARNING, EventRecorder, EventSettings, involved_object
from dra_driver.kube.informer import Informer
from dra_driver.kube.leader import LeaderElector, LeaderSettings, LeadershipLostError
from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.apiserver.registry import RESOURCES, Registry

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"
MICRO_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def elector(
    client: KubeClient, identity: str, clock: Callable[[], float] = time.monotonic
) -> LeaderElector:
    settings = LeaderSettings(
        NAMESPACE, "lock", identity, lease_duration_s=1.0, renew_deadline_s=0.6, retry_period_s=0.1
    )
    return LeaderElector(client, settings, clock)


class CandidateClock:
    """A candidate's clock, moved by the test: still while the leader renews (a slow
    renewal never looks like an expired lease), then a lease duration further at every
    reading (the lease it last saw has expired, whenever it last looked)."""

    def __init__(self) -> None:
        self.now = 0.0
        self.running = False

    def __call__(self) -> float:
        if self.running:
            self.now += 2.0
        return self.now


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield server, client
        finally:
            await client.aclose()


async def test_one_leader_at_a_time_and_a_takeover_after_the_lease_expires(api) -> None:
    _, client = api
    leases = Informer(client, LEASES)
    watching = asyncio.create_task(leases.run())
    # The leader's clock stands still: however slow its renewals, none misses the deadline.
    second_clock = CandidateClock()
    first = elector(client, "first", clock=lambda: 0.0)
    second = elector(client, "second", clock=second_clock)
    leading: list[str] = []
    forever = asyncio.Event()

    def work(name: str):
        async def run() -> None:
            leading.append(name)
            await forever.wait()

        return run

    first_task = asyncio.create_task(first.run(work("first")))
    try:
        async with asyncio.timeout(10):
            await first.is_leader.wait()
        second_task = asyncio.create_task(second.run(work("second")))
        renewals: set[str] = set()

        def renewed_three_times(store: dict[str, Any]) -> bool:
            renewals.add(store.get(f"{NAMESPACE}/lock", {}).get("spec", {}).get("renewTime", ""))
            return len(renewals) >= 4

        async with asyncio.timeout(10):
            await leases.wait_for(renewed_three_times)
        assert leading == ["first"] and not second.is_leader.is_set()
        first_task.cancel()
        await asyncio.gather(first_task, return_exceptions=True)
        second_clock.running = True
        async with asyncio.timeout(10):
            await second.is_leader.wait()
        lease = await client.get(f"{LEASES}/lock")
        second_task.cancel()
        await asyncio.gather(second_task, return_exceptions=True)
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)
    assert leading == ["first", "second"]
    spec = lease["spec"]
    assert spec["holderIdentity"] == "second" and spec["leaseTransitions"] == 1
    assert MICRO_TIME.fullmatch(spec["renewTime"]) and MICRO_TIME.fullmatch(spec["acquireTime"])


async def test_a_leader_that_cannot_renew_stops_working(api) -> None:
    server, client = api
    leader = elector(client, "only")
    stopped = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            stopped.set()

    task = asyncio.create_task(leader.run(work))
    async with asyncio.timeout(10):
        await leader.is_leader.wait()
    server.faults.fail("/leases/lock", verb="PUT", status=500, times=1000)
    with pytest.raises(LeadershipLostError):
        async with asyncio.timeout(10):
            await task
    assert stopped.is_set() and not leader.is_leader.is_set()


async def test_a_renewal_the_api_server_holds_ends_at_the_renew_deadline(
    api, caplog: pytest.LogCaptureFixture
) -> None:
    """etcd down: the API server holds the renewal. The leader must step down when its
    renew deadline passes, not when the request's own 30 s timeout does (past its lease,
    with a successor already leading)."""
    server, client = api
    leader = elector(client, "only")
    task = asyncio.create_task(leader.run(asyncio.Event().wait))
    async with asyncio.timeout(10):
        await leader.is_leader.wait()
    server.faults.hang("/leases/lock", verb="PUT", times=1000)
    with pytest.raises(LeadershipLostError, match="lost by only"):
        async with asyncio.timeout(60):
            await task
    messages = [r.getMessage() for r in caplog.records if r.name == "dra_driver.kube.leader"]
    assert "lease renewal unanswered at the renew deadline" in messages
    assert "lease renewal failed" not in messages


async def test_a_lost_lease_makes_the_replica_a_candidate_again_not_an_exit(api) -> None:
    server, client = api
    leader = elector(client, "only")
    started = [asyncio.Event(), asyncio.Event()]
    ended = [asyncio.Event(), asyncio.Event()]
    terms = 0

    async def work() -> None:
        nonlocal terms
        term, terms = terms, terms + 1
        started[term].set()
        try:
            await asyncio.Event().wait()
        finally:
            ended[term].set()

    task = asyncio.create_task(leader.campaign(work))
    try:
        async with asyncio.timeout(10):
            await started[0].wait()
        rule = server.faults.fail("/leases/lock", verb="PUT", status=500, times=1000)
        async with asyncio.timeout(30):
            await ended[0].wait()
        rule.remaining = 0
        async with asyncio.timeout(30):
            await started[1].wait()
        still_campaigning = not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert still_campaigning and terms == 2


async def test_repeated_events_are_folded_into_one_with_a_count(api) -> None:
    _, client = api
    recorder = EventRecorder(client, EventSettings(component="vgpu-dra-controller"))
    recorder.start()
    pod = {"metadata": {"name": "p", "namespace": NAMESPACE, "uid": "u-1"}}
    reference = involved_object(pod, "Pod", "v1")
    try:
        for _ in range(3):
            recorder.emit(reference, WARNING, "FilteringFailed", "no available node")
        recorder.emit(reference, WARNING, "FilteringFailed", "something else")
        async with asyncio.timeout(10):
            await recorder.wait_idle()
    finally:
        await recorder.aclose()
    events = (await client.list(f"/api/v1/namespaces/{NAMESPACE}/events"))["items"]
    counts = sorted((e["message"], e["count"]) for e in events)
    assert counts == [("no available node", 3), ("something else", 1)]
    assert events[0]["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "p",
        "namespace": NAMESPACE,
        "uid": "u-1",
    }


async def test_the_api_check_refuses_a_cluster_without_resource_v1(tmp_path: Path) -> None:
    registry = Registry(tuple(r for r in RESOURCES if r.group != "resource.k8s.io"))
    async with APIServer(registry=registry) as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "k"))
        try:
            with pytest.raises(ApiUnsupportedError, match=r"does not serve resource.k8s.io/v1"):
                await check_api(client)
        finally:
            await client.aclose()


async def test_the_api_check_accepts_the_emulator(api) -> None:
    _, client = api
    await check_api(client)


def test_slices_stripped_by_disabled_feature_gates_are_reported() -> None:
    stripped = [{"spec": {"driver": "vgpu.hami.io", "devices": [{"name": "gpu-0"}]}}]
    problems = slice_feature_problems(stripped, "vgpu.hami.io")
    assert len(problems) == 2
    assert "DRAConsumableCapacity" in problems[0] and "DRADeviceTaints" in problems[1]
    intact = [
        {
            "spec": {
                "driver": "vgpu.hami.io",
                "devices": [{"name": "gpu-0", "allowMultipleAllocations": True, "taints": [{}]}],
            }
        }
    ]
    assert slice_feature_problems(intact, "vgpu.hami.io") == []


async def test_metrics_show_hamis_device_series_and_the_controllers_own(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_pod_with_claim("m", request(**capacity(memory="10Gi", cores="30")))
        async with controller(c.client, registry=registry) as running:
            await c.wait_allocated("m-claim")
            running.publish_view()
            device = {
                "node": "node-a",
                "device_uuid": "GPU-node-a-0",
                "device_index": "0",
                "device_type": "NVIDIA-A100-SXM4-80GB",
                "zone": "vGPU",
            }
            sample = registry.get_sample_value
            limit = sample("hami_gpu_memory_limit_bytes", device)
            allocated = sample("hami_gpu_memory_allocated_bytes", {**device, "device_cores": "100"})
            cores = sample("hami_gpu_core_allocated_ratio", device)
            shared = sample("hami_gpu_shared_count", device)
            share = {
                "namespace": NAMESPACE,
                "node": "node-a",
                "pod": "m",
                "container_index": "0",
                "device_uuid": "GPU-node-a-0",
                "zone": "vGPU",
            }
            vgpu_memory = sample("hami_vgpu_memory_allocated_bytes", share)
            allocations = sample("vgpu_controller_allocations_total")
            decisions = sample("vgpu_controller_decision_seconds_count")
    assert limit == 80 * 2**30 and allocated == 10 * 2**30
    assert cores == 30 and shared == 1 and vgpu_memory == 10 * 2**30
    assert allocations == 1 and decisions is not None and decisions >= 1


async def test_metrics_show_hamis_quota_series(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.client.create(
            f"/api/v1/namespaces/{NAMESPACE}/resourcequotas",
            {
                "metadata": {"name": "gpu"},
                "spec": {
                    "hard": {
                        "limits.nvidia.com/gpumem": "20000",
                        "limits.nvidia.com/gpucores": "100",
                    }
                },
            },
        )
        await c.add_pod_with_claim("q", request(**capacity(memory="10Gi", cores="30")))
        async with controller(c.client, registry=registry) as running:
            await c.wait_allocated("q-claim")
            running.publish_view()
            sample = registry.get_sample_value
            memory = {"namespace": NAMESPACE, "quota_name": "nvidia.com/gpumem", "zone": "vGPU"}
            cores = {"namespace": NAMESPACE, "quota_name": "nvidia.com/gpucores", "zone": "vGPU"}
            memory_used = sample("hami_resource_quota_used", {**memory, "limit": "20000"})
            memory_limit = sample("hami_resource_quota_limit", memory)
            cores_used = sample("hami_resource_quota_used", {**cores, "limit": "100"})
    assert (memory_used, memory_limit, cores_used) == (10240, 20000, 30)
