"""The DRA claim allocator: watch, decide with the HAMi engine, write, clean up.

One task decides, serially, from the controller's own view: the informers'
objects, overlaid with the allocations this process wrote (assume cache) or
is writing (pending). Decisions are charged to the engine at once, so the
next pod is decided without waiting for any write; writes run concurrently,
each pod's claims in order, undone together if one fails. Nothing in here
blocks on the API while deciding.

Work is per pod: a pending pod whose claims of our DeviceClasses are not yet
allocated. A pod that fits nowhere gets events with the engine's reasons and
waits until the cluster changes (inventory, usage, nodes, classes, quotas),
and at least its backoff, so a stuck pod never spins. Allocations no pod will
use are cleared (pod deleted while pending; pod that kube-scheduler could not
put on the chosen node is moved, avoiding that node for a while).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.quantity import QuantityError, parse_quantity
from controller.allocation import build_allocation, describe_results
from controller.claim_writes import (
    RESOURCE_API,
    ClaimWriter,
    WriteSettings,
    allocation_of,
    reservations_of,
)
from controller.decide import NoFit, PodAllocation, decide_pod
from controller.inventory import (
    Inventory,
    PublishedDevice,
    build_inventory,
    quota_ledger,
    usage_by_node,
)
from controller.metrics import ControllerMetrics, QuotaRecord, ShareRecord, ViewSnapshot
from controller.requests import RequestContext, pod_variants
from controller.settings import ControllerSettings
from controller.uuid_reports import report_duplicate_uuids
from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.kube.assume import AssumeCache
from dra_driver.kube.events import WARNING, EventRecorder, involved_object
from dra_driver.kube.informer import Informer, object_key
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.api_time import api_time
from dra_driver.objects.dra_cel import CelDevice, SelectorCache, cel_device_from_slice
from dra_driver.objects.node_predicates import (
    TERMINAL_PHASES,
    node_refusal,
    pod_resource_requests,
    requests_total,
)
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.process.runtime import cancel_and_wait

log = logging.getLogger(__name__)

CLAIMS = f"{RESOURCE_API}/resourceclaims"
SLICES = f"{RESOURCE_API}/resourceslices"
CLASSES = f"{RESOURCE_API}/deviceclasses"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
QUOTAS = "/api/v1/resourcequotas"
CLAIM_NOT_ON_NODE = "resourceclaim not available on the node"
NODE_NOT_FOUND = "node not found"
AVOIDED_NODE = "pod could not be scheduled on this node before"
FILTERING_FAILED = "FilteringFailed"
INVALID_PARAMETERS = "InvalidParameters"
WRITE_FAILED = "AllocationWriteFailed"
MOVED = "AllocationMoved"
STALE_CYCLE_MESSAGES = ("cannot allocate all claims", "waiting for resource claim")
"""kube-scheduler's DRA messages for claims it saw unallocated (a cycle that raced us)."""
SNAPSHOT_PERIOD_S = 1.0
SCHEDULING_FIELDS = ("nodeName", "nodeSelector", "affinity", "tolerations")
"""The pod spec fields node predicates read (with its resource requests)."""
MAX_REMEMBERED_REFUSALS = 200_000
STANDALONE = "claim:"
"""Work-queue prefix of a claim allocated without a pod (`allocate_standalone_claims`)."""
DELETED_PODS_REMEMBERED = 100_000


