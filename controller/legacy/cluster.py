"""The scheduler's view of the cluster: registered nodes, pod usage, quotas, one engine.

Fed by list-and-watch informers (nodes, pods, ResourceQuotas; in mixed mode
also ResourceSlices and ResourceClaims, `controller.legacy.dra_usage`, whose
allocations on the registered GPUs count as usage, and against their
namespaces' quotas). The engine is built from that view once and then kept
current: a pod's allocation appearing or going is charged to or released
from the engine (its node, and its namespace's quota of each vendor it
holds), a node whose devices change is replaced in it, and a claim's change
re-counts the quotas' use; only a quota change marks the engine stale, and
the next Filter rebuilds it. The extender's own placements are recorded when
it makes them, so the watch echo of its annotation patch finds nothing to
change, and a watch event older than what was applied is ignored, so a late
one cannot free a share Filter just gave out.

It also plays HAMi's part of the handshake: when a vendor's register annotation
or allocatable count changes on a node, it writes `Requesting_<now>` to that
vendor's handshake key (`hami.io/node-handshake` for NVIDIA,
`hami.io/node-handshake-dcu` for Hygon, ...). Every enabled vendor's devices
and pod keys are read (`controller.legacy.inventory`, `pod_usage`).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import AnnotationDecodeError
from controller.legacy.config import LegacySettings
from controller.legacy.dra_usage import DraHolds, DraUsage, NoDraUsage
from controller.legacy.inventory import (
    NodeInventory,
    UuidSightings,
    read_node_devices,
    requesting_handshake,
)
from controller.legacy.pod_usage import PodAllocation, pod_uid, read_pod_allocation
from controller.legacy.quota import quota_ledger
from controller.uuid_reports import report_duplicate_uuids
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.requests import PodRequest
from dra_driver.engine.vendor_backends.base import annotations_of
from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.errors import DriverError
from dra_driver.kube.events import EventRecorder
from dra_driver.kube.informer import Informer, InformerSettings, object_key
from dra_driver.kube.rest import KubeClient, NotFoundError, object_path
from dra_driver.process.runtime import cancel_and_wait

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
QUOTAS = "/api/v1/resourcequotas"


def _now() -> datetime:
    return datetime.now(UTC)


_PENDING = sys.maxsize
"""The version floor of a pod whose allocation Filter is still writing: ignore every event."""


def _version_number(version: str) -> int:
    """resourceVersions compared as integers, as kube-scheduler's assume cache does."""
    try:
        return int(version)
    except ValueError:
        return -1


def _node_fingerprint(
    node: Mapping[str, Any], backends: BackendRegistry
) -> tuple[tuple[Any, ...], ...]:
    """The parts of a node the inventory depends on (the lock annotation is not one):
    per vendor its register, handshake and allocatable count, then the cordons
    and pair scores."""
    annotations = annotations_of(node)
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    per_vendor = tuple(
        (
            annotations.get(backend.register_key) if backend.register_key else None,
            annotations.get(backend.handshake_key) if backend.handshake_key else None,
            allocatable.get(backend.count_resource),
        )
        for backend in backends
    )
    shared = (annotations.get(keys.DEVICE_CORDON), annotations.get(keys.NODE_NVIDIA_SCORE))
    return (*per_vendor, shared)


def _handshakes_due(
    backends: BackendRegistry,
    fingerprint: tuple[tuple[Any, ...], ...],
    previous: tuple[tuple[Any, ...], ...] | None,
) -> tuple[str, ...]:
    """The handshake keys to write `Requesting_` to: each vendor with a handshake whose
    register annotation is there and new, or whose allocatable count changed."""
    due = []
    for position, backend in enumerate(backends):
        register, _, allocatable = fingerprint[position]
        if backend.handshake_key is None or register is None:
            continue
        before = previous[position] if previous is not None else None
        if before is None or before[0] != register or before[2] != allocatable:
            due.append(backend.handshake_key)
    return tuple(due)


