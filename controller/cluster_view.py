"""The controller's own view of the cluster, which every decision is made from.

The informers' objects, overlaid with the allocations this process wrote
(the assume cache, until the watch shows them) and is writing (`pending`,
until the write returns), so the next pod is decided without waiting for any
write. From it the inventory (slices) and the engine (inventory minus the
usage of claims that still hold capacity, with the quota ledger) are rebuilt
lazily, only after what they depend on changed; a reservation added by
kube-scheduler changes nothing (see `usage_signature`). After a usage change
alone the engine is brought in line in place (controller/usage_sync.py). The
informers keep each object compact (`compact_object`), and `changes` counts
what may change the view, so the metrics snapshot is built only after one.

A claim of ours deleted while a pod bound to its node still reserves it keeps
its capacity charged (`_retained`) until every such pod ended or is gone: the
pod may still run on the share. Each allocated claim's uid, node and
reservations are remembered, so an allocation that vanishes without this
process clearing it (`clearing`) is told apart: kube-scheduler's PostFilter
took it back (`allocation_vanished`).

Owns: the seven informers and the assume cache; the pending writes; the claim
<-> pod index; the uids of pods seen deleted; each claim's usage signature;
the last allocation seen per claim and the claims being cleared; the deleted
claims still charged;
in mixed mode, what each legacy pod holds (its HAMi annotations, charged to the
slice device with the same uuid on its node, controller/mixed_usage.py);
the inventory, the engine, the request context and the CEL memo; the node
filter. Calls: the pure builders (inventory, requests, node filter), the
engine, and `report_duplicate_uuids` (events). Never writes a claim; the
event handlers feed it (`subscribe`) and say what a change means for work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from controller.allocation_gate import names_class
from controller.inventory import (
    Inventory,
    PublishedDevice,
    build_inventory,
    quota_ledger,
)
from controller.mixed_usage import (
    LegacyHold,
    add_holds,
    charge_holds,
    legacy_backends,
    legacy_hold,
)
from controller.node_filter import NodeFilter
from controller.object_state import (
    allocated_node,
    allocation_of,
    compact_object,
    is_gated,
    is_pending,
    is_terminal,
    reservations_of,
)
from controller.partition_inventory import CounterUsage, partition_usage
from controller.requests import RequestContext
from controller.settings import ControllerSettings
from controller.usage_sync import ClaimUsageMemo, sync_engine
from controller.uuid_reports import report_duplicate_uuids
from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.assume import AssumeCache
from dra_driver.kube.events import EventRecorder
from dra_driver.kube.informer import Handler, Informer, object_key
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.dra_cel import CelDevice, cel_device_from_slice
from dra_driver.objects.dra_cel_cache import SelectorCache
from dra_driver.objects.node_predicates import dra_extended_resources
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.resource_api import RESOURCE_API

CLAIMS = f"{RESOURCE_API}/resourceclaims"
SLICES = f"{RESOURCE_API}/resourceslices"
CLASSES = f"{RESOURCE_API}/deviceclasses"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
QUOTAS = "/api/v1/resourcequotas"
BUDGETS = "/apis/policy/v1/poddisruptionbudgets"


@dataclass(frozen=True, slots=True)
class LastAllocation:
    """What the view last saw of a claim's allocation, at which resourceVersion: the
    claim's uid, whether it was allocated, the node, the uids of the pods reserving it."""

    version: int
    uid: str
    allocated: bool
    node: str
    reserved: frozenset[str]

    @classmethod
    def of(cls, claim: Mapping[str, Any]) -> LastAllocation:
        return cls(
            resource_version(claim),
            str(claim["metadata"].get("uid", "")),
            allocation_of(claim) is not None,
            allocated_node(claim) or "",
            frozenset(str(r.get("uid", "")) for r in reservations_of(claim)),
        )


def resource_version(obj: Mapping[str, Any]) -> int:
    """As an integer, as the assume cache compares them; -1 when it is not one."""
    try:
        return int(obj["metadata"].get("resourceVersion", ""))
    except ValueError:
        return -1


class ClusterHandlers(Protocol):
    """What reacts to each watched kind, after the informer stored the object."""

    def on_slice(self, kind: str, obj: dict[str, Any]) -> None: ...
    def on_claim(self, kind: str, obj: dict[str, Any]) -> None: ...
    def on_pod(self, kind: str, obj: dict[str, Any]) -> None: ...
    def on_node(self, kind: str, obj: dict[str, Any]) -> None: ...
    def on_class(self, kind: str, obj: dict[str, Any]) -> None: ...
    def on_quota(self, kind: str, obj: dict[str, Any]) -> None: ...


