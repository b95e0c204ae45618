"""The kube-scheduler stand-in's cache: a pod it placed is "assumed" from its cycle until
the watch shows it bound (or the binding failed), and an assumed pod is not scheduled
again, as kube-scheduler's skipPodSchedule does: an event for it in that window (its
status written by another component) must not lead to a second binding."""

from __future__ import annotations

from typing import Any

from simulator.standins.dra_scheduler_cache import SchedulerCache

SCHEDULER = "default-scheduler"
KEY = "default/worker"


def node(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"allocatable": {"pods": "110"}}}


def pod(node_name: str | None = None, condition: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": SCHEDULER, "containers": [{"name": "main"}]}
    if node_name:
        spec["nodeName"] = node_name
    status = {"conditions": [{"type": condition, "status": "True"}]} if condition else {}
    return {
        "metadata": {"name": "worker", "namespace": "default", "uid": "uid-1"},
        "spec": spec,
        "status": status,
    }


def cache_with_pending_pod() -> SchedulerCache:
    cache = SchedulerCache(SCHEDULER)
    cache.apply("nodes", "LIST", [node("node-a")])
    cache.apply("pods", "LIST", [pod()])
    return cache


def test_a_placed_pod_stays_assumed_through_other_updates_until_it_shows_bound() -> None:
    cache = cache_with_pending_pod()
    assert not cache.assumed(KEY)
    cache.assume(KEY, "node-a")
    cache.apply("pods", "MODIFIED", pod(condition="Ready"))
    assert cache.assumed(KEY) and cache.pending(cache.pods[KEY])
    cache.apply("pods", "MODIFIED", pod("node-a"))
    assert not cache.assumed(KEY)


def test_a_failed_binding_makes_the_pod_schedulable_again() -> None:
    cache = cache_with_pending_pod()
    cache.assume(KEY, "node-a")
    cache.forget(KEY)
    assert not cache.assumed(KEY)