class ClusterState:
    """Informers plus the derived inventory, allocations and engine."""

    def __init__(
        self,
        client: KubeClient,
        settings: LegacySettings,
        *,
        clock: Callable[[], datetime] = _now,
        informer_settings: InformerSettings | None = None,
        write_handshakes: bool = True,
        events: EventRecorder | None = None,
    ) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self.write_handshakes = write_handshakes
        """The extender plays the scheduler's part of the handshake; a webhook-only
        process reads nodes for nothing and must not write to them."""
        self.events = events
        """Where node warnings go (device uuids registered twice); None: the log only."""
        self.backends = settings.backends()
        """Every enabled vendor: whose devices nodes are read for and whose pod keys
        count as usage."""
        self.vendors = self.backends.vendors()
        """Their adapters: the resource names each namespace quota is read by."""
        self.nodes = Informer(
            client,
            NODES,
            handlers=[self._on_node],
            label_selector=settings.node_label_selector,
            settings=informer_settings,
        )
        self.pods = Informer(client, PODS, handlers=[self._on_pod], settings=informer_settings)
        self.quotas = Informer(
            client, QUOTAS, handlers=[self._on_quota], settings=informer_settings
        )
        self.dra: DraHolds = (
            DraUsage(client, self._on_dra_usage, settings=informer_settings)
            if settings.mixed_mode
            else NoDraUsage()
        )
        """Mixed mode: what DRA claims hold on the registered GPUs (by uuid)."""
        self.inventory: dict[str, NodeInventory] = {}
        self.usable: set[str] = set()
        """Names of the nodes whose devices could be read (the engine's nodes)."""
        self.uuids = UuidSightings()
        """Which nodes register each device uuid (a repeat is logged and exported)."""
        self.allocations: dict[str, PodAllocation] = {}
        self.lock = asyncio.Lock()
        """Held while a Filter decides and commits, so two pods never get the same share."""
        self.rebuilds = 0
        self._fingerprints: dict[str, tuple[tuple[Any, ...], ...]] = {}
        self._engine: Engine | None = None
        self._versions: dict[str, int] = {}
        """Per pod, the newest resourceVersion applied (or _PENDING while Filter's
        own write is in flight): an older event is stale and ignored."""
        self._handshakes: asyncio.Queue[tuple[str, tuple[str, ...]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    # -- lifecycle

    async def start(self) -> None:
        """Start the informers and wait until each has listed once."""
        for informer, name in (
            (self.nodes, "legacy-nodes"),
            (self.pods, "legacy-pods"),
            (self.quotas, "legacy-quotas"),
            *((informer, f"legacy-dra {informer.path}") for informer in self.dra.informers),
        ):
            self._tasks.append(asyncio.create_task(informer.run(), name=name))
        if self.write_handshakes:
            self._tasks.append(
                asyncio.create_task(self._write_handshakes(), name="legacy-handshake")
            )
        self._tasks.append(asyncio.create_task(self._refresh_health(), name="legacy-health"))
        synced = asyncio.create_task(self._synced(), name="legacy-synced")
        try:
            await asyncio.wait([synced, *self._tasks], return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Stopped while the API server is away: nothing may outlive the start.
            await cancel_and_wait([synced])
            await self.aclose()
            raise
        if not synced.done():
            await cancel_and_wait([synced])
            failed = next(task for task in self._tasks if task.done())
            self._tasks.remove(failed)
            await self.aclose()
            error = None if failed.cancelled() else failed.exception()
            raise DriverError(f"cache {failed.get_name()} stopped before listing: {error}") from (
                error
            )

    async def _synced(self) -> None:
        for informer in (self.nodes, self.pods, self.quotas, *self.dra.informers):
            await informer.synced.wait()

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)
        self._tasks.clear()

    @property
    def ready(self) -> bool:
        """Every cache has listed and none of the background tasks has stopped."""
        informers = (self.nodes, self.pods, self.quotas, *self.dra.informers)
        synced = all(i.synced.is_set() for i in informers)
        return synced and bool(self._tasks) and not any(task.done() for task in self._tasks)

    # -- the engine

    def engine(self) -> Engine:
        """The current engine, rebuilt first if a node or quota changed."""
        if self._engine is None:
            self._engine = self._build_engine()
            self.rebuilds += 1
        return self._engine

    def _build_engine(self) -> Engine:
        return self.engine_for(
            [entry.node for entry in self.inventory.values() if entry.node is not None]
        )

    def engine_for(self, nodes: list[Node]) -> Engine:
        """An engine over these nodes with the usage and quotas this cache knows (the
        nodes a full-Nodes Filter was sent, which the cache may never have seen)."""
        usage: dict[str, dict[str, DeviceUsage]] = {}
        for allocation in self.allocations.values():
            per_node = usage.setdefault(allocation.placement.node, {})
            for device, amount in allocation.usage.items():
                per_node[device] = per_node.get(device, DeviceUsage()).plus(amount)
        for node in nodes:
            per_node = usage.setdefault(node.name, {})
            for device, amount in self.dra.node_usage(node.name).items():
                per_node[device] = per_node.get(device, DeviceUsage()).plus(amount)
        return Engine(
            nodes,
            usage,
            settings=self.settings.engine,
            vendors=self.vendors,
            quota=self.quota_ledger(),
        )

    def quota_ledger(self) -> QuotaLedger:
        """Every vendor's quota limits with what each namespace already holds of that
        vendor: its placed pods and (mixed mode) its DRA claims."""
        ledger = quota_ledger(self.quotas.store.values(), self.allocations.values(), self.vendors)
        self.dra.charge_quota(ledger, self.vendors)
        return ledger

    def record(self, allocation: PodAllocation) -> None:
        """Note an allocation the engine has already been charged with (by Filter).

        Until `confirm` gives the version that carries it, watch events of the
        pod are older than this allocation (its creation, say) and are ignored,
        so a late event cannot hand the share out a second time.
        """
        self.allocations[allocation.uid] = allocation
        self._versions[allocation.uid] = _PENDING

    def confirm(self, uid: str, resource_version: str) -> None:
        """The pod's annotations were written at `resource_version`: events from
        that version on are read as usual."""
        if self._versions.get(uid) == _PENDING:
            self._versions[uid] = _version_number(resource_version)

    def forget(self, uid: str) -> PodAllocation | None:
        """Drop a pod's allocation and give its share back to the engine."""
        if self._versions.get(uid) == _PENDING:
            del self._versions[uid]
        allocation = self.allocations.pop(uid, None)
        if allocation is not None:
            self._charge(allocation, release=True)
        return allocation

    def _charge(self, allocation: PodAllocation, *, release: bool) -> None:
        if self._engine is None:
            return
        request = PodRequest(allocation.namespace, allocation.name, ())
        if release:
            self._engine.release(request, allocation.placement)
        else:
            self._engine.commit(request, allocation.placement)

    def _node_usage(self, name: str) -> dict[str, DeviceUsage]:
        """Everything held on the node's devices: legacy pods and (mixed mode) DRA claims."""
        usage = self.legacy_usage(name)
        for device, amount in self.dra.node_usage(name).items():
            usage[device] = usage.get(device, DeviceUsage()).plus(amount)
        return usage

    def legacy_usage(self, name: str, *, excluding: str = "") -> dict[str, DeviceUsage]:
        """What the legacy pods on the node hold, leaving out the pod with uid `excluding`."""
        usage: dict[str, DeviceUsage] = {}
        for allocation in self.allocations.values():
            if allocation.placement.node == name and allocation.uid != excluding:
                for device, amount in allocation.usage.items():
                    usage[device] = usage.get(device, DeviceUsage()).plus(amount)
        return usage

    def _on_dra_usage(self, nodes: set[str]) -> None:
        """DRA claims' usage moved on these nodes: reset them in the engine, and the
        namespaces' quota use if any namespace has a quota."""
        if self._engine is None:
            return
        if self.quotas.store:
            self._engine.quota = self.quota_ledger()
        for name in nodes:
            entry = self.inventory.get(name)
            if entry is not None and entry.node is not None:
                self._engine.set_node(entry.node, self._node_usage(name))

    def device_indices(self, name: str) -> dict[str, int]:
        entry = self.inventory.get(name)
        if entry is None or entry.node is None:
            return {}
        return {device.id: device.index for device in entry.node.devices}

    # -- informer handlers (synchronous, called in order)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        name = object_key(node)
        if kind == "DELETED":
            self._fingerprints.pop(name, None)
            self.usable.discard(name)
            self.uuids.remove(name)
            if self.inventory.pop(name, None) is not None and self._engine is not None:
                self._engine.remove_node(name)
            return
        fingerprint = _node_fingerprint(node, self.backends)
        previous = self._fingerprints.get(name)
        if previous == fingerprint:
            return
        self._fingerprints[name] = fingerprint
        due = _handshakes_due(self.backends, fingerprint, previous)
        if self.write_handshakes and due:
            self._handshakes.put_nowait((name, due))
        self._reread(node)

    def read(self, node: Mapping[str, Any]) -> NodeInventory:
        """A Node object read with this scheduler's vendors, clock and health rules."""
        return read_node_devices(node, self.backends, self.clock(), self.settings.handshake_timeout)

    def _reread(self, node: Mapping[str, Any]) -> None:
        entry = self.read(node)
        if entry.problem and entry.register_value is not None:
            log.warning("node unusable", extra={"node": entry.name, "reason": entry.problem})
        if self.inventory.get(entry.name) == entry:
            return
        for vendor in entry.vendors if entry.node is not None else ():
            if vendor.problem and vendor.register_value is not None:
                log.warning(
                    "vendor devices unreadable",
                    extra={"node": entry.name, "vendor": vendor.vendor, "reason": vendor.problem},
                )
        self.inventory[entry.name] = entry
        previous_duplicates = self.uuids.duplicates()
        self.uuids.update(entry.name, entry.registered_ids)
        report_duplicate_uuids(
            self.events, self.uuids.duplicates(), previous_duplicates, self.nodes.get
        )
        if entry.node is None:
            self.usable.discard(entry.name)
        else:
            self.usable.add(entry.name)
        if self._engine is None:
            return
        if entry.node is None:
            self._engine.remove_node(entry.name)
        else:
            self._engine.set_node(entry.node, self._node_usage(entry.name))

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        uid = pod_uid(pod)
        if kind == "DELETED":
            self._versions.pop(uid, None)
        else:
            version = _version_number((pod.get("metadata") or {}).get("resourceVersion", ""))
            if version < self._versions.get(uid, -1):
                return
            self._versions[uid] = version
        allocation = None
        if kind != "DELETED":
            try:
                allocation = read_pod_allocation(pod, self.backends, self.device_indices)
            except AnnotationDecodeError as error:
                log.warning(
                    "pod device annotation unreadable; not counted",
                    extra={"pod": object_key(pod), "error": str(error)},
                )
        previous = self.allocations.get(uid)
        if (
            previous is not None
            and allocation is not None
            and (
                previous.placement.node == allocation.placement.node
                and previous.usage == allocation.usage
            )
        ):
            return
        self.forget(uid)
        if allocation is not None:
            self.allocations[uid] = allocation
            self._charge(allocation, release=False)

    def _on_quota(self, kind: str, quota: dict[str, Any]) -> None:
        self._engine = None

    # -- handshake and health

    async def _write_handshakes(self) -> None:
        while True:
            name, handshake_keys = await self._handshakes.get()
            value = requesting_handshake(self.clock())
            body = {"metadata": {"annotations": dict.fromkeys(handshake_keys, value)}}
            try:
                await self.client.patch(object_path(NODES, name), body)
            except NotFoundError:
                continue
            except DriverError as error:
                log.warning("handshake not written", extra={"node": name, "error": str(error)})

    async def _refresh_health(self) -> None:
        """Handshake age changes with time alone, so re-read every node periodically."""
        while True:
            await asyncio.sleep(self.settings.health_interval_s)
            self.refresh_health()

    def refresh_health(self) -> None:
        for node in list(self.nodes.store.values()):
            self._reread(node)
