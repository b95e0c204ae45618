"""A kube-scheduler stand-in for the DRA path, driven through the official client.

It reproduces what a real v1.36 kube-scheduler did with claims allocated by a third
party (reference kubernetes-dra.md §2, "Verified on a real ..."): the pod goes to the
node of `allocation.nodeSelector`; PreBind adds the pod to `status.reservedFor` and, in
that same write, stamps an `allocationTimestamp` the allocator left out (the API server
refuses that as "field is immutable", so such a pod never binds); then `pods/binding`.
When the pod does not fit that node for another reason (taints, node selector,
unschedulable node, cpu/memory/pods), the claim stays allocated and unreserved and the
pod gets PodScheduled=False.

By default it never allocates claims itself (the controller-allocated mode: an
unallocated claim leaves the pod pending). With `SchedulerSettings(allocate=True)` it
also runs the structured-parameters allocator for the subset this driver publishes, so
the scheduler-allocated mode can be simulated. The allocation, the reservation and the
`resource.kubernetes.io/delete-protection` finalizer are written in PreBind, as
kube-scheduler does for claims it allocates.

This file owns the scheduling queue (poll, backoff) and one scheduling cycle (Filter
over every node, then PreBind and Bind on the first feasible one). It calls
node_fit.py for the per-node predicates, dra_allocator.py for the pure device
allocation, and dra_scheduler_api.py for every read and write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.api_time import api_time
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.process.runtime import wait_event
from simulator.standins.dra_allocator import (
    DeviceRequest,
    DeviceUsage,
    Pick,
    build_allocation,
    build_requests,
    device_usage,
    node_pool_devices,
    plan_allocation,
)
from simulator.standins.dra_scheduler_api import SchedulerAPI, api_message
from simulator.standins.node_fit import (
    CLAIM_NOT_ON_NODE,
    deallocatable,
    fit_failure,
    unavailable_claims,
)
from simulator.standins.scheduler_extender import FilterResult, unschedulable_message

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
CANNOT_ALLOCATE = "cannot allocate all claims"


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    """How the stand-in behaves.

    `allocate`: allocate unallocated claims itself (scheduler-allocated mode); off by
    default, because in the controller-allocated mode the controller is the only allocator.
    `poll_interval`: seconds between two listings of pending pods in `run`.
    `initial_backoff` / `max_backoff`: seconds a pod that did not fit waits before its next
    attempt, doubled per failure; kube-scheduler's podInitialBackoffSeconds (1) and
    podMaxBackoffSeconds (10).
    """

    scheduler_name: str = SCHEDULER_NAME
    allocate: bool = False
    poll_interval: float = 0.1
    initial_backoff: float = 1.0
    max_backoff: float = 10.0


@dataclass(frozen=True)
class SchedulingOutcome:
    """Where the pod went, or why it did not (the PodScheduled=False reason and message)."""

    node: str | None
    reason: str | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class _AllocationContext:
    """What one scheduling cycle allocates from: read once, tried on every node."""

    requests: Sequence[DeviceRequest]
    classes: Mapping[str, Mapping[str, Any]]
    slices: Sequence[Mapping[str, Any]]
    usage: DeviceUsage


class DRAScheduler:
    """Schedules one pod at a time through the API, like kube-scheduler's DRA path."""

    def __init__(
        self,
        api_client: k8s.ApiClient,
        scheduler_name: str = SCHEDULER_NAME,
        *,
        settings: SchedulerSettings | None = None,
    ) -> None:
        self.api = SchedulerAPI(api_client)
        self.settings = settings or SchedulerSettings(scheduler_name=scheduler_name)
        self.scheduler_name = self.settings.scheduler_name

    async def run(self, stop: asyncio.Event) -> None:
        """Schedule this scheduler's unbound pods until `stop` is set.

        Pending pods are listed every `poll_interval`; a pod that did not fit (or whose
        cycle failed on an API error) waits an exponential backoff before its next try,
        like kube-scheduler's backoff queue.
        """
        loop = asyncio.get_running_loop()
        backoff: dict[str, tuple[float, float]] = {}
        selector = f"spec.nodeName=,spec.schedulerName={self.scheduler_name}"
        while not stop.is_set():
            try:
                listed = await self.api.read(
                    self.api.core.list_pod_for_all_namespaces, field_selector=selector
                )
            except ApiException as error:
                log.warning("listing pending pods failed", extra={"error": str(error)})
                listed = {"items": []}
            pending = [p for p in listed["items"] if not p["metadata"].get("deletionTimestamp")]
            for pod in pending:
                if stop.is_set():
                    break
                uid = pod["metadata"]["uid"]
                retry_at, delay = backoff.get(uid, (0.0, 0.0))
                if retry_at > loop.time():
                    continue
                metadata = pod["metadata"]
                try:
                    outcome = await self.schedule(metadata["namespace"], metadata["name"])
                except ApiException as error:
                    outcome = SchedulingOutcome(None, "SchedulerError", api_message(error))
                if outcome.node is not None:
                    backoff.pop(uid, None)
                    continue
                delay = min(delay * 2, self.settings.max_backoff) or self.settings.initial_backoff
                backoff[uid] = (loop.time() + delay, delay)
                log.info(
                    "pod not scheduled",
                    extra={"pod": f"{metadata['namespace']}/{metadata['name']}", "retry_in": delay},
                )
            live = {p["metadata"]["uid"] for p in pending}
            for uid in [u for u in backoff if u not in live]:
                del backoff[uid]
            await wait_event(stop, self.settings.poll_interval)

    async def schedule(self, namespace: str, name: str) -> SchedulingOutcome:
        """One scheduling cycle for the pod; the outcome is also written to the pod."""
        pod = await self.api.read(self.api.core.read_namespaced_pod, name, namespace)
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != self.scheduler_name:
            return SchedulingOutcome(spec.get("nodeName"))
        claims = []
        for claim_name in pod_claim_names(pod).values():
            if claim_name is None:
                return await self._reject(pod, "SchedulerError", "waiting for resource claim")
            claims.append(
                await self.api.read(
                    self.api.resource.read_namespaced_resource_claim, claim_name, namespace
                )
            )
        unallocated = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        context = None
        if self.settings.allocate and unallocated:
            try:
                context = await self._allocation_context(unallocated)
            except InvalidParameterError as error:
                return await self._reject(pod, "SchedulerError", str(error))
        nodes = (await self.api.read(self.api.core.list_node))["items"]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        feasible: list[tuple[str, list[Pick]]] = []
        unavailable: set[int] = set()
        for node in nodes:
            picks: list[Pick] = []
            reason = await self._fit(pod, node)
            if reason is None:
                missing = unavailable_claims(node, claims)
                if missing:
                    unavailable.update(missing)
                    reason = CLAIM_NOT_ON_NODE, False
            if reason is None and unallocated:
                planned = None
                if context is not None:
                    devices = node_pool_devices(context.slices, node)
                    try:
                        planned = plan_allocation(context.requests, devices, context.usage)
                    except InvalidParameterError as error:
                        return await self._reject(pod, "SchedulerError", str(error))
                if planned is None:
                    reason = CANNOT_ALLOCATE, False
                else:
                    picks = planned
            if reason is None:
                feasible.append((node["metadata"]["name"], picks))
            elif reason[1]:
                failed[node["metadata"]["name"]] = reason[0]
            else:
                unresolvable[node["metadata"]["name"]] = reason[0]
        if not feasible:
            await self._post_filter(pod, [claims[i] for i in sorted(unavailable)])
            message = unschedulable_message(len(nodes), FilterResult([], failed, unresolvable))
            return await self._reject(pod, "Unschedulable", message)
        node_name, picks = feasible[0]
        allocations = {
            id(claim): build_allocation(
                claim,
                [p for p in picks if p.request.claim == index],
                context.classes,
                node_name,
                api_time(),
            )
            for index, claim in enumerate(unallocated)
            if context is not None
        }
        try:
            for claim in claims:
                allocation = allocations.get(id(claim))
                if allocation is None:
                    await self.api.write_reservation(claim, pod)
                else:
                    await self.api.write_allocation(claim, allocation, pod)
        except ApiException as error:
            message = f'running PreBind plugin "DynamicResources": {api_message(error)}'
            return await self._reject(pod, "SchedulerError", message)
        await self.api.write_binding(pod, node_name)
        return SchedulingOutcome(node_name)

    async def _post_filter(
        self, pod: dict[str, Any], unavailable: Sequence[dict[str, Any]]
    ) -> None:
        """DynamicResources' PostFilter: deallocate ONE unavailable claim nobody else reserved,
        so that it can be allocated again where the pod fits (an API error is logged: the
        cycle ends Unschedulable either way)."""
        for claim in unavailable:
            if deallocatable(claim, pod["metadata"]["uid"]):
                try:
                    await self.api.write_deallocation(claim)
                except ApiException as error:
                    log.warning(
                        "deallocating an unavailable claim failed",
                        extra={"claim": claim["metadata"]["name"], "error": api_message(error)},
                    )
                return

    async def _allocation_context(
        self, unallocated: Sequence[dict[str, Any]]
    ) -> _AllocationContext:
        listed_classes = await self.api.read(self.api.resource.list_device_class)
        classes = {c["metadata"]["name"]: c for c in listed_classes["items"]}
        requests = build_requests(unallocated, classes)
        slices = (await self.api.read(self.api.resource.list_resource_slice))["items"]
        every_claim = await self.api.read(self.api.resource.list_resource_claim_for_all_namespaces)
        return _AllocationContext(requests, classes, slices, device_usage(every_claim["items"]))

    async def _fit(self, pod: dict[str, Any], node: dict[str, Any]) -> tuple[str, bool] | None:
        node_name = node["metadata"]["name"]
        listed = await self.api.read(
            self.api.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node_name}"
        )
        on_node = [
            p
            for p in listed["items"]
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        return fit_failure(pod, node, on_node)

    async def _reject(self, pod: dict[str, Any], reason: str, message: str) -> SchedulingOutcome:
        await self.api.write_unscheduled(pod, reason, message)
        return SchedulingOutcome(None, reason, message)
