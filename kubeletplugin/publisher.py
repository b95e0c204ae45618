"""Keeps the node's ResourceSlice pool on the API server equal to its GPUs.

Whatever sits on the server under this node and driver is ours: slices that
someone else changed are written back, strays are deleted. kubelet deletes
every slice of its node whenever it starts and 30 s after a plugin
deregisters, so a watch on our own slices republishes as soon as one goes
missing instead of waiting for the next health change.

Writes follow the rules consumers rely on: every change gets a new pool
generation, all slices of the new generation are written before the surplus
of the old one is deleted (consumers only look at the highest generation),
and content that is already there is never written again, so a restarted
plugin leaves its slices untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from api.quantity import QuantityError, parse_quantity
from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.informer import Informer, InformerSettings
from dra_driver.kube.rest import ConflictError, KubeClient, NotFoundError, object_path
from dra_driver.process.runtime import cancel_and_wait
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

log = logging.getLogger(__name__)

RESOURCE_SLICES = "/apis/resource.k8s.io/v1/resourceslices"
NODES = "/api/v1/nodes"

T = TypeVar("T")
Slice = dict[str, Any]


class NodeNotFoundError(DriverError):
    """The Node object is missing: slices are owned by it, so none can be published."""

    def __init__(self, node_name: str) -> None:
        super().__init__(
            f"node {node_name!r} not found: its ResourceSlices need the Node as their owner"
        )
        self.node_name = node_name


@dataclass(frozen=True, slots=True)
class PublisherSettings:
    retry_delay_s: float = 0.1
    """First pause after a conflict or transient API error; doubles on every further try."""

    max_retry_delay_s: float = 5.0
    """Longest pause between tries; also the pause before the watch loop redoes a failed pass."""

    attempts: int = 8
    """Tries of one request before `publish` gives up with the error; the watch
    loop keeps retrying in the background after that."""

    informer: InformerSettings = field(default_factory=InformerSettings)


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """What one publishing pass does: slices to write (with the resourceVersion
    they replace, None to create), then names to delete."""

    generation: int
    desired: tuple[Slice, ...]
    writes: tuple[tuple[Slice, str | None], ...]
    deletes: tuple[str, ...]


def plan_pool(
    existing: Sequence[Slice], build: Callable[[int], list[Slice]], floor: int
) -> PoolPlan:
    """Keep the pool if it already holds the desired content at its highest
    generation; else a generation above both that and `floor` (the last one we
    published), every desired slice written, every other slice deleted."""
    by_name = {_name(item): item for item in existing}
    current = max((_generation(item) for item in existing), default=0)
    kept = build(current)
    if by_name.keys() == {_name(item) for item in kept} and all(
        comparable(by_name[_name(item)]) == comparable(item) for item in kept
    ):
        return PoolPlan(current, tuple(kept), (), ())
    generation = max(current, floor) + 1
    desired = build(generation)
    names = {_name(item) for item in desired}
    return PoolPlan(
        generation,
        tuple(desired),
        tuple((item, _version(by_name.get(_name(item)))) for item in desired),
        tuple(name for name in by_name if name not in names),
    )


def comparable(resource_slice: Mapping[str, Any]) -> dict[str, Any]:
    """The parts of a slice we own, in a form where the server's rewriting
    (canonical quantities, `timeAdded` stamped on taints, dropped empty lists)
    does not read as a change."""
    spec = dict(resource_slice.get("spec") or {})
    spec["devices"] = [_comparable_device(device) for device in spec.get("devices") or []]
    metadata = resource_slice.get("metadata") or {}
    return {"ownerReferences": metadata.get("ownerReferences") or [], "spec": spec}


def _comparable_device(device: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(device)
    if "taints" in result:
        result["taints"] = [
            {key: value for key, value in taint.items() if key != "timeAdded"}
            for taint in result["taints"]
        ]
    if "capacity" in result:
        result["capacity"] = {
            name: _comparable_capacity(capacity) for name, capacity in result["capacity"].items()
        }
    return result


def _comparable_capacity(capacity: Mapping[str, Any]) -> dict[str, Any]:
    result = dict(capacity)
    result["value"] = _amount(capacity.get("value"))
    policy = capacity.get("requestPolicy")
    if isinstance(policy, Mapping):
        normal = dict(policy)
        if "default" in normal:
            normal["default"] = _amount(normal["default"])
        if isinstance(normal.get("validRange"), Mapping):
            normal["validRange"] = {k: _amount(v) for k, v in normal["validRange"].items()}
        if isinstance(normal.get("validValues"), list):
            normal["validValues"] = [_amount(v) for v in normal["validValues"]]
        result["requestPolicy"] = normal
    return result


def _amount(value: Any) -> Any:
    try:
        return parse_quantity(str(value))
    except QuantityError:
        return value


def _name(resource_slice: Mapping[str, Any]) -> str:
    return str((resource_slice.get("metadata") or {}).get("name", ""))


def _version(resource_slice: Mapping[str, Any] | None) -> str | None:
    if resource_slice is None:
        return None
    return (resource_slice.get("metadata") or {}).get("resourceVersion")


def _generation(resource_slice: Mapping[str, Any]) -> int:
    generation = ((resource_slice.get("spec") or {}).get("pool") or {}).get("generation", 0)
    return generation if isinstance(generation, int) else 0


def _at_version(resource_slice: Slice, version: str) -> Slice:
    return {
        **resource_slice,
        "metadata": {**resource_slice["metadata"], "resourceVersion": version},
    }


class SlicePublisher:
    """Publishes one node's pool: `start()` begins watching, `publish(gpus)` on
    every health or config change, `remove_all()` on uninstall, `aclose()` to stop.

    `generation` is the pool generation on the server, `publishes` counts
    passes that wrote; `wait_for` lets callers await either.
    """

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        settings: SliceSettings,
        publisher_settings: PublisherSettings | None = None,
    ) -> None:
        # The kubelet plugin's calls, wherever the publisher runs (RBAC audit).
        self.client = client.for_component("kubelet-plugin")
        self.node_name = node_name
        self.settings = settings
        self.publisher_settings = publisher_settings or PublisherSettings()
        self.generation = 0
        self.publishes = 0
        self.field_selector = f"spec.nodeName={node_name},spec.driver={settings.driver}"
        self._gpus: tuple[GpuInfo, ...] | None = None
        self._desired: dict[str, dict[str, Any]] = {}
        self._written: dict[str, str] = {}
        self._in_sync = False
        self._lock = asyncio.Lock()
        self._changed = asyncio.Condition()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> SlicePublisher:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Watch our slices and adopt the generation already on the server."""
        if self._tasks:
            return
        informer = Informer(
            self.client,
            RESOURCE_SLICES,
            handlers=[self._on_event],
            field_selector=self.field_selector,
            settings=self.publisher_settings.informer,
        )
        watch = asyncio.create_task(informer.run(), name=f"slice-watch-{self.node_name}")
        synced = asyncio.create_task(informer.synced.wait(), name="slice-watch-synced")
        try:
            await asyncio.wait((watch, synced), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            # Stopped while the API server is away: the watch must not outlive the start.
            await cancel_and_wait([synced, watch])
            raise
        if watch.done():
            synced.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await synced
            watch.result()
        watch.add_done_callback(self._watch_ended)
        self._tasks = [
            watch,
            asyncio.create_task(self._follow(), name=f"slice-republish-{self.node_name}"),
        ]
        async with self._changed:
            self.generation = max(self.generation, *map(_generation, informer.store.values()), 0)
            self._changed.notify_all()

    async def aclose(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def publish(self, gpus: Sequence[GpuInfo], settings: SliceSettings | None = None) -> None:
        """Make the pool describe `gpus` (under new `settings` when given, e.g.
        after a config change); no request at all when the watch says the
        server already holds exactly that."""
        wanted = tuple(gpus)
        if settings is not None and settings != self.settings:
            if settings.driver != self.settings.driver:
                raise ValueError("the driver name of a running publisher cannot change")
            self.settings = settings
            self._in_sync = False
        if self._in_sync and self._watching() and wanted == self._gpus:
            return
        self._gpus = wanted
        try:
            await self._reconcile()
        except (TransientError, ConflictError):
            self._wake.set()
            raise

    async def remove_all(self) -> None:
        """Delete every slice of this node and driver and stop republishing them
        (until the next `publish`)."""
        async with self._lock:
            self._gpus, self._desired, self._in_sync = None, {}, False
            for item in await self._retrying(self._list):
                await self._delete(_name(item))
            async with self._changed:
                self.publishes += 1
                self._changed.notify_all()

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Wait until `predicate()` holds; checked after every publishing pass."""
        async with self._changed:
            await self._changed.wait_for(predicate)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """Wake the republisher when the server stops matching what we want;
        ignore the echoes of our own writes and deletes."""
        if self._gpus is None:
            return
        name = _name(obj)
        wanted = self._desired.get(name)
        if kind == "DELETED":
            drifted = wanted is not None
        else:
            ours = _version(obj) == self._written.get(name)
            drifted = not ours and (wanted is None or comparable(obj) != wanted)
        if drifted:
            self._in_sync = False
            self._wake.set()

    async def _follow(self) -> None:
        """Republish after every drift, coalescing bursts (kubelet deletes all
        slices at once); retry failed passes until they succeed (a deleted Node
        comes back when its kubelet re-registers it)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._reconcile()
            except (TransientError, ConflictError, NodeNotFoundError) as error:
                log.warning("republishing failed, retrying", extra={"error": str(error)})
                await asyncio.sleep(self.publisher_settings.max_retry_delay_s)
                self._wake.set()
            except DriverError as error:
                log.error("republishing failed", extra={"error": str(error)})

    def _watching(self) -> bool:
        return bool(self._tasks) and not self._tasks[0].done()

    def _watch_ended(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "slice watch stopped: deleted slices will not be republished",
                extra={"node": self.node_name, "error": str(task.exception())},
            )

    async def _reconcile(self) -> None:
        async with self._lock:
            gpus = self._gpus
            if gpus is None:
                return
            self._in_sync = False
            node_uid = await self._retrying(self._node_uid)
            existing = await self._retrying(self._list)
            plan = plan_pool(
                existing,
                lambda generation: build_resource_slices(
                    self.node_name, node_uid, gpus, self.settings, generation
                ),
                self.generation,
            )
            self._desired = {_name(item): comparable(item) for item in plan.desired}
            for item, version in plan.writes:
                written = await self._write(item, version)
                self._written[_name(item)] = _version(written) or ""
            for name in plan.deletes:
                await self._delete(name)
                self._written.pop(name, None)
            self._in_sync = not self._wake.is_set()
            async with self._changed:
                self.generation = plan.generation
                if plan.writes or plan.deletes:
                    self.publishes += 1
                    log.info(
                        "published ResourceSlices",
                        extra={
                            "node": self.node_name,
                            "generation": plan.generation,
                            "slices": len(plan.desired),
                        },
                    )
                self._changed.notify_all()

    async def _node_uid(self) -> str:
        try:
            node = await self.client.get(object_path(NODES, self.node_name))
        except NotFoundError:
            raise NodeNotFoundError(self.node_name) from None
        return str(node["metadata"]["uid"])

    async def _list(self) -> list[Slice]:
        listing = await self.client.list(RESOURCE_SLICES, field_selector=self.field_selector)
        return list(listing.get("items") or [])

    async def _write(self, resource_slice: Slice, version: str | None) -> Slice:
        """Create or replace one slice; after a failure re-read its
        resourceVersion, since someone else (or our timed-out try) changed it."""
        path = object_path(RESOURCE_SLICES, _name(resource_slice))
        first = True

        async def attempt() -> Slice:
            nonlocal first, version
            if not first:
                version = await self._current_version(path)
            first = False
            if version is None:
                return await self.client.create(RESOURCE_SLICES, resource_slice)
            try:
                return await self.client.replace(path, _at_version(resource_slice, version))
            except NotFoundError:
                return await self.client.create(RESOURCE_SLICES, resource_slice)

        return await self._retrying(attempt)

    async def _current_version(self, path: str) -> str | None:
        try:
            return _version(await self.client.get(path))
        except NotFoundError:
            return None

    async def _delete(self, name: str) -> None:
        async def attempt() -> None:
            with contextlib.suppress(NotFoundError):
                await self.client.delete(object_path(RESOURCE_SLICES, name))

        await self._retrying(attempt)

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """Retry conflicts and transient errors with exponential backoff."""
        settings = self.publisher_settings
        delay = settings.retry_delay_s
        attempt = 1
        while True:
            try:
                return await call()
            except (TransientError, ConflictError) as error:
                if attempt >= settings.attempts:
                    raise
                log.info("retrying", extra={"attempt": attempt, "error": str(error)})
            await asyncio.sleep(delay)
            delay = min(delay * 2, settings.max_retry_delay_s)
            attempt += 1
