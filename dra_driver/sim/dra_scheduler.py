"""A kube-scheduler stand-in for the DRA path, driven through the official client.

It reproduces what a real v1.36 kube-scheduler did with claims allocated by a third
party (reference kubernetes-dra.md §2, "Verified on a real ..."): the pod goes to the
node of `allocation.nodeSelector`; PreBind adds the pod to `status.reservedFor` and, in
that same write, stamps an `allocationTimestamp` the allocator left out (the API server
refuses that as "field is immutable", so such a pod never binds); then `pods/binding`.
When the pod does not fit that node for another reason (taints, node selector,
unschedulable node, cpu/memory/pods), the claim stays allocated and unreserved and the
pod gets PodScheduled=False. It never allocates claims itself, so it never hands out a
device at all, tainted or not: an unallocated claim leaves the pod pending.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from dra_driver.sim.admission import quantity_value
from dra_driver.sim.scheduler_extender import FilterResult, unschedulable_message

SCHEDULER_NAME = "default-scheduler"
CLAIM_NOT_ON_NODE = "resourceclaim not available on the node"
CANNOT_ALLOCATE = "cannot allocate all claims"
NODE_UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"


@dataclass(frozen=True)
class SchedulingOutcome:
    """Where the pod went, or why it did not (the PodScheduled=False reason and message)."""

    node: str | None
    reason: str | None = None
    message: str = ""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def claim_names(pod: dict[str, Any]) -> dict[str, str | None]:
    """Pod claim entry -> ResourceClaim name (None while a template's claim is not made)."""
    generated = {
        s["name"]: s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names: dict[str, str | None] = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        names[entry["name"]] = entry.get("resourceClaimName") or generated.get(entry["name"])
    return names


def _requirement_met(requirement: dict[str, Any], value: str | None) -> bool:
    operator, values = requirement["operator"], requirement.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or not values:
        return False
    if operator == "Gt":
        return int(value) > int(values[0])
    return operator == "Lt" and int(value) < int(values[0])


def node_matches_selector(node: dict[str, Any], selector: dict[str, Any] | None) -> bool:
    """A v1 NodeSelector: terms are ORed; expressions and fields within a term ANDed."""
    if not selector:
        return True
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        matched_fields = term.get("matchFields") or []
        if not expressions and not matched_fields:
            continue
        if all(_requirement_met(r, labels.get(r["key"])) for r in expressions) and all(
            _requirement_met(r, fields.get(r["key"])) for r in matched_fields
        ):
            return True
    return False


def _tolerates(toleration: dict[str, Any], taint: dict[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


def untolerated_taint(node: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any] | None:
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") not in ("NoSchedule", "NoExecute"):
            continue
        if not any(_tolerates(t, taint) for t in tolerations):
            return taint
    return None


def pod_requests(pod: dict[str, Any]) -> dict[str, Decimal]:
    """Effective requests: the larger of the app containers' sum and any init container."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + quantity_value(quantity)
    for container in spec.get("initContainers") or []:
        for name, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Decimal(0)), quantity_value(quantity))
    return total


def fit_failure(
    pod: dict[str, Any], node: dict[str, Any], pods_on_node: Sequence[dict[str, Any]]
) -> tuple[str, bool] | None:
    """The first failing predicate as (reason, resolvable by preemption), or None."""
    if (node.get("spec") or {}).get("unschedulable"):
        return NODE_UNSCHEDULABLE, False
    taint = untolerated_taint(node, pod)
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint['key']}: {taint.get('value', '')}}}", False
    labels = node["metadata"].get("labels") or {}
    wanted = (pod.get("spec") or {}).get("nodeSelector") or {}
    if any(labels.get(k) != v for k, v in wanted.items()):
        return SELECTOR_MISMATCH, False
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    if "pods" in allocatable and len(pods_on_node) + 1 > quantity_value(allocatable["pods"]):
        return TOO_MANY_PODS, True
    used: dict[str, Decimal] = {}
    for other in pods_on_node:
        for name, amount in pod_requests(other).items():
            used[name] = used.get(name, Decimal(0)) + amount
    for name, amount in sorted(pod_requests(pod).items()):
        if name in allocatable and used.get(name, Decimal(0)) + amount > quantity_value(
            allocatable[name]
        ):
            return f"Insufficient {name}", True
    return None


class DRAScheduler:
    """Schedules one pod at a time through the API, like kube-scheduler's DRA path."""

    def __init__(self, api_client: k8s.ApiClient, scheduler_name: str = SCHEDULER_NAME) -> None:
        self.core = k8s.CoreV1Api(api_client)
        self.resource = k8s.ResourceV1Api(api_client)
        self.scheduler_name = scheduler_name

    async def _read(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        response = await asyncio.to_thread(method, *args, _preload_content=False, **kwargs)
        return json.loads(response.data)

    async def schedule(self, namespace: str, name: str) -> SchedulingOutcome:
        """One scheduling cycle for the pod; the outcome is also written to the pod."""
        pod = await self._read(self.core.read_namespaced_pod, name, namespace)
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != self.scheduler_name:
            return SchedulingOutcome(spec.get("nodeName"))
        claims = []
        for claim_name in claim_names(pod).values():
            if claim_name is None:
                return await self._reject(pod, "SchedulerError", "waiting for resource claim")
            claims.append(
                await self._read(
                    self.resource.read_namespaced_resource_claim, claim_name, namespace
                )
            )
        nodes = (await self._read(self.core.list_node))["items"]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        feasible = []
        for node in nodes:
            reason = await self._filter(pod, node, claims)
            if reason is None:
                feasible.append(node["metadata"]["name"])
            elif reason[1]:
                failed[node["metadata"]["name"]] = reason[0]
            else:
                unresolvable[node["metadata"]["name"]] = reason[0]
        if not feasible:
            message = unschedulable_message(len(nodes), FilterResult([], failed, unresolvable))
            return await self._reject(pod, "Unschedulable", message)
        node_name = feasible[0]
        try:
            for claim in claims:
                await self._reserve(claim, pod)
        except ApiException as error:
            message = f'running PreBind plugin "DynamicResources": {_api_message(error)}'
            return await self._reject(pod, "SchedulerError", message)
        await self._bind(pod, node_name)
        return SchedulingOutcome(node_name)

    async def _filter(
        self, pod: dict[str, Any], node: dict[str, Any], claims: Sequence[dict[str, Any]]
    ) -> tuple[str, bool] | None:
        node_name = node["metadata"]["name"]
        for claim in claims:
            allocation = (claim.get("status") or {}).get("allocation")
            if allocation is None:
                return CANNOT_ALLOCATE, False
            if not node_matches_selector(node, allocation.get("nodeSelector")):
                return CLAIM_NOT_ON_NODE, False
        listed = await self._read(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node_name}"
        )
        on_node = [
            p
            for p in listed["items"]
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        return fit_failure(pod, node, on_node)

    async def _reserve(self, claim: dict[str, Any], pod: dict[str, Any]) -> None:
        status = claim["status"]
        reserved = status.setdefault("reservedFor", [])
        if any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
            return
        reserved.append(
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        )
        status["allocation"].setdefault("allocationTimestamp", _now())
        metadata = claim["metadata"]
        await asyncio.to_thread(
            self.resource.replace_namespaced_resource_claim_status,
            metadata["name"],
            metadata["namespace"],
            claim,
            _preload_content=False,
        )

    async def _bind(self, pod: dict[str, Any], node_name: str) -> None:
        metadata = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        await asyncio.to_thread(
            self.core.create_namespaced_pod_binding,
            metadata["name"],
            metadata["namespace"],
            binding,
            _preload_content=False,
        )

    async def _reject(self, pod: dict[str, Any], reason: str, message: str) -> SchedulingOutcome:
        status = pod.setdefault("status", {})
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": _now(),
            "reason": reason,
            "message": message,
        }
        others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        status["conditions"] = [*others, condition]
        metadata = pod["metadata"]
        await asyncio.to_thread(
            self.core.replace_namespaced_pod_status,
            metadata["name"],
            metadata["namespace"],
            pod,
            _preload_content=False,
        )
        return SchedulingOutcome(None, reason, message)


def _api_message(error: ApiException) -> str:
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except json.JSONDecodeError:
        return str(error.body or error.reason)
