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
the scheduler-allocated mode can be simulated: devices of complete, newest-generation
pools on the node, matched by DeviceClass and request selectors (CEL, via dra_cel), never
one with a NoSchedule/NoExecute taint the request does not tolerate, and consumable
capacity rounded up by each capacity's requestPolicy and summed over every allocated
claim. The allocation, the reservation and the `resource.kubernetes.io/delete-protection`
finalizer are written in PreBind, as kube-scheduler does for claims it allocates.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from api.quantity import QuantityError, format_quantity_value, parse_quantity
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.api_time import api_time
from dra_driver.objects.dra_cel import CelCompileError, cel_device_from_slice, compile_selector
from dra_driver.objects.node_predicates import (
    NODE_UNSCHEDULABLE,
    SELECTOR_MISMATCH,
    TOO_MANY_PODS,
    node_selector_matches,
    pod_resource_requests,
    round_up_request,
    untolerated_taint,
)
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.resource_api import DELETE_PROTECTION
from dra_driver.process.runtime import wait_event
from simulator.standins.admission import quantity_value
from simulator.standins.scheduler_extender import FilterResult, unschedulable_message

log = logging.getLogger(__name__)

SCHEDULER_NAME = "default-scheduler"
CLAIM_NOT_ON_NODE = "resourceclaim not available on the node"
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


def pod_untolerated_taint(node: dict[str, Any], pod: dict[str, Any]) -> Mapping[str, Any] | None:
    """The node's first NoSchedule/NoExecute taint the pod does not tolerate."""
    return untolerated_taint(
        (node.get("spec") or {}).get("taints") or [],
        (pod.get("spec") or {}).get("tolerations") or [],
    )


def fit_failure(
    pod: dict[str, Any], node: dict[str, Any], pods_on_node: Sequence[dict[str, Any]]
) -> tuple[str, bool] | None:
    """The first failing predicate as (reason, resolvable by preemption), or None."""
    if (node.get("spec") or {}).get("unschedulable"):
        return NODE_UNSCHEDULABLE, False
    taint = pod_untolerated_taint(node, pod)
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
        for name, amount in pod_resource_requests(other).items():
            used[name] = used.get(name, Decimal(0)) + amount
    for name, amount in sorted(pod_resource_requests(pod).items()):
        if name in allocatable and used.get(name, Decimal(0)) + amount > quantity_value(
            allocatable[name]
        ):
            return f"Insufficient {name}", True
    return None


def claim_failure(
    node: dict[str, Any], claims: Sequence[Mapping[str, Any]]
) -> tuple[str, bool] | None:
    """An allocated claim the node cannot reach (Filter's first check, before allocating)."""
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is not None and not node_selector_matches(
            node, allocation.get("nodeSelector")
        ):
            return CLAIM_NOT_ON_NODE, False
    return None


# ---- structured-parameters allocation (pure) ----------------------------------------

DeviceKey = tuple[str, str, str]
DeviceMatcher = Callable[[str, Mapping[str, Any]], bool]


def unqualified(name: str, driver: str) -> str:
    """An attribute or capacity name without the driver's own domain, which is implied."""
    prefix = f"{driver}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def selectors_matcher(selectors: Sequence[Mapping[str, Any]], field_path: str) -> DeviceMatcher:
    """All the selectors' CEL expressions (dra_cel, as kube-scheduler evaluates them).

    An expression that does not compile raises InvalidParameterError naming the field;
    one that fails on a device raises CelEvaluationError, which fails the allocation, as
    a CEL runtime error does in kube-scheduler.
    """
    compiled = []
    for index, selector in enumerate(selectors):
        expression = (selector.get("cel") or {}).get("expression") or ""
        try:
            compiled.append(compile_selector(expression))
        except CelCompileError as error:
            raise InvalidParameterError(
                f"{field_path}[{index}].cel.expression", error.reason
            ) from error

    def matches(driver: str, device: Mapping[str, Any]) -> bool:
        view = cel_device_from_slice(driver, device)
        return all(selector.matches(view) for selector in compiled)

    return matches


