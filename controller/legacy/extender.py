"""kube-scheduler extender verbs, Filter and Bind, as HAMi's scheduler answers them.

Filter picks one node and the devices for a pod and writes them as pod
annotations; Bind takes the node lock and binds. The lock stays with the pod
until the device plugin's Allocate releases it, so a burst of pods onto one
node would have every bind after the first fail and wait out kube-scheduler's
backoff (up to 10 s). Instead this process queues its binds per node and the
head of the queue waits, up to `node_lock_retry_timeout`, for the holder's
release (woken by the node watch) before HAMi's rules decide; a lock still held
then, by any pod of any process, fails the bind as HAMi's does. In mixed mode
(`LegacySettings.mixed_mode`) Filter counts DRA claims' allocations on the
registered GPUs, names the claims holding a node's GPUs when the pod finds
no room there, and Bind, holding the lock, re-reads the claims and fails if
the pod's shares no longer fit beside them (kube-scheduler then filters
again). Answers use the Go field names of `k8s.io/kube-scheduler/extender/v1`.
A pod-level problem (a bad resource value, an API failure) is answered with
`Error`, which kube-scheduler retries with backoff; nodes that cannot take
the pod go to `FailedNodes`. Reference: hami-protocol.md §4.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import AnnotationDecodeError, BindPhase
from controller.legacy.cluster import ClusterState
from controller.legacy.mig_slices import mig_allocations_annotation
from controller.legacy.pod_shape import check_pod_shape
from controller.legacy.pod_usage import PodAllocation, pod_uid, read_pod_allocation
from controller.mixed_usage import short_of_room, with_holders
from dra_driver.engine.engine import Placement
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.reasons import (
    NODE_UNREGISTERED,
    summarize_failures,
)
from dra_driver.engine.requests import PodRequest
from dra_driver.engine.usage import collapse_pod_usage
from dra_driver.engine.vendor_backends.base import (
    LockKind,
    LockRule,
    PatchContext,
    VendorBackend,
    annotations_of,
)
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.kube.events import NORMAL, WARNING, EventRecorder, involved_object
from dra_driver.kube.informer import object_key
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.node_lock import NodeLockBusyError
from dra_driver.objects.pod_workloads import pod_request
from dra_driver.process.runtime import wait_event

log = logging.getLogger(__name__)

FILTERING_SUCCEED = "FilteringSucceed"
FILTERING_FAILED = "FilteringFailed"
BINDING_FAILED = "BindingFailed"
LOCK_RECHECK_S = 1.0
"""A waiting Bind looks at the lock again this often even without a node event: a
holder pod that is deleted or a lock that expires changes nothing on the node."""


@dataclass(frozen=True, slots=True)
class FilterArgs:
    """ExtenderArgs: the pod and either node names (nodeCacheCapable) or full nodes."""

    pod: Mapping[str, Any]
    node_names: list[str] | None
    nodes: list[Mapping[str, Any]] | None

    @property
    def candidates(self) -> list[str]:
        if self.node_names is not None:
            return self.node_names
        return [str((n.get("metadata") or {}).get("name") or "") for n in self.nodes or []]


@dataclass(frozen=True, slots=True)
class BindArgs:
    """ExtenderBindingArgs."""

    pod_name: str
    pod_namespace: str
    pod_uid: str
    node: str


class DraShareTakenError(DriverError):
    """Mixed mode: under the node lock, DRA claims leave no room for the pod's shares."""


def parse_filter_args(body: object) -> FilterArgs:
    """Validate ExtenderArgs; an InvalidParameterError names the field."""
    if not isinstance(body, dict):
        raise InvalidParameterError("ExtenderArgs", "expected a JSON object")
    pod = body.get("Pod")
    check_pod_shape(pod, "Pod")
    if not isinstance(pod.get("metadata"), dict) or not pod["metadata"].get("name"):
        raise InvalidParameterError("Pod.metadata.name", "is required")
    names, nodes = body.get("NodeNames"), body.get("Nodes")
    if names is not None and (
        not isinstance(names, list) or not all(isinstance(n, str) for n in names)
    ):
        raise InvalidParameterError("NodeNames", "expected a list of node names")
    items = None
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items") or [], list):
            raise InvalidParameterError("Nodes", "expected a NodeList with items")
        items = nodes.get("items") or []
        if not all(isinstance(n, dict) for n in items):
            raise InvalidParameterError("Nodes.items", "expected Node objects")
    if names is None and items is None:
        raise InvalidParameterError("NodeNames", "either NodeNames or Nodes is required")
    return FilterArgs(pod, names, items)