class ClusterView:
    """Informers, assume cache and pending writes; the inventory and engine built from them."""

    def __init__(
        self,
        client: KubeClient,
        settings: ControllerSettings,
        vendors: VendorRegistry,
        recorder: EventRecorder,
    ) -> None:
        self.settings = settings
        self.vendors = vendors
        self.recorder = recorder

        def informer(path: str, **selectors: str) -> Informer:
            return Informer(
                client,
                path,
                settings=settings.informer,
                transform=compact_object,
                **selectors,
            )

        self.slices = informer(SLICES, field_selector=f"spec.driver={settings.driver}")
        self.claims = informer(CLAIMS)
        self.pods = informer(PODS)
        self.nodes = informer(NODES)
        self.classes = informer(CLASSES)
        self.quotas = informer(QUOTAS)
        self.budgets = informer(BUDGETS)
        """PodDisruptionBudgets: they only steer preemption (preemptor.py), so no handler."""
        self.claim_view = AssumeCache(self.claims)
        self.node_filter = NodeFilter(self.pods.get, self.nodes.get)
        self.selectors = SelectorCache()
        self.inventory = Inventory()
        self.engine = Engine([])
        self.partition_usage = CounterUsage()
        """What the allocated MIG partitions hold: rebuilt with the engine, charged with it."""
        self._engine_inventory: Inventory | None = None
        self._claim_usage = ClaimUsageMemo()
        self.changes = 0
        """Counts what may change what the view shows (every watched event, every write
        started or finished, every engine refresh): equal counts, the same view."""
        self.pending: dict[str, dict[str, Any]] = {}
        """Claim key -> the allocation being written for it (charged to the engine)."""
        self._cel_devices: dict[tuple[str, int, str], CelDevice] = {}
        self._context: RequestContext | None = None
        self._inventory_stale = True
        self._usage_stale = True
        self._signatures: dict[str, Any] = {}
        self._claim_pods: dict[str, set[str]] = {}
        self._pod_claims: dict[str, set[str]] = {}
        self._deleted_pods: dict[str, set[str]] = {}
        """Deleted pods' uids, each with the keys of the claims whose reservedFor still
        names it: kept only while one does, so the table empties with the claims."""
        self._deleted_reservers: dict[str, set[str]] = {}
        """The same pairs by claim key."""
        self._last_allocations: dict[str, LastAllocation] = {}
        self.clearing: set[str] = set()
        """Claim keys whose allocation this process is taking back (move, sweep, undo)."""
        self._retained: dict[str, dict[str, Any]] = {}
        """Claim key -> a claim of ours deleted while a pod bound to its node reserved it."""
        self._legacy_backends = legacy_backends()
        self.legacy_holds: dict[str, LegacyHold] = {}
        """Pod key -> what a legacy pod holds (mixed mode only; empty otherwise)."""
        self._effective: tuple[int, tuple[dict[str, Any], ...]] | None = None
        """`effective_claims` as of the view's `changes` count."""

    @property
    def informers(self) -> tuple[Informer, ...]:
        return (
            self.slices,
            self.claims,
            self.pods,
            self.nodes,
            self.classes,
            self.quotas,
            self.budgets,
        )

    def subscribe(self, handlers: ClusterHandlers) -> None:
        """Feed each informer's events to `handlers`, ahead of the assume cache's own."""
        routes: tuple[tuple[Informer, Handler], ...] = (
            (self.slices, handlers.on_slice),
            (self.claims, handlers.on_claim),
            (self.pods, handlers.on_pod),
            (self.nodes, handlers.on_node),
            (self.classes, handlers.on_class),
            (self.quotas, handlers.on_quota),
        )
        for informer, handler in routes:
            informer.handlers.insert(0, handler)
            informer.handlers.append(self._counted)
        self.budgets.handlers.append(self._counted)

    def touch(self) -> None:
        """Something the view shows changed outside a watched event (a decision charged,
        a write started or finished, the engine rebuilt)."""
        self.changes += 1

    def _counted(self, kind: str, obj: dict[str, Any]) -> None:
        self.changes += 1

    # ---- what changed ---------------------------------------------------------------

    def note_slice(self, kind: str, obj: Mapping[str, Any]) -> None:
        self._inventory_stale = True
        self._usage_stale = True
        if kind == "DELETED":
            uid = obj["metadata"].get("uid")
            self.selectors.forget(lambda key: isinstance(key, tuple) and key[0] == uid)

    def note_class(self) -> None:
        """Class selectors and configs feed the request context: build it again; the
        names classes answer to are what kube-scheduler's NodeResourcesFit leaves to DRA."""
        self._context = None
        self.node_filter.set_dra_resources(dra_extended_resources(self.classes.store.values()))

    def forget_burst_memos(self) -> None:
        """Drop the memos a burst's decisions built (node_filter.py): called once the
        burst's pods and claims are gone, before the freed memory is given back."""
        self.node_filter.forget_memos()

    def mark_usage_stale(self) -> None:
        """Rebuild the engine before the next decision (usage or quota limits changed)."""
        self._usage_stale = True

    def note_claim(self, kind: str, claim: Mapping[str, Any]) -> bool:
        """Track the claim's usage signature; True if the usage changed (the engine is stale)."""
        key = object_key(claim)
        if kind == "DELETED" and self._still_used(claim):
            self._retained[key] = dict(claim)
            self._usage_stale = True
        self._forget_dropped_reservations(
            key, self._retained.get(key) if kind == "DELETED" else claim
        )
        signature = None if kind == "DELETED" else self.usage_signature(claim)
        changed = not self._is_own_echo(key, claim) and signature != self._signatures.get(key)
        if changed:
            self._usage_stale = True
        if signature is None:
            self._signatures.pop(key, None)
        else:
            self._signatures[key] = signature
        return changed

    def note_pod(self, key: str, pod: Mapping[str, Any], gone: bool) -> set[str]:
        """Index the pod's claims (and remember a deleted pod's uid); the keys of the claims
        it referred to before this event or refers to now."""
        previous = self._pod_claims.pop(key, set())
        for claim_key in previous:
            pods = self._claim_pods.get(claim_key)
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._claim_pods[claim_key]
        namespace = pod["metadata"].get("namespace")
        claims = {f"{namespace}/{name}" for name in pod_claim_names(pod).values() if name}
        if gone:
            self._remember_deleted(str(pod["metadata"].get("uid", "")), previous | claims)
        else:
            self._pod_claims[key] = claims
            for claim_key in claims:
                self._claim_pods.setdefault(claim_key, set()).add(key)
        return previous | claims

    def _remember_deleted(self, uid: str, claim_keys: set[str]) -> None:
        """Keep a deleted pod's uid while a claim in the view still reserves it, so that
        reservation reads as stale (a pod not in the store may also be one not seen yet)."""
        reserving = set()
        for claim_key in claim_keys:
            claim = self.claim_view.get(claim_key) or self._retained.get(claim_key)
            if claim is not None and any(r.get("uid") == uid for r in reservations_of(claim)):
                reserving.add(claim_key)
                self._deleted_reservers.setdefault(claim_key, set()).add(uid)
        if reserving:
            self._deleted_pods[uid] = reserving

    def _forget_dropped_reservations(self, key: str, claim: Mapping[str, Any] | None) -> None:
        """Deleted pods the claim's version that still counts (None: gone, not retained)
        no longer reserves are forgotten once no other claim reserves them either."""
        uids = self._deleted_reservers.pop(key, None)
        if not uids:
            return
        still = {str(r.get("uid", "")) for r in reservations_of(claim or {})} & uids
        if still:
            self._deleted_reservers[key] = still
        for uid in uids - still:
            reservers = self._deleted_pods.get(uid, set())
            reservers.discard(key)
            if not reservers:
                self._deleted_pods.pop(uid, None)

    def note_legacy_pod(self, key: str, pod: Mapping[str, Any], gone: bool) -> bool:
        """In mixed mode, track what the pod holds through HAMi's annotations; True if
        that changed (the engine is stale then). A gated pod holds nothing, whatever it
        was created with: nobody scheduled it."""
        if not self.settings.mixed_mode:
            return False
        hold = None if gone or is_gated(pod) else legacy_hold(pod, self._legacy_backends)
        if hold == self.legacy_holds.get(key):
            return False
        if hold is None:
            del self.legacy_holds[key]
        else:
            self.legacy_holds[key] = hold
        self._usage_stale = True
        return True

    def allocation_vanished(self, kind: str, claim: Mapping[str, Any]) -> LastAllocation | None:
        """Remember the claim's allocation; the last one seen when this event shows it
        gone although this process did not clear it and the claim is the same one
        (kube-scheduler's PostFilter took it back, or kube-controller-manager freed it).
        An event older than what the view saw (the watch lagging behind our own
        write) says nothing."""
        key = object_key(claim)
        if kind == "DELETED":
            self._last_allocations.pop(key, None)
            return None
        last = self._last_allocations.get(key)
        now = LastAllocation.of(claim)
        if last is not None and now.version <= last.version:
            return None
        if last is None and not now.allocated:
            return None
        self._last_allocations[key] = now
        if (
            last is None
            or not last.allocated
            or now.allocated
            or key in self.clearing
            or key in self.pending
            or last.uid != now.uid
            or claim["metadata"].get("deletionTimestamp")
        ):
            return None
        return last

    def _remember(self, stored: Mapping[str, Any]) -> None:
        """Our own write's result, unless the watch already showed a newer version."""
        key = object_key(stored)
        last = self._last_allocations.get(key)
        now = LastAllocation.of(stored)
        if last is None or now.version > last.version:
            self._last_allocations[key] = now

    def adopt(self, stored: dict[str, Any]) -> None:
        """Make a write we made part of the view before the watch shows it."""
        key = object_key(stored)
        self.claim_view.assume(stored)
        self._signatures[key] = self.usage_signature(stored)
        self._remember(stored)
        self.pending.pop(key, None)
        self.touch()

    def adopt_cleared(self, stored: dict[str, Any]) -> None:
        """An allocation we took back: the view shows it cleared, its capacity is free."""
        key = object_key(stored)
        self.claim_view.assume(stored)
        self._signatures[key] = self.usage_signature(stored)
        self._remember(stored)
        self._usage_stale = True
        self.touch()

    # ---- reading ----------------------------------------------------------------------

    def is_ours(self, claim: Mapping[str, Any]) -> bool:
        """Whether a request of the claim names one of this controller's DeviceClasses."""
        return names_class(claim.get("spec") or {}, self.settings.device_classes)

    def pods_referring(self, claim_key: str) -> Collection[str]:
        """The keys of the pods whose spec names the claim."""
        return self._claim_pods.get(claim_key, ())

    def pending_pods_referring(self, claim_key: str) -> list[str]:
        """The keys of the pending pods whose spec names the claim (they may still use it)."""
        return [
            key
            for key in self._claim_pods.get(claim_key, ())
            if (pod := self.pods.get(key)) is not None and is_pending(pod)
        ]

    def claims_of_pod(self, pod_key: str) -> Collection[str]:
        return self._pod_claims.get(pod_key, ())

    def pending_node(self, claim: Mapping[str, Any]) -> str | None:
        """The node of the allocation being written for the claim, if any."""
        pending = self.pending.get(object_key(claim))
        return allocated_node({"status": {"allocation": pending}}) if pending else None

    def usage_signature(self, claim: Mapping[str, Any] | None) -> Any:
        """What of a claim the usage depends on: its results, and whether they still hold
        capacity. A reservation added by kube-scheduler changes neither."""
        allocation = allocation_of(claim)
        if claim is None or allocation is None:
            return None
        results = tuple(
            (r.get("driver"), r.get("pool"), r.get("device"), str(r.get("consumedCapacity")))
            for r in (allocation.get("devices") or {}).get("results") or []
        )
        return (results, self.freed(claim))

    def freed(self, claim: Mapping[str, Any]) -> bool:
        """An allocation that no longer holds capacity in this controller's view.

        kube-controller-manager (or this controller) is about to clear it: the
        claim is being deleted and nobody reserves it, every pod that reserved it
        is gone or finished (kube-controller-manager drops those reservations, then
        the sweeper clears it), or it is ours, unreserved, and no pending pod refers
        to it (a gated pod is not pending: it holds nothing).
        """
        key = object_key(claim)
        if key in self.pending:
            return False
        reserved = reservations_of(claim)
        if claim["metadata"].get("deletionTimestamp") and not reserved:
            return True
        if reserved:
            namespace = claim["metadata"].get("namespace", "")
            return all(self._pod_finished(namespace, r) for r in reserved)
        return (
            not self.settings.allocate_standalone_claims
            and self.is_ours(claim)
            and not self.pending_pods_referring(key)
        )

    def effective_claims(self) -> tuple[dict[str, Any], ...]:
        """Allocated claims that hold capacity, own pending writes included. Remembered
        for as long as the view does not change (`changes`): the engine's refresh,
        preemption's holdings and the metrics snapshot then walk the claims once, which
        at 16,000 claims took ~150 ms each."""
        if self._effective is not None and self._effective[0] == self.changes:
            return self._effective[1]
        claims = []
        for stored in self.claim_view.values():
            pending = self.pending.get(object_key(stored))
            claim = stored
            if pending is not None:
                claim = {
                    **stored,
                    "status": {**(stored.get("status") or {}), "allocation": pending},
                }
            if allocation_of(claim) is not None and not self.freed(claim):
                claims.append(claim)
        for key, deleted in list(self._retained.items()):
            if self._still_used(deleted):
                claims.append(deleted)
            else:
                del self._retained[key]
                self._forget_dropped_reservations(key, None)
        self._effective = (self.changes, tuple(claims))
        return self._effective[1]

    def request_context(self) -> RequestContext:
        """One per inventory and set of classes, so its selection memo stays valid."""
        if self._context is None:
            self._context = RequestContext(
                driver=self.settings.driver,
                device_classes=self.settings.device_classes,
                classes=self.classes.store,
                inventory=self.inventory,
                selector_match=self._selector_match,
                vendors=self.vendors,
                partition_classes=self.settings.partition_classes,
            )
        return self._context

    def refresh(self) -> None:
        """Rebuild the inventory (with each new device's CEL view, before any decision
        needs it: built by the first decisions, 8,000 views lay among a burst's objects
        and kept its memory from being given back) and the engine if what they depend
        on changed."""
        if self._inventory_stale:
            previous_duplicates = self.inventory.duplicate_uuids
            self.inventory = build_inventory(
                self.slices.store.values(),
                self.settings.driver,
                frozenset({self.settings.allocation_taint_key}),
            )
            self._inventory_stale = False
            self._usage_stale = True
            self._context = None
            live = {device.cache_key for device in self.inventory.published()}
            self._cel_devices = {k: v for k, v in self._cel_devices.items() if k in live}
            for device in self.inventory.by_key.values():
                with contextlib.suppress(InvalidParameterError):  # the decisions report it
                    self._cel_view(device)
            report_duplicate_uuids(
                self.recorder, self.inventory.duplicate_uuids, previous_duplicates, self.nodes.get
            )
        if not self._usage_stale:
            return
        claims = self.effective_claims()
        usage = add_holds(
            self._claim_usage.usage_by_node(claims, self.inventory), self.legacy_holds.values()
        )
        quota = quota_ledger(self.quotas.store.values(), claims, self.inventory, self.vendors)
        self.partition_usage = partition_usage(claims, self.inventory.partitions)
        charge_holds(quota, self.legacy_holds.values())
        if self._engine_inventory is self.inventory:
            sync_engine(self.engine, self.inventory, usage, quota)
        else:
            self.engine = Engine(
                self.inventory.nodes.values(),
                usage,
                settings=EngineSettings(self.settings.gpu_policy, self.settings.node_policy),
                vendors=self.vendors,
                quota=quota,
            )
            self._engine_inventory = self.inventory
        self._usage_stale = False
        self.touch()
        self._effective = (self.changes, claims)

    def _is_own_echo(self, key: str, claim: Mapping[str, Any]) -> bool:
        """The watch shows an allocation this process is writing (before its response):
        the engine already holds it, nothing changed."""
        pending = self.pending.get(key)
        allocation = allocation_of(claim)
        if pending is None or allocation is None:
            return False
        share_ids = [
            r.get("shareID") for r in (allocation.get("devices") or {}).get("results") or []
        ]
        expected = [r.get("shareID") for r in pending["devices"]["results"]]
        return share_ids == expected

    def _still_used(self, claim: Mapping[str, Any]) -> bool:
        """A claim of ours whose allocation a pod bound to its node, neither finished nor
        gone, reserves: deleted, its share may still be in use there."""
        node = allocated_node(claim)
        if node is None or not self.is_ours(claim):
            return False
        namespace = claim["metadata"].get("namespace", "")
        for reference in reservations_of(claim):
            uid = reference.get("uid", "")
            pod = self.pods.get(f"{namespace}/{reference.get('name')}")
            if (
                pod is not None
                and uid not in self._deleted_pods
                and pod["metadata"].get("uid") == uid
                and not is_terminal(pod)
                and (pod.get("spec") or {}).get("nodeName") == node
            ):
                return True
        return False

    def _pod_finished(self, namespace: str, reference: Mapping[str, Any]) -> bool:
        uid = reference.get("uid", "")
        if uid in self._deleted_pods:
            return True
        pod = self.pods.get(f"{namespace}/{reference.get('name')}")
        return pod is not None and pod["metadata"].get("uid") == uid and is_terminal(pod)

    def _selector_match(self, expression: str, device: PublishedDevice) -> bool:
        return self.selectors.matches(expression, device.cache_key, self._cel_view(device))

    def _cel_view(self, device: PublishedDevice) -> CelDevice:
        """The device as selectors see it, built once per slice generation."""
        cel_device = self._cel_devices.get(device.cache_key)
        if cel_device is None:
            cel_device = cel_device_from_slice(device.driver, device.spec)
            self._cel_devices[device.cache_key] = cel_device
        return cel_device