def untolerated_device_taint(
    device: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The first NoSchedule/NoExecute taint of the device no toleration of the request covers."""
    taint = untolerated_taint(device.get("taints") or [], tolerations)
    return dict(taint) if taint is not None else None


@dataclass(frozen=True, slots=True)
class PoolDevice:
    """One device of a usable pool, as the slice publishes it."""

    driver: str
    pool: str
    spec: Mapping[str, Any]

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, str(self.spec["name"]))

    @property
    def shared(self) -> bool:
        return bool(self.spec.get("allowMultipleAllocations"))


def _slice_on_node(spec: Mapping[str, Any], node: dict[str, Any]) -> bool:
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node["metadata"]["name"])
    if spec.get("allNodes"):
        return True
    selector = spec.get("nodeSelector")
    return selector is not None and node_selector_matches(node, dict(selector))


def node_pool_devices(
    slices: Sequence[Mapping[str, Any]], node: dict[str, Any]
) -> list[PoolDevice]:
    """The devices the node can use: per pool, only the newest generation, only if complete."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if _slice_on_node(spec, node):
            pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    devices: list[PoolDevice] = []
    for (driver, pool), specs in pools.items():
        newest = max(int(s["pool"]["generation"]) for s in specs)
        current = [s for s in specs if int(s["pool"]["generation"]) == newest]
        if len(current) != int(current[0]["pool"]["resourceSliceCount"]):
            continue
        for spec in current:
            devices.extend(PoolDevice(driver, pool, d) for d in spec.get("devices") or [])
    return devices


@dataclass
class DeviceUsage:
    """What the allocated claims hold: whole devices (results without shareID) and, per
    shared device, the consumed capacity summed over its shares (unqualified names)."""

    dedicated: set[DeviceKey] = field(default_factory=set)
    consumed: dict[DeviceKey, dict[str, Decimal]] = field(default_factory=dict)


def device_usage(claims: Sequence[Mapping[str, Any]]) -> DeviceUsage:
    usage = DeviceUsage()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (result["driver"], result["pool"], result["device"])
            if not result.get("shareID"):
                usage.dedicated.add(key)
                continue
            totals = usage.consumed.setdefault(key, {})
            for name, quantity in (result.get("consumedCapacity") or {}).items():
                try:
                    amount = parse_quantity(str(quantity))
                except QuantityError:
                    log.warning("unreadable consumedCapacity", extra={"device": key, "name": name})
                    continue
                short = unqualified(name, result["driver"])
                totals[short] = totals.get(short, Decimal(0)) + amount
    return usage


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One `exactly` request of an unallocated claim, with its selectors compiled."""

    claim: int
    name: str
    device_class: str
    matches: DeviceMatcher
    count: int | None
    tolerations: tuple[Mapping[str, Any], ...]
    capacity: Mapping[str, Decimal]


def build_requests(
    claims: Sequence[Mapping[str, Any]], classes: Mapping[str, Mapping[str, Any]]
) -> list[DeviceRequest]:
    """The requests of the claims to allocate; a class that does not exist matches nothing."""
    requests = []
    for index, claim in enumerate(claims):
        where = f"ResourceClaim {claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
        for position, request in enumerate(claim["spec"]["devices"].get("requests") or []):
            path = f"{where} spec.devices.requests[{position}]"
            exactly = request.get("exactly")
            if exactly is None:
                raise InvalidParameterError(
                    f"{path}.firstAvailable", "not supported by the kube-scheduler stand-in"
                )
            class_name = exactly["deviceClassName"]
            device_class = classes.get(class_name)
            if device_class is None:
                matches: DeviceMatcher = lambda driver, device: False  # noqa: E731
            else:
                by_class = selectors_matcher(
                    (device_class.get("spec") or {}).get("selectors") or [],
                    f'DeviceClass "{class_name}" spec.selectors',
                )
                by_request = selectors_matcher(
                    exactly.get("selectors") or [], f"{path}.exactly.selectors"
                )
                matches = _both(by_class, by_request)
            try:
                capacity = {
                    name: parse_quantity(str(quantity))
                    for name, quantity in (
                        (exactly.get("capacity") or {}).get("requests") or {}
                    ).items()
                }
            except QuantityError as error:
                raise InvalidParameterError(f"{path}.exactly.capacity", str(error)) from error
            all_devices = exactly.get("allocationMode") == "All"
            requests.append(
                DeviceRequest(
                    claim=index,
                    name=request["name"],
                    device_class=class_name,
                    matches=matches,
                    count=None if all_devices else int(exactly.get("count") or 1),
                    tolerations=tuple(exactly.get("tolerations") or ()),
                    capacity=capacity,
                )
            )
    return requests


def _both(first: DeviceMatcher, second: DeviceMatcher) -> DeviceMatcher:
    return lambda driver, device: first(driver, device) and second(driver, device)


@dataclass(frozen=True, slots=True)
class _Option:
    """A device that can serve a request, with what one share of it would take."""

    device: PoolDevice
    take: Mapping[str, Decimal] | None
    limits: Mapping[str, Decimal]


@dataclass(frozen=True, slots=True)
class Pick:
    """One device chosen for one request; `consumed` is None for a dedicated device."""

    request: DeviceRequest
    device: PoolDevice
    consumed: Mapping[str, Decimal] | None


def _option(device: PoolDevice, request: DeviceRequest) -> _Option | None:
    capacities = {
        unqualified(k, device.driver): v for k, v in (device.spec.get("capacity") or {}).items()
    }
    wanted = {unqualified(k, device.driver): v for k, v in request.capacity.items()}
    if any(name not in capacities for name in wanted):
        return None
    try:
        limits = {name: parse_quantity(str(c["value"])) for name, c in capacities.items()}
        if not device.shared:
            fits = all(amount <= limits[name] for name, amount in wanted.items())
            return _Option(device, None, limits) if fits else None
        take: dict[str, Decimal] = {}
        for name, capacity in capacities.items():
            policy = capacity.get("requestPolicy")
            if name in wanted:
                amount = round_up_request(wanted[name], policy)
                if amount is None:
                    return None
            elif policy and policy.get("default") is not None:
                amount = parse_quantity(str(policy["default"]))
            else:
                amount = limits[name]
            take[name] = amount
    except QuantityError:
        return None
    return _Option(device, take, limits)


def plan_allocation(
    requests: Sequence[DeviceRequest], devices: Sequence[PoolDevice], usage: DeviceUsage
) -> list[Pick] | None:
    """Devices for every request, or None: a depth-first search over the requests' device
    slots (distinct devices within a request), backtracking when capacity runs out."""
    slots: list[tuple[DeviceRequest, list[_Option]]] = []
    for request in requests:
        options = []
        for device in devices:
            if device.key in usage.dedicated or (
                not device.shared and device.key in usage.consumed
            ):
                continue
            if not request.matches(device.driver, device.spec):
                continue
            if untolerated_device_taint(device.spec, request.tolerations) is not None:
                continue
            option = _option(device, request)
            if option is not None:
                options.append(option)
        count = len(options) if request.count is None else request.count
        if count == 0:
            return None
        slots.extend((request, options) for _ in range(count))
    used = {key: dict(amounts) for key, amounts in usage.consumed.items()}
    return _search(slots, 0, used, set(), [])


def _search(
    slots: Sequence[tuple[DeviceRequest, Sequence[_Option]]],
    index: int,
    used: dict[DeviceKey, dict[str, Decimal]],
    whole: set[DeviceKey],
    chosen: list[Pick],
) -> list[Pick] | None:
    if index == len(slots):
        return list(chosen)
    request, options = slots[index]
    for option in options:
        key = option.device.key
        if key in whole or any(p.request is request and p.device.key == key for p in chosen):
            continue
        if option.take is None:
            if key in used:
                continue
            whole.add(key)
            chosen.append(Pick(request, option.device, None))
            found = _search(slots, index + 1, used, whole, chosen)
            chosen.pop()
            whole.discard(key)
        else:
            before = used.get(key)
            after = dict(before or {})
            for name, amount in option.take.items():
                after[name] = after.get(name, Decimal(0)) + amount
            if any(after[name] > limit for name, limit in option.limits.items() if name in after):
                continue
            used[key] = after
            chosen.append(Pick(request, option.device, option.take))
            found = _search(slots, index + 1, used, whole, chosen)
            chosen.pop()
            if before is None:
                del used[key]
            else:
                used[key] = before
        if found is not None:
            return found
    return None


def build_allocation(
    claim: Mapping[str, Any],
    picks: Sequence[Pick],
    classes: Mapping[str, Mapping[str, Any]],
    node_name: str,
    now: str,
    new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> dict[str, Any]:
    """status.allocation as kube-scheduler writes it: one result per device (a shareID and
    every capacity for a shared device), class configs then claim configs, the node."""
    results = []
    for pick in picks:
        result: dict[str, Any] = {
            "request": pick.request.name,
            "driver": pick.device.driver,
            "pool": pick.device.pool,
            "device": pick.device.spec["name"],
        }
        if pick.request.tolerations:
            result["tolerations"] = [dict(t) for t in pick.request.tolerations]
        if pick.consumed is not None:
            names = {
                unqualified(k, pick.device.driver): k
                for k in pick.device.spec.get("capacity") or {}
            }
            result["shareID"] = new_share_id()
            result["consumedCapacity"] = {
                names[name]: format_quantity_value(amount) for name, amount in pick.consumed.items()
            }
        results.append(result)
    config: list[dict[str, Any]] = []
    seen: set[str] = set()
    for pick in picks:
        if pick.request.name in seen:
            continue
        seen.add(pick.request.name)
        device_class = classes.get(pick.request.device_class) or {}
        for entry in (device_class.get("spec") or {}).get("config") or []:
            config.append({"source": "FromClass", "requests": [pick.request.name], **entry})
    for entry in claim["spec"]["devices"].get("config") or []:
        config.append({"source": "FromClaim", **entry})
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    return {
        "devices": devices,
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
        "allocationTimestamp": now,
    }


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
        self.core = k8s.CoreV1Api(api_client)
        self.resource = k8s.ResourceV1Api(api_client)
        self.settings = settings or SchedulerSettings(scheduler_name=scheduler_name)
        self.scheduler_name = self.settings.scheduler_name

    async def _read(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        response = await asyncio.to_thread(method, *args, _preload_content=False, **kwargs)
        return json.loads(response.data)

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
                listed = await self._read(
                    self.core.list_pod_for_all_namespaces, field_selector=selector
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
                    outcome = SchedulingOutcome(None, "SchedulerError", _api_message(error))
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
        pod = await self._read(self.core.read_namespaced_pod, name, namespace)
        spec = pod.get("spec") or {}
        if spec.get("nodeName") or spec.get("schedulerName") != self.scheduler_name:
            return SchedulingOutcome(spec.get("nodeName"))
        claims = []
        for claim_name in pod_claim_names(pod).values():
            if claim_name is None:
                return await self._reject(pod, "SchedulerError", "waiting for resource claim")
            claims.append(
                await self._read(
                    self.resource.read_namespaced_resource_claim, claim_name, namespace
                )
            )
        unallocated = [c for c in claims if not (c.get("status") or {}).get("allocation")]
        context = None
        if self.settings.allocate and unallocated:
            try:
                context = await self._allocation_context(unallocated)
            except InvalidParameterError as error:
                return await self._reject(pod, "SchedulerError", str(error))
        nodes = (await self._read(self.core.list_node))["items"]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        feasible: list[tuple[str, list[Pick]]] = []
        for node in nodes:
            picks: list[Pick] = []
            reason = claim_failure(node, claims)
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
                reason = await self._fit(pod, node)
            if reason is None:
                feasible.append((node["metadata"]["name"], picks))
            elif reason[1]:
                failed[node["metadata"]["name"]] = reason[0]
            else:
                unresolvable[node["metadata"]["name"]] = reason[0]
        if not feasible:
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
                    await self._reserve(claim, pod)
                else:
                    await self._allocate(claim, allocation, pod)
        except ApiException as error:
            message = f'running PreBind plugin "DynamicResources": {_api_message(error)}'
            return await self._reject(pod, "SchedulerError", message)
        await self._bind(pod, node_name)
        return SchedulingOutcome(node_name)

    async def _allocation_context(
        self, unallocated: Sequence[dict[str, Any]]
    ) -> _AllocationContext:
        listed_classes = await self._read(self.resource.list_device_class)
        classes = {c["metadata"]["name"]: c for c in listed_classes["items"]}
        requests = build_requests(unallocated, classes)
        slices = (await self._read(self.resource.list_resource_slice))["items"]
        every_claim = await self._read(self.resource.list_resource_claim_for_all_namespaces)
        return _AllocationContext(requests, classes, slices, device_usage(every_claim["items"]))

    async def _fit(self, pod: dict[str, Any], node: dict[str, Any]) -> tuple[str, bool] | None:
        node_name = node["metadata"]["name"]
        listed = await self._read(
            self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node_name}"
        )
        on_node = [
            p
            for p in listed["items"]
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        return fit_failure(pod, node, on_node)

    async def _allocate(
        self, claim: dict[str, Any], allocation: dict[str, Any], pod: dict[str, Any]
    ) -> None:
        """PreBind for a claim allocated here: the delete-protection finalizer first (so
        kube-controller-manager deallocates it once unused), then allocation and
        reservation in one status write, conditional on the version that was read."""
        metadata = claim["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        version = metadata["resourceVersion"]
        added = DELETE_PROTECTION not in (metadata.get("finalizers") or [])
        if added:
            protected = await self._read(
                self.resource.patch_namespaced_resource_claim,
                name,
                namespace,
                {"metadata": {"resourceVersion": version, "finalizers": [DELETE_PROTECTION]}},
            )
            version = protected["metadata"]["resourceVersion"]
        reservation = {"resource": "pods", "name": pod["metadata"]["name"]}
        reservation["uid"] = pod["metadata"]["uid"]
        body = {
            "metadata": {"resourceVersion": version},
            "status": {"allocation": allocation, "reservedFor": [reservation]},
        }
        try:
            await asyncio.to_thread(
                self.resource.patch_namespaced_resource_claim_status,
                name,
                namespace,
                body,
                _preload_content=False,
            )
        except ApiException:
            if added:
                with contextlib.suppress(ApiException):
                    await asyncio.to_thread(
                        self.resource.patch_namespaced_resource_claim,
                        name,
                        namespace,
                        {"metadata": {"$deleteFromPrimitiveList/finalizers": [DELETE_PROTECTION]}},
                        _preload_content=False,
                    )
            raise

    async def _reserve(self, claim: dict[str, Any], pod: dict[str, Any]) -> None:
        status = claim["status"]
        reserved = status.setdefault("reservedFor", [])
        if any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
            return
        reserved.append(
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        )
        status["allocation"].setdefault("allocationTimestamp", api_time())
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
            "lastTransitionTime": api_time(),
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