def parse_bind_args(body: object) -> BindArgs:
    if not isinstance(body, dict):
        raise InvalidParameterError("ExtenderBindingArgs", "expected a JSON object")
    values = []
    for key in ("PodName", "PodNamespace", "PodUID", "Node"):
        value = body.get(key)
        if not isinstance(value, str) or not value:
            raise InvalidParameterError(key, "must be a non-empty string")
        values.append(value)
    return BindArgs(*values)


def filter_answer(
    names: list[str] | None = None,
    failed: Mapping[str, str] | None = None,
    error: str = "",
    nodes: list[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """ExtenderFilterResult with every key kube-scheduler reads."""
    return {
        "Nodes": None if nodes is None else {"metadata": {}, "items": nodes},
        "NodeNames": names,
        "FailedNodes": dict(failed or {}),
        "FailedAndUnresolvableNodes": {},
        "Error": error,
    }


def _naming(failed: Mapping[str, str], holders: Mapping[str, str]) -> dict[str, str]:
    """FailedNodes with each node's holders after HAMi's `k/N Reason` text, which stays
    first so that what reads HAMi's reasons still finds them."""
    return {
        node: f"{reason}; {holders[node]}" if node in holders else reason
        for node, reason in failed.items()
    }


def pod_annotations(
    placement: Placement, backends: Iterable[VendorBackend], context: PatchContext
) -> dict[str, str]:
    """The annotations HAMi's Filter writes: the node and time (seconds), and each
    vendor's PatchAnnotations for the devices it was given (NVIDIA: both device
    keys carry the same string). Each vendor gets `context` with `assigned` the
    pod's own annotations under those already set (HAMi passes it the pod and its
    annoinput; Ascend reads the pod's `huawei.com/vnpu-mode`). MIG slices add
    `hami.io/vgpu-mig-allocations`, as NVIDIA's PatchAnnotations does."""
    result = {keys.VGPU_NODE: context.node, keys.VGPU_TIME: str(context.now_ns // 1_000_000_000)}
    own = annotations_of(context.pod)
    for backend in backends:
        seen = replace(context, assigned={**own, **result})
        result.update(backend.pod_annotations(placement.containers, seen))
    result.update(mig_allocations_annotation(placement.containers))
    return result


def _pod_name(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def _pods_path(namespace: str, name: str) -> str:
    return object_path(f"/api/v1/namespaces/{namespace}/pods", name)


class Extender:
    """Filter and Bind over a ClusterState, writing through a KubeClient."""

    def __init__(
        self,
        client: KubeClient,
        state: ClusterState,
        locker: NodeLocker,
        events: EventRecorder,
    ) -> None:
        self.client = client
        self.state = state
        self.locker = locker
        self.events = events
        self.lock_wait_s = state.settings.node_lock_retry_timeout.total_seconds()
        self._bind_queues: dict[str, asyncio.Lock] = {}
        """Per node, this process's binds in arrival order (asyncio.Lock is FIFO)."""
        self._own_lockers: dict[str, NodeLocker] = {}
        """Per lock key, the locker of a vendor with a lock of its own."""
        self._node_changes: dict[str, asyncio.Event] = {}
        """Per node a waiting Bind watches, set by the next event of that node."""
        state.nodes.handlers.append(self._on_node)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        changed = self._node_changes.pop(object_key(node), None)
        if changed is not None:
            changed.set()

    def _pod_event(
        self, pod: Mapping[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        self.events.emit(involved_object(pod, "Pod", "v1"), event_type, reason, message)

    def _request(self, pod: Mapping[str, Any]) -> PodRequest:
        return pod_request(pod, self.state.vendors, admission_defaults=False)

    async def filter(self, args: FilterArgs) -> dict[str, Any]:
        pod = args.pod
        try:
            request = self._request(pod)
        except InvalidParameterError as error:
            return filter_answer(error=f"pod {_pod_name(pod)}: {error}")
        if not request.has_devices():
            return filter_answer(args.node_names, nodes=args.nodes)
        if args.nodes is not None:
            return self._simulate(request, args)
        return await self._filter(pod, request, args.candidates)

    def _dra_holders(self, failed: Mapping[str, str]) -> dict[str, str]:
        """Mixed mode: for each node whose GPUs had no room, the DRA claims holding them
        (empty outside mixed mode, or where no claim holds a GPU)."""
        short = short_of_room(failed)
        return self.state.dra.holders(short) if short else {}

    def _split(self, candidates: list[str]) -> tuple[list[str], dict[str, str]]:
        """Candidates the engine knows, and why each of the others cannot be used."""
        known = self.state.usable
        usable = [name for name in candidates if name in known]
        failed = {}
        if len(usable) < len(candidates):
            for name in candidates:
                if name not in known:
                    entry = self.state.inventory.get(name)
                    failed[name] = entry.problem if entry is not None else NODE_UNREGISTERED
        return usable, failed

    def _simulate(self, request: PodRequest, args: FilterArgs) -> dict[str, Any]:
        """Full-Nodes requests: decide, change nothing (HAMi's simulation path).

        kube-scheduler sends the nodes when nodeCacheCapable is false, and
        cluster-autoscaler sends template nodes no watch has shown: each is read
        from the object sent (its register annotation), with the usage the cache
        knows for that name.
        """
        entries = [self.state.read(node) for node in args.nodes or []]
        failed = {entry.name: entry.problem for entry in entries if entry.node is None}
        engine = self.state.engine_for([entry.node for entry in entries if entry.node])
        try:
            decision = engine.decide(request, [entry.name for entry in entries if entry.node])
        except InvalidParameterError as error:
            return filter_answer(error=f"pod {_pod_name(args.pod)}: {error}")
        failed.update(decision.failures)
        if decision.placement is None:
            return filter_answer(failed=_naming(failed, self._dra_holders(failed)), nodes=[])
        chosen = [
            n
            for n in args.nodes or []
            if (n.get("metadata") or {}).get("name") == decision.placement.node
        ]
        return filter_answer(failed=failed, nodes=chosen[:1])

    async def _filter(
        self, pod: Mapping[str, Any], request: PodRequest, candidates: list[str]
    ) -> dict[str, Any]:
        uid = pod_uid(pod)
        async with self.state.lock:
            self.state.forget(uid)
            usable, failed = self._split(candidates)
            engine = self.state.engine()
            try:
                decision = engine.decide(request, usable)
            except InvalidParameterError as error:
                return filter_answer(error=f"pod {_pod_name(pod)}: {error}")
            failed.update(decision.failures)
            placement = decision.placement
            if placement is not None:
                devices = engine.node_state(placement.node).node.devices
                engine.commit(request, placement)
                self.state.record(
                    PodAllocation(
                        uid,
                        request.namespace,
                        request.name,
                        placement,
                        collapse_pod_usage(placement.containers, placement.init_count),
                    )
                )
        if placement is None:
            holders = self._dra_holders(failed)
            message = with_holders(summarize_failures(failed), holders)
            log.info("no node fits", extra={"pod": _pod_name(pod), "reasons": failed})
            self._pod_event(pod, WARNING, FILTERING_FAILED, message)
            return filter_answer([], _naming(failed, holders))
        node = placement.node
        context = PatchContext(
            pod=pod,
            node=node,
            devices=devices,
            requests=request.all_containers,
            now_ns=time.time_ns(),
        )
        body = {
            "metadata": {
                "annotations": pod_annotations(placement, self.state.backends, context),
                "labels": {keys.VGPU_NODE: node},
            }
        }
        try:
            patched = await self.client.patch(_pods_path(request.namespace, request.name), body)
        except DriverError as error:
            async with self.state.lock:
                self.state.forget(uid)
            log.warning(
                "pod annotations not written", extra={"pod": _pod_name(pod), "error": str(error)}
            )
            return filter_answer(error=f"pod {_pod_name(pod)}: writing the allocation: {error}")
        self.state.confirm(uid, (patched.get("metadata") or {}).get("resourceVersion", ""))
        self._pod_event(pod, NORMAL, FILTERING_SUCCEED, f"Successfully filtered to node {node}")
        log.info("pod filtered", extra={"pod": _pod_name(pod), "node": node})
        return filter_answer([node])

    async def bind(self, args: BindArgs) -> dict[str, Any]:
        name = f"{args.pod_namespace}/{args.pod_name}"
        try:
            pod = await self.client.get(_pods_path(args.pod_namespace, args.pod_name))
        except DriverError as error:
            return {"Error": f"pod {name}: {error}"}
        if (pod.get("metadata") or {}).get("uid") != args.pod_uid:
            return {"Error": f"pod {name}: uid is not {args.pod_uid}; the pod was replaced"}
        try:
            request = self._request(pod)
        except InvalidParameterError as error:
            return {"Error": f"pod {name}: {error}"}
        assigned = ((pod.get("metadata") or {}).get("annotations") or {}).get(keys.VGPU_NODE)
        if request.has_devices() and assigned != args.node:
            # Its device list was chosen on another node (or not at all): binding here
            # would hand the device plugin UUIDs that node does not have.
            where = f"node {assigned}" if assigned else "no node yet"
            return {"Error": f"pod {name}: its GPUs were filtered on {where}, not {args.node}"}
        lockers = self._lockers_for(request)
        taken: list[NodeLocker] = []
        try:
            for locker in lockers:
                await self._lock_node(args, locker)
                taken.append(locker)
        except DriverError as error:
            await self._undo(args, taken)
            self._pod_event(pod, WARNING, BINDING_FAILED, str(error))
            log.warning("node lock not taken", extra={"pod": name, "error": str(error)})
            return {"Error": f"pod {name}: {error}"}
        try:
            await self._check_room(pod, args.node)
            await self._bind(args)
        except DriverError as error:
            await self._undo(args, taken)
            self._pod_event(pod, WARNING, BINDING_FAILED, str(error))
            log.warning("bind failed", extra={"pod": name, "node": args.node, "error": str(error)})
            return {"Error": f"pod {name}: binding to {args.node}: {error}"}
        log.info("pod bound", extra={"pod": name, "node": args.node})
        return {"Error": ""}

    def _lockers_for(self, request: PodRequest) -> list[NodeLocker]:
        """The node locks the pod's vendors take, in HAMi's order (each vendor's
        LockNode in turn, the vendors sorted by common word: `GPU` before `MLU`):
        the shared `hami.io/mutex.lock` once, where the first vendor using it comes
        (it is re-entrant for the pod, so a multi-vendor pod holds one), and each
        vendor lock of its own (Cambricon's `cambricon.com/dsmlu.lock`); none for
        vendors that do not lock or that the pod's app containers do not ask for.

        HAMi's scheduler releases none of them after a successful bind: the shared
        lock is released by the device plugin's Allocate, Cambricon's by
        Cambricon's device plugin once it has allocated the pod. After a failed
        bind this scheduler releases only the locks it took for the pod; HAMi's
        asks every vendor to release, and Cambricon's release removes a lock
        another pod's bind holds, letting two MLU pods in at once."""
        lockers: dict[str, NodeLocker] = {}
        for backend in sorted(self.state.backends, key=lambda b: b.adapter.common_word):
            if not backend.needs_lock(request):
                continue
            rule = backend.lock
            if rule.kind is LockKind.SHARED:
                lockers.setdefault(self.locker.key, self.locker)
            elif rule.kind is LockKind.OWN and rule.key:
                lockers.setdefault(rule.key, self._own_locker(rule))
        return list(lockers.values())

    def _own_locker(self, rule: LockRule) -> NodeLocker:
        assert rule.key is not None
        locker = self._own_lockers.get(rule.key)
        if locker is None:
            locker = NodeLocker(
                self.client,
                key=rule.key,
                records_owner=rule.records_owner,
                timeout=rule.expiry or self.locker.timeout,
                clock=self.locker.clock,
            )
            self._own_lockers[rule.key] = locker
        return locker

    async def _lock_node(self, args: BindArgs, locker: NodeLocker) -> None:
        """Take a node lock behind this process's earlier binds to the node, waiting
        (bounded) for a holder to release it; NodeLockBusyError when the time is up."""
        deadline = asyncio.get_running_loop().time() + self.lock_wait_s
        queue = self._bind_queues.setdefault(args.node, asyncio.Lock())
        try:
            async with asyncio.timeout_at(deadline):
                await queue.acquire()
        except TimeoutError:
            raise NodeLockBusyError(
                args.node,
                f"lock wanted by earlier binds of this scheduler; waited {self.lock_wait_s:g}s",
            ) from None
        try:
            await self._acquire_when_free(args, deadline, locker)
        finally:
            queue.release()

    async def _acquire_when_free(self, args: BindArgs, deadline: float, locker: NodeLocker) -> None:
        loop = asyncio.get_running_loop()
        while True:
            changed = self._node_changes.setdefault(args.node, asyncio.Event())
            try:
                await locker.acquire(args.node, args.pod_namespace, args.pod_name)
                return
            except NodeLockBusyError as error:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise NodeLockBusyError(
                        args.node, f"{error.reason}; waited {self.lock_wait_s:g}s"
                    ) from error
                log.debug(
                    "bind waits for the node lock",
                    extra={"node": args.node, "pod": args.pod_name, "lock": error.reason},
                )
            await wait_event(changed, min(remaining, LOCK_RECHECK_S))

    async def _check_room(self, pod: Mapping[str, Any], node: str) -> None:
        """Mixed mode, under the node lock: the node's GPUs must still carry every legacy
        share, this pod's included, beside the DRA claims the API shows now (the
        controller writes allocations under the same lock, so one of the two loses)."""
        entry = self.state.inventory.get(node)
        if entry is None or entry.node is None:
            return
        legacy = self.state.legacy_usage(node, excluding=pod_uid(pod))
        try:
            own = read_pod_allocation(pod, self.state.backends, self.state.device_indices)
        except AnnotationDecodeError as error:
            raise DraShareTakenError(f"its device annotation is unreadable: {error}") from error
        if own is not None and own.placement.node == node:
            for device, amount in own.usage.items():
                legacy[device] = legacy.get(device, DeviceUsage()).plus(amount)
        problems = await self.state.dra.problems(entry.node, legacy)
        if problems:
            raise DraShareTakenError(
                f"DRA claims now hold part of its GPUs ({'; '.join(problems)}); "
                "filter the pod again"
            )

    async def _bind(self, args: BindArgs) -> None:
        path = _pods_path(args.pod_namespace, args.pod_name)
        phase = {
            keys.BIND_PHASE: BindPhase.ALLOCATING.value,
            keys.BIND_TIME: str(int(time.time())),
        }
        await self.client.patch(path, {"metadata": {"annotations": phase}})
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {
                "name": args.pod_name,
                "namespace": args.pod_namespace,
                "uid": args.pod_uid,
            },
            "target": {"apiVersion": "v1", "kind": "Node", "name": args.node},
        }
        await self.client.create(f"{path}/binding", binding)

    async def _undo(self, args: BindArgs, taken: list[NodeLocker]) -> None:
        for locker in reversed(taken):
            try:
                await locker.release(args.node, args.pod_namespace, args.pod_name)
            except DriverError as error:
                log.warning(
                    "node lock not released after a failed bind",
                    extra={"node": args.node, "pod": args.pod_name, "error": str(error)},
                )