def _allocated_node(claim: Mapping[str, Any]) -> str | None:
    selector = (allocation_of(claim) or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for requirement in term.get("matchFields") or []:
            if requirement.get("key") == "metadata.name" and requirement.get("values"):
                return str(requirement["values"][0])
    return None


def _pod_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition
    return None


def _is_pending(pod: Mapping[str, Any]) -> bool:
    return (
        not (pod.get("spec") or {}).get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def _refused_with_claims_allocated(condition: Mapping[str, Any] | None) -> bool:
    """A PodScheduled=False that kube-scheduler wrote knowing the claims were allocated.

    A cycle that read the claims before the allocation reports them as not
    allocatable (`cannot allocate all claims`); only a filter failure on an
    allocated claim's node (reason Unschedulable, another message) means the
    pod cannot go there.
    """
    return (
        condition is not None
        and condition.get("status") == "False"
        and condition.get("reason") == "Unschedulable"
        and not any(text in str(condition.get("message")) for text in STALE_CYCLE_MESSAGES)
    )


def _is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


@dataclass(slots=True)
class _Waiting:
    """A pod that did not fit: retried once the view changed and `ready_at` passed."""

    version: int
    delay: float
    ready_at: float


@dataclass(slots=True)
class _Placed:
    """Where this process sent a pod, and its PodScheduled condition at that moment."""

    node: str
    condition: tuple[str, str] | None


class Controller:
    """Allocates the claims of pending pods; `run()` until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        metrics: ControllerMetrics,
        recorder: EventRecorder,
        *,
        vendors: VendorRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Its own User-Agent: the RBAC audit checks these calls against its ClusterRole.
        client = client.for_component("controller")
        self.client = client
        self.settings = settings
        self.metrics = metrics
        self.recorder = recorder
        self.vendors = vendors or VendorRegistry()
        self.clock = clock
        make = lambda path, handler, **kw: Informer(  # noqa: E731
            client, path, handlers=[handler], settings=settings.informer, **kw
        )
        self.slices = make(SLICES, self._on_slice, field_selector=f"spec.driver={settings.driver}")
        self.claims = make(CLAIMS, self._on_claim)
        self.pods = make(PODS, self._on_pod)
        self.nodes = make(NODES, self._on_node)
        self.classes = make(CLASSES, self._on_class)
        self.quotas = make(QUOTAS, self._on_quota)
        self.claim_view = AssumeCache(self.claims)
        self.writer = ClaimWriter(
            client,
            WriteSettings(
                settings.write_attempts, settings.write_retry_s, settings.write_retry_max_s
            ),
        )
        self.selectors = SelectorCache()
        self._cel_devices: dict[tuple[str, int, str], CelDevice] = {}
        self._context: RequestContext | None = None
        self.ready = asyncio.Event()
        self.inventory = Inventory()
        self.engine = Engine([])
        self._inventory_dirty = True
        self._usage_dirty = True
        self._version = 0
        self._wake = asyncio.Event()
        self._queue: dict[str, float] = {}
        self._waiting: dict[str, _Waiting] = {}
        self._first_seen: dict[str, float] = {}
        self._pending: dict[str, dict[str, Any]] = {}
        self._in_flight: set[str] = set()
        self._placed: dict[str, _Placed] = {}
        self._avoid: dict[str, dict[str, float]] = {}
        self._moves: dict[str, float] = {}
        self._cleanup: set[str] = set()
        self._claim_pods: dict[str, set[str]] = {}
        self._pod_claims: dict[str, set[str]] = {}
        self._pod_node: dict[str, str] = {}
        self._node_pods: dict[str, set[str]] = {}
        self._node_used: dict[str, tuple[int, dict[str, Decimal]]] = {}
        self._node_epoch: dict[str, int] = {}
        self._refusals: dict[tuple[str, str], tuple[tuple[str, int], str | None]] = {}
        self._deleted_pods: dict[str, None] = {}
        self._signatures: dict[str, Any] = {}
        self._writes: set[asyncio.Task[None]] = set()
        self._semaphore = asyncio.Semaphore(settings.write_concurrency)
        self._snapshot = ViewSnapshot()
        self._snapshot_at = float("-inf")

    # ---- running ------------------------------------------------------------------

    @property
    def informers(self) -> tuple[Informer, ...]:
        return (self.slices, self.claims, self.pods, self.nodes, self.classes, self.quotas)

    async def run(self) -> None:
        """Start from a fresh list of everything, then allocate until cancelled."""
        tasks = [asyncio.create_task(i.run(), name=f"informer {i.path}") for i in self.informers]
        self.metrics.attach_view(lambda: self._snapshot)
        try:
            await asyncio.gather(*(informer.synced.wait() for informer in self.informers))
            for pod in list(self.pods.store.values()):
                if _is_pending(pod):
                    self._enqueue(object_key(pod))
            self._cleanup.update(self.claims.store)
            if self.settings.allocate_standalone_claims:
                for claim_key in self.claims.store:
                    if not self._claim_pods.get(claim_key):
                        self._enqueue(STANDALONE + claim_key)
            self.ready.set()
            await self._loop()
        finally:
            self.metrics.detach_view()
            await cancel_and_wait([*tasks, *self._writes])

    async def _loop(self) -> None:
        while True:
            self._wake.clear()
            now = self.clock()
            self._refresh_view()
            self._sweep_cleanup()
            ready = [key for key, at in self._queue.items() if at <= now]
            for key, waiting in self._waiting.items():
                if waiting.version < self._version and waiting.ready_at <= now:
                    ready.append(key)
            for position, key in enumerate(dict.fromkeys(ready)):
                self._queue.pop(key, None)
                if key in self._in_flight:
                    continue
                self._refresh_view()
                if key.startswith(STANDALONE):
                    self._sync_standalone(key)
                else:
                    self._sync_pod(key)
                if position % 32 == 31:
                    await asyncio.sleep(0)
            self._update_gauges(now)
            timeout = self._next_timeout(self.clock())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()

    def _next_timeout(self, now: float) -> float | None:
        times = list(self._queue.values())
        times += [w.ready_at for w in self._waiting.values() if w.version < self._version]
        times.append(self._snapshot_at + SNAPSHOT_PERIOD_S)
        return max(0.0, min(times) - now) if times else None

    def _enqueue(self, key: str, delay: float = 0.0) -> None:
        at = self.clock() + delay
        self._queue[key] = min(at, self._queue.get(key, at))
        self._wake.set()

    def _changed(self) -> None:
        """Something a waiting pod's fit depends on changed: let waiting pods retry."""
        self._version += 1
        self._wake.set()

    # ---- informer handlers (synchronous, cheap) -------------------------------------

    def _on_quota(self, kind: str, obj: dict[str, Any]) -> None:
        """Quota limits live in the engine's ledger, built with the usage."""
        self._usage_dirty = True
        self._changed()

    def _on_class(self, kind: str, obj: dict[str, Any]) -> None:
        self._context = None
        self._changed()

    def _on_node(self, kind: str, obj: dict[str, Any]) -> None:
        """Predicates are re-evaluated per decision (cached by node resourceVersion); a
        deleted node strands the allocations of pending pods on it (rare: look at all)."""
        self._changed()
        if kind == "DELETED":
            for key, pod in self.pods.store.items():
                if _is_pending(pod):
                    self._enqueue(key)

    def _on_slice(self, kind: str, obj: dict[str, Any]) -> None:
        self._inventory_dirty = True
        self._usage_dirty = True
        if kind == "DELETED":
            uid = obj["metadata"].get("uid")
            self.selectors.forget(lambda key: isinstance(key, tuple) and key[0] == uid)
        self._changed()

    def _signature(self, claim: Mapping[str, Any] | None) -> Any:
        """What of a claim the usage depends on: its results, and whether they still hold
        capacity. A reservation added by kube-scheduler changes neither."""
        allocation = allocation_of(claim)
        if claim is None or allocation is None:
            return None
        results = tuple(
            (r.get("driver"), r.get("pool"), r.get("device"), str(r.get("consumedCapacity")))
            for r in (allocation.get("devices") or {}).get("results") or []
        )
        return (results, self._freed(claim))

    def _on_claim(self, kind: str, claim: dict[str, Any]) -> None:
        key = object_key(claim)
        signature = None if kind == "DELETED" else self._signature(claim)
        if self._is_own_echo(key, claim):
            self._signatures[key] = signature
        elif signature != self._signatures.get(key):
            self._usage_dirty = True
            self._changed()
        if signature is None:
            self._signatures.pop(key, None)
        else:
            self._signatures[key] = signature
        for pod_key in self._claim_pods.get(key, ()):
            self._enqueue(pod_key)
        if (
            self.settings.allocate_standalone_claims
            and kind != "DELETED"
            and allocation_of(claim) is None
            and not self._claim_pods.get(key)
        ):
            self._enqueue(STANDALONE + key)
        if allocation_of(claim) is not None and kind != "DELETED":
            self._cleanup.add(key)
            self._wake.set()

    def _is_own_echo(self, key: str, claim: Mapping[str, Any]) -> bool:
        """The watch shows an allocation this process is writing (before its response):
        the engine already holds it, nothing changed."""
        pending = self._pending.get(key)
        allocation = allocation_of(claim)
        if pending is None or allocation is None:
            return False
        share_ids = [
            r.get("shareID") for r in (allocation.get("devices") or {}).get("results") or []
        ]
        expected = [r.get("shareID") for r in pending["devices"]["results"]]
        return share_ids == expected

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        key = object_key(pod)
        gone = kind == "DELETED"
        previous_claims = self._pod_claims.pop(key, set())
        for claim_key in previous_claims:
            pods = self._claim_pods.get(claim_key)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._claim_pods[claim_key]
        namespace = pod["metadata"].get("namespace")
        claims = {f"{namespace}/{name}" for name in pod_claim_names(pod).values() if name}
        finished = gone or _is_terminal(pod)
        if not gone:
            self._pod_claims[key] = claims
            for claim_key in claims:
                self._claim_pods.setdefault(claim_key, set()).add(key)
        self._index_node(key, None if finished else (pod.get("spec") or {}).get("nodeName"), pod)
        if finished:
            uid = pod["metadata"].get("uid", "")
            if gone:
                self._deleted_pods[uid] = None
                if len(self._deleted_pods) > DELETED_PODS_REMEMBERED:
                    del self._deleted_pods[next(iter(self._deleted_pods))]
            for table in (self._placed, self._avoid, self._moves):
                table.pop(uid, None)
            self._waiting.pop(key, None)
            self._first_seen.pop(key, None)
            self._queue.pop(key, None)
            if previous_claims | claims:
                self._cleanup.update(previous_claims | claims)
                self._usage_dirty = True
                self._changed()
            return
        if _is_pending(pod):
            self._enqueue(key)
        else:
            self._waiting.pop(key, None)
            self._first_seen.pop(key, None)

    def _index_node(self, key: str, node: str | None, pod: dict[str, Any]) -> None:
        previous = self._pod_node.pop(key, None)
        if previous is not None:
            self._node_pods.get(previous, set()).discard(key)
            self._node_used.pop(previous, None)
            self._node_epoch[previous] = self._node_epoch.get(previous, 0) + 1
        if node:
            self._pod_node[key] = node
            self._node_pods.setdefault(node, set()).add(key)
            self._node_used.pop(node, None)
            self._node_epoch[node] = self._node_epoch.get(node, 0) + 1
        if previous != node:
            self._changed()

    # ---- the view -------------------------------------------------------------------

    def _freed(self, claim: Mapping[str, Any]) -> bool:
        """An allocation that no longer holds capacity in this controller's view.

        kube-controller-manager (or this controller) is about to clear it: the
        claim is being deleted and nobody reserves it, every pod that reserved it
        is gone or finished, or it is ours, unreserved, and no pod refers to it.
        """
        key = object_key(claim)
        if key in self._pending:
            return False
        reserved = reservations_of(claim)
        if claim["metadata"].get("deletionTimestamp") and not reserved:
            return True
        if reserved:
            namespace = claim["metadata"].get("namespace", "")
            return all(self._pod_finished(namespace, r) for r in reserved)
        return (
            not self.settings.allocate_standalone_claims
            and self._is_ours(claim)
            and not self._claim_pods.get(key)
        )

    def _pod_finished(self, namespace: str, reference: Mapping[str, Any]) -> bool:
        uid = reference.get("uid", "")
        if uid in self._deleted_pods:
            return True
        pod = self.pods.get(f"{namespace}/{reference.get('name')}")
        return pod is not None and pod["metadata"].get("uid") == uid and _is_terminal(pod)

    def effective_claims(self) -> list[dict[str, Any]]:
        """Allocated claims that hold capacity, own pending writes included."""
        claims = []
        for stored in self.claim_view.values():
            pending = self._pending.get(object_key(stored))
            claim = stored
            if pending is not None:
                claim = {
                    **stored,
                    "status": {**(stored.get("status") or {}), "allocation": pending},
                }
            if allocation_of(claim) is not None and not self._freed(claim):
                claims.append(claim)
        return claims

    def _refresh_view(self) -> None:
        if self._inventory_dirty:
            previous_duplicates = self.inventory.duplicate_uuids
            self.inventory = build_inventory(
                self.slices.store.values(),
                self.settings.driver,
                frozenset({self.settings.allocation_taint_key}),
            )
            self._inventory_dirty = False
            self._usage_dirty = True
            self._context = None
            live = {device.cache_key for device in self.inventory.by_key.values()}
            self._cel_devices = {k: v for k, v in self._cel_devices.items() if k in live}
            report_duplicate_uuids(
                self.recorder, self.inventory.duplicate_uuids, previous_duplicates, self.nodes.get
            )
        if not self._usage_dirty:
            return
        claims = self.effective_claims()
        self.engine = Engine(
            self.inventory.nodes.values(),
            usage_by_node(claims, self.inventory),
            settings=EngineSettings(self.settings.gpu_policy, self.settings.node_policy),
            vendors=self.vendors,
            quota=quota_ledger(self.quotas.store.values(), claims, self.inventory, self.vendors),
        )
        self._usage_dirty = False

    def _update_gauges(self, now: float) -> None:
        pending = 0
        for key in self._first_seen:
            pending += len(self._pod_claims.get(key, ()))
        self.metrics.pending_claims.set(pending)
        if now - self._snapshot_at >= SNAPSHOT_PERIOD_S:
            self.publish_view()

    def publish_view(self) -> None:
        """Refresh what /metrics shows (done every second; scrapes read this copy, from
        their own thread, so they never walk the live view)."""
        self._snapshot_at = self.clock()
        self._snapshot = self._take_snapshot()

    def _take_snapshot(self) -> ViewSnapshot:
        usage: dict[str, dict[str, DeviceUsage]] = {}
        for name in self.inventory.nodes:
            try:
                state = self.engine.node_state(name)
            except KeyError:
                continue
            usage[name] = {s.device.id: DeviceUsage(s.used, s.memory, s.cores) for s in state.slots}
        shares = []
        for claim in self.effective_claims():
            reserved = reservations_of(claim)
            waiting = sorted(self._claim_pods.get(object_key(claim), ()))
            pod = (
                reserved[0].get("name", "")
                if reserved
                else waiting[0].split("/", 1)[1]
                if waiting
                else claim["metadata"].get("name", "")
            )
            for index, result in enumerate(
                ((allocation_of(claim) or {}).get("devices") or {}).get("results") or []
            ):
                device = self.inventory.by_key.get(
                    (result.get("driver"), result.get("pool"), result.get("device"))
                )
                if device is None:
                    continue
                consumed = result.get("consumedCapacity") or {}
                shares.append(
                    ShareRecord(
                        namespace=claim["metadata"].get("namespace", ""),
                        node=device.node,
                        pod=pod,
                        container_index=index,
                        device_uuid=device.uuid,
                        memory_bytes=_bytes(consumed.get("memory")),
                        cores=_bytes(consumed.get("cores")),
                    )
                )
        return ViewSnapshot(self.inventory, usage, tuple(shares), self._quota_records())

    def _quota_records(self) -> tuple[QuotaRecord, ...]:
        ledger = quota_ledger(
            self.quotas.store.values(), self.effective_claims(), self.inventory, self.vendors
        )
        records = []
        for (namespace, vendor_name), quota in sorted(ledger.quotas.items()):
            resources = self.vendors.get(vendor_name).resources
            if quota.memory_limit_mib is not None:
                records.append(
                    QuotaRecord(
                        namespace, resources.memory, quota.memory_limit_mib, quota.memory_used_mib
                    )
                )
            if quota.cores_limit is not None:
                records.append(
                    QuotaRecord(namespace, resources.cores, quota.cores_limit, quota.cores_used)
                )
        return tuple(records)

    # ---- deciding ---------------------------------------------------------------------

    def _is_ours(self, claim: Mapping[str, Any]) -> bool:
        classes = self.settings.device_classes
        for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
            exactly = request.get("exactly")
            if exactly is not None and exactly.get("deviceClassName") in classes:
                return True
            if any(
                s.get("deviceClassName") in classes for s in request.get("firstAvailable") or []
            ):
                return True
        return False

    def _request_context(self) -> RequestContext:
        """One per inventory and set of classes, so its selection memo stays valid."""
        if self._context is None:
            self._context = RequestContext(
                driver=self.settings.driver,
                device_classes=self.settings.device_classes,
                classes=self.classes.store,
                inventory=self.inventory,
                selector_match=self._selector_match,
                vendors=self.vendors,
            )
        return self._context

    def _selector_match(self, expression: str, device: PublishedDevice) -> bool:
        cel_device = self._cel_devices.get(device.cache_key)
        if cel_device is None:
            cel_device = cel_device_from_slice(device.driver, device.spec)
            self._cel_devices[device.cache_key] = cel_device
        return self.selectors.matches(expression, device.cache_key, cel_device)

    def _node_usage(self, node: str) -> tuple[int, dict[str, Decimal]]:
        cached = self._node_used.get(node)
        if cached is None:
            pods = [self.pods.get(k) for k in self._node_pods.get(node, ())]
            live = [p for p in pods if p is not None]
            cached = (len(live), requests_total(live))
            self._node_used[node] = cached
        return cached

    def _candidates(
        self, pod: Mapping[str, Any], pinned: set[str]
    ) -> tuple[list[str], dict[str, str]]:
        candidates: list[str] = []
        refused: dict[str, str] = {}
        now = self.clock()
        requested = pod_resource_requests(pod)
        spec = pod.get("spec") or {}
        shape = json.dumps(
            [spec.get(k) for k in SCHEDULING_FIELDS] + sorted(map(str, requested.items())),
            sort_keys=True,
        )
        avoided = {
            n
            for n, until in self._avoid.get(pod["metadata"].get("uid", ""), {}).items()
            if until > now
        }
        for name in self.inventory.nodes:
            node = self.nodes.get(name)
            if node is None:
                refused[name] = NODE_NOT_FOUND
            elif pinned and name not in pinned:
                refused[name] = CLAIM_NOT_ON_NODE
            elif name in avoided:
                refused[name] = AVOIDED_NODE
            else:
                reason = self._node_refusal(shape, pod, node, requested)
                if reason is None:
                    candidates.append(name)
                else:
                    refused[name] = reason
        return candidates, refused

    def _node_refusal(
        self,
        shape: str,
        pod: Mapping[str, Any],
        node: Mapping[str, Any],
        requested: Mapping[str, Decimal],
    ) -> str | None:
        """node_refusal, remembered per pod shape until the node or its pods change."""
        name = node["metadata"]["name"]
        version = (node["metadata"].get("resourceVersion", ""), self._node_epoch.get(name, 0))
        cached = self._refusals.get((shape, name))
        if cached is not None and cached[0] == version:
            return cached[1]
        count, used = self._node_usage(name)
        reason = node_refusal(pod, node, count, used, requested)
        if len(self._refusals) > MAX_REMEMBERED_REFUSALS:
            self._refusals.clear()
        self._refusals[(shape, name)] = (version, reason)
        return reason

    def _sync_pod(self, key: str) -> None:
        pod = self.pods.get(key)
        if pod is None or not _is_pending(pod) or key in self._in_flight:
            return
        namespace = pod["metadata"]["namespace"]
        names = list(pod_claim_names(pod).values())
        if any(name is None for name in names):
            return
        claims = [self.claim_view.get(f"{namespace}/{name}") for name in names]
        if any(claim is None for claim in claims):
            return
        ours = [c for c in claims if c is not None and self._is_ours(c)]
        unallocated = [
            c for c in ours if allocation_of(c) is None and object_key(c) not in self._pending
        ]
        if not unallocated:
            self._first_seen.pop(key, None)
            self._check_moved(key, pod, ours)
            return
        if any(c["metadata"].get("deletionTimestamp") for c in unallocated):
            return
        pinned = {
            node
            for c in claims
            if c is not None and (node := _allocated_node(c) or self._pending_node(c))
        }
        self._allocate(key, pod, unallocated, pinned)

    def _sync_standalone(self, key: str) -> None:
        """A claim of ours no pod refers to (when configured): any node that fits."""
        claim_key = key.removeprefix(STANDALONE)
        claim = self.claim_view.get(claim_key)
        if (
            claim is None
            or key in self._in_flight
            or allocation_of(claim) is not None
            or claim_key in self._pending
            or claim["metadata"].get("deletionTimestamp")
            or self._claim_pods.get(claim_key)
            or not self._is_ours(claim)
        ):
            return
        metadata = claim["metadata"]
        holder = {
            "metadata": {
                "name": metadata["name"],
                "namespace": metadata.get("namespace"),
                "uid": metadata.get("uid"),
            },
            "spec": {},
        }
        self._allocate(key, holder, [claim], set())

    def _allocate(
        self,
        key: str,
        pod: Mapping[str, Any],
        unallocated: list[dict[str, Any]],
        pinned: set[str],
    ) -> None:
        """Decide for the unallocated claims, then commit and write, or report why not."""
        self._first_seen.setdefault(key, self.clock())
        candidates, refused = self._candidates(pod, pinned)
        context = self._request_context()
        started = time.perf_counter()
        try:
            variants = pod_variants(pod, unallocated, context)
            outcome = decide_pod(self.engine, variants, self.inventory, candidates, refused)
        except InvalidParameterError as error:
            self._refuse(key, pod, unallocated, INVALID_PARAMETERS, str(error))
            return
        finally:
            self.metrics.decision_latency.observe(time.perf_counter() - started)
        if isinstance(outcome, NoFit):
            self._refuse(key, pod, unallocated, FILTERING_FAILED, outcome.message)
            return
        self._commit(key, pod, unallocated, outcome)

    def _pending_node(self, claim: Mapping[str, Any]) -> str | None:
        pending = self._pending.get(object_key(claim))
        return _allocated_node({"status": {"allocation": pending}}) if pending else None

    def _refuse(
        self,
        key: str,
        pod: Mapping[str, Any],
        claims: Iterable[Mapping[str, Any]],
        reason: str,
        message: str,
    ) -> None:
        self.metrics.failures.labels(reason).inc()
        previous = self._waiting.get(key)
        delay = (
            min(previous.delay * 2, self.settings.retry_max_s)
            if previous
            else self.settings.retry_initial_s
        )
        self._waiting[key] = _Waiting(self._version, delay, self.clock() + self._jitter(delay))
        if previous is not None and previous.version == self._version:
            return
        if not key.startswith(STANDALONE):
            self.recorder.emit(involved_object(pod, "Pod", "v1"), WARNING, reason, message)
        for claim in claims:
            self.recorder.emit(
                involved_object(claim, "ResourceClaim", "resource.k8s.io/v1"),
                WARNING,
                reason,
                message,
            )
        log.info("pod's claims not allocated", extra={"pod": key, "why": message[:300]})

    @staticmethod
    def _jitter(delay: float) -> float:
        return delay * random.uniform(1.0, 1.2)

    def _commit(
        self, key: str, pod: Mapping[str, Any], claims: list[dict[str, Any]], chosen: PodAllocation
    ) -> None:
        self.engine.commit(chosen.variant.request, chosen.placement)
        self._waiting.pop(key, None)
        now = api_time()
        writes = []
        for claim, variant, results in zip(
            claims, chosen.variant.claims, chosen.results, strict=True
        ):
            allocation = build_allocation(variant, results, self.classes.store, chosen.node, now)
            self._pending[object_key(claim)] = allocation
            writes.append((claim, allocation))
        condition = _pod_condition(pod)
        signature = (
            (str(condition.get("lastTransitionTime")), str(condition.get("message")))
            if condition
            else None
        )
        self._placed[pod["metadata"].get("uid", "")] = _Placed(chosen.node, signature)
        self._in_flight.add(key)
        task = asyncio.create_task(self._write_pod(key, writes), name=f"allocate {key}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    # ---- writing ----------------------------------------------------------------------

    async def _write_pod(
        self, key: str, writes: list[tuple[dict[str, Any], dict[str, Any]]]
    ) -> None:
        written: list[dict[str, Any]] = []
        try:
            async with self._semaphore:
                for claim, allocation in writes:
                    stored = await self.writer.allocate(claim, allocation)
                    self._adopt(stored)
                    written.append(stored)
                    self.metrics.allocations.inc()
            self._record_condition(key)
            first = self._first_seen.pop(key, None)
            if first is not None:
                self.metrics.allocation_latency.observe(self.clock() - first)
            log.info(
                "claims allocated",
                extra={
                    "pod": key,
                    "node": _allocated_node(written[0]) if written else None,
                    "claims": {
                        object_key(c): describe_results(allocation_of(c) or {}) for c in written
                    },
                },
            )
        except DriverError as error:
            log.warning("allocation not written", extra={"pod": key, "error": str(error)})
            self.metrics.failures.labels(WRITE_FAILED).inc()
            for stored in written:
                with contextlib.suppress(DriverError):
                    await self._clear_allocation(stored)
            self._enqueue(key, self._jitter(self.settings.retry_initial_s))
        finally:
            for claim, _ in writes:
                self._pending.pop(object_key(claim), None)
            self._in_flight.discard(key)
            self._usage_dirty = self._usage_dirty or len(written) < len(writes)
            if len(written) < len(writes):
                self._changed()
            self._wake.set()

    def _record_condition(self, key: str) -> None:
        """Remember the pod's PodScheduled condition as of our completed write: only a
        later one can be kube-scheduler's verdict on the node we chose."""
        pod = self.pods.get(key)
        placed = self._placed.get((pod or {}).get("metadata", {}).get("uid", ""))
        condition = _pod_condition(pod) if pod is not None else None
        if placed is not None and condition is not None:
            placed.condition = (
                str(condition.get("lastTransitionTime")),
                str(condition.get("message")),
            )

    def _adopt(self, stored: dict[str, Any]) -> None:
        """Make a write we made part of the view before the watch shows it."""
        key = object_key(stored)
        self.claim_view.assume(stored)
        self._signatures[key] = self._signature(stored)
        self._pending.pop(key, None)

    async def _clear_allocation(self, claim: dict[str, Any]) -> None:
        """Take an allocation back (unless a pod reserved it meanwhile) and free it here."""
        stored = await self.writer.deallocate(claim)
        if stored is not None:
            self.claim_view.assume(stored)
            self._signatures[object_key(stored)] = self._signature(stored)
            self._usage_dirty = True
            self._changed()

    # ---- life cycle -------------------------------------------------------------------

    def _sweep_cleanup(self) -> None:
        """Clear allocations of ours that no pod will ever reserve (none when standalone
        claims are allocated on purpose)."""
        keys, self._cleanup = self._cleanup, set()
        if self.settings.allocate_standalone_claims:
            return
        for key in keys:
            claim = self.claim_view.get(key)
            if (
                claim is None
                or key in self._pending
                or allocation_of(claim) is None
                or reservations_of(claim)
                or not self._is_ours(claim)
                or self._claim_pods.get(key)
                or claim["metadata"].get("deletionTimestamp")
            ):
                continue
            log.info("clearing an allocation no pod uses", extra={"claim": key})
            self._spawn(self._clear_allocation(claim), f"clear {key}")

    def _spawn(self, work: Any, name: str) -> None:
        async def guarded() -> None:
            try:
                await work
            except DriverError as error:
                log.warning("clean-up failed", extra={"task": name, "error": str(error)})

        task = asyncio.create_task(guarded(), name=name)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def _check_moved(self, key: str, pod: Mapping[str, Any], ours: list[dict[str, Any]]) -> None:
        """The pod cannot go where its claims are (kube-scheduler said so, or the node is
        gone): clear them, avoid that node for a while, allocate again."""
        if not ours or any(reservations_of(c) for c in ours):
            return
        node = _allocated_node(ours[0]) or ""
        if self.nodes.get(node) is None:
            self._move(key, pod, ours, node, f"node {node} no longer exists")
            return
        condition = _pod_condition(pod)
        if not _refused_with_claims_allocated(condition):
            return
        assert condition is not None
        signature = (str(condition.get("lastTransitionTime")), str(condition.get("message")))
        placed = self._placed.get(pod["metadata"].get("uid", ""))
        if placed is not None:
            if placed.condition == signature:
                return
            node = placed.node
        else:
            stamps = [str((allocation_of(c) or {}).get("allocationTimestamp", "")) for c in ours]
            if signature[0] <= max(stamps):
                return
        self._move(
            key, pod, ours, node, f"kube-scheduler could not put the pod there ({signature[1]})"
        )

    def _move(
        self,
        key: str,
        pod: Mapping[str, Any],
        ours: list[dict[str, Any]],
        node: str,
        why: str,
    ) -> None:
        uid = pod["metadata"].get("uid", "")
        delay = min(
            self._moves.get(uid, self.settings.retry_initial_s / 2) * 2, self.settings.retry_max_s
        )
        self._moves[uid] = delay
        self._avoid.setdefault(uid, {})[node] = self.clock() + self.settings.moved_node_memory_s
        self._placed.pop(uid, None)
        message = f"claims allocated on {node} are allocated again elsewhere: {why}"
        self.recorder.emit(involved_object(pod, "Pod", "v1"), WARNING, MOVED, message)
        log.info("moving a pod's claims", extra={"pod": key, "node": node, "why": why})
        self._in_flight.add(key)

        async def move() -> None:
            try:
                for claim in ours:
                    await self._clear_allocation(claim)
            finally:
                self._in_flight.discard(key)
                self._enqueue(key, self._jitter(delay))

        self._spawn(move(), f"move {key}")


def _bytes(quantity: Any) -> int:
    try:
        return int(parse_quantity(str(quantity))) if quantity is not None else 0
    except QuantityError:
        return 0
