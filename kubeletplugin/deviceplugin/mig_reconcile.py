"""Destroys the MIG instances the device plugin created for pods that have ended.

HAMi's device plugin runs such a reconciler too (`runMigAnnotationReconciler`,
every 5 s: it lists the node's pods and destroys the instances its in-memory
manager holds that no pod still running names; at start it also wipes every
instance on a MIG card no pod uses, an administrator's included). This one:

- learns the node's pods from an informer (`fieldSelector=spec.nodeName=<node>`),
  so a pod deleted, Succeeded or Failed triggers a pass at once; a periodic
  resync (`resync_s`) retries what NVML refused (IN_USE while a process still
  holds the instance) and catches what events cannot show;
- knows what it created from its own record (`mig_journal`), which outlives its
  restarts: an instance whose pod was deleted while the plugin was down is
  destroyed on start, because the record names it and a GET of the pod answers
  404 (or a pod of another uid);
- decides by `mig_cleanup.plan_cleanup` (only recorded instances, only of ended
  pods, never one a live pod's annotation names);
- holds the Allocate lock for a whole pass, so it never destroys an instance an
  Allocate is creating, reusing or recording.

A destroy NVML refuses is logged and retried on the next pass; the pass goes on
with the other instances. Each destroy is logged with the pod, card, profile,
placement and MIG uuid.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from api.hami_annotations import VGPU_MIG_ALLOCATIONS
from dra_driver.errors import DriverError
from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient, NotFoundError
from dra_driver.process.runtime import wait_event
from kubeletplugin.deviceplugin.allocator import pod_path
from kubeletplugin.deviceplugin.mig_cleanup import (
    CleanupPlan,
    live_slices,
    plan_cleanup,
    pod_ended,
    pod_uid,
)
from kubeletplugin.deviceplugin.mig_journal import InstanceKey, MigJournal, MigRecord
from kubeletplugin.gpus import GpuBackend, GpuInfo, MigInstanceManager
from kubeletplugin.mig_state import MigError, MigNotFoundError

log = logging.getLogger(__name__)

PODS = "/api/v1/pods"


@dataclass(frozen=True, slots=True)
class MigReconcileSettings:
    resync_s: float = 30.0
    """Seconds between passes without a pod event: how soon a destroy NVML refused is
    retried (HAMi: a pass every 5 s, each a full list of the node's pods)."""


@dataclass(frozen=True, slots=True)
class PassOutcome:
    destroyed: tuple[MigRecord, ...] = ()
    refused: tuple[tuple[MigRecord, str], ...] = ()
    forgotten: tuple[MigRecord, ...] = ()


class MigReconciler:
    """The informer, the pass loop and the destroys; counters for tests and status."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        backend: GpuBackend,
        journal: MigJournal,
        lock: asyncio.Lock,
        settings: MigReconcileSettings | None = None,
    ) -> None:
        if not isinstance(backend, MigInstanceManager):
            raise TypeError(f"{type(backend).__name__} cannot destroy MIG instances")
        self.client = client
        self.node_name = node_name
        self.backend = backend
        self.manager: MigInstanceManager = backend
        self.journal = journal
        self.lock = lock
        """The Allocate lock: a pass and an Allocate never interleave."""
        self.settings = settings or MigReconcileSettings()
        self.informer = Informer(
            client,
            PODS,
            field_selector=f"spec.nodeName={node_name}",
            handlers=[self._on_pod],
            transform=_slim_pod,
        )
        self.passes = 0
        self.destroyed = 0
        self.refused = 0
        self._half_destroyed: set[InstanceKey] = set()
        self._due = asyncio.Event()
        self._changed = asyncio.Condition()

    async def run(self) -> None:
        """The informer and the pass loop, until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.informer.run(), name="MIG reconciler pod informer")
            group.create_task(self._loop(), name="MIG reconciler passes")

    async def wait_for(self, predicate: Callable[[MigReconciler], bool]) -> None:
        """Wait until `predicate(self)` holds (checked after every pass)."""
        async with self._changed:
            await self._changed.wait_for(lambda: predicate(self))

    async def reconcile(self) -> PassOutcome:
        """One pass: destroy what the plan says, drop what is gone, count refusals."""
        async with self.lock:
            outcome = await self._pass()
        self.passes += 1
        self.destroyed += len(outcome.destroyed)
        self.refused += len(outcome.refused)
        async with self._changed:
            self._changed.notify_all()
        return outcome

    async def _loop(self) -> None:
        await self.informer.synced.wait()
        while True:
            self._due.clear()
            try:
                await self.reconcile()
            except (DriverError, MigError) as error:
                log.warning(
                    "MIG reconcile pass failed; retrying",
                    extra={
                        "node": self.node_name,
                        "error": str(error),
                        "retry_in_s": self.settings.resync_s,
                    },
                )
            await wait_event(self._due, self.settings.resync_s)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED" or pod_ended(pod):
            self._due.set()

    async def _pass(self) -> PassOutcome:
        records = await asyncio.to_thread(self.journal.records)
        if not records:
            return PassOutcome()
        gpus: Sequence[GpuInfo] = await asyncio.to_thread(self.backend.discover)
        pods = list(self.informer.store.values())
        plan = plan_cleanup(
            records,
            {gpu.uuid: gpu.mig for gpu in gpus},
            await self._ended_owners(records, pods),
            live_slices(pods),
            self._half_destroyed,
        )
        for record, reason in plan.keep:
            log.debug("MIG instance kept", extra={**_fields(record), "reason": reason})
        return await asyncio.to_thread(self._apply, plan)

    async def _ended_owners(
        self, records: Iterable[MigRecord], pods: Iterable[dict[str, Any]]
    ) -> set[str]:
        """Uids of the recorded pods that have ended: by the informer's copy, or, for a
        pod it does not hold (deleted, or not seen yet), by a GET."""
        known = {pod_uid(pod): pod for pod in pods}
        ended = set()
        for record in {r.pod_uid: r for r in records}.values():
            pod = known.get(record.pod_uid)
            if pod is not None:
                if pod_ended(pod):
                    ended.add(record.pod_uid)
                continue
            try:
                current = await self.client.get(pod_path(record.pod))
            except NotFoundError:
                ended.add(record.pod_uid)
                continue
            except DriverError as error:
                log.warning(
                    "pod of a MIG instance not read; instance kept",
                    extra={"pod": str(record.pod), "error": str(error)},
                )
                continue
            if pod_uid(current) != record.pod_uid or pod_ended(current):
                ended.add(record.pod_uid)
        return ended

    def _apply(self, plan: CleanupPlan) -> PassOutcome:
        """The destroys (blocking NVML calls), then one write of the record."""
        destroyed: list[MigRecord] = []
        refused: list[tuple[MigRecord, str]] = []
        forgotten = list(plan.forget)
        for record in plan.destroy:
            instance = record.instance
            try:
                self.manager.destroy_mig_instance(
                    record.gpu_uuid, instance.gpu_instance_id, instance.compute_instance_id
                )
            except MigNotFoundError:
                forgotten.append(record)
                continue
            except MigError as error:
                self._half_destroyed.add(record.key)
                refused.append((record, str(error)))
                log.warning(
                    "MIG instance of an ended pod not destroyed; retrying",
                    extra={
                        **_fields(record),
                        "error": str(error),
                        "retry_in_s": self.settings.resync_s,
                    },
                )
                continue
            destroyed.append(record)
            log.info("MIG instance of an ended pod destroyed", extra=_fields(record))
        for record in forgotten:
            log.info("recorded MIG instance no longer on its card", extra=_fields(record))
        gone = [r.key for r in (*destroyed, *forgotten)]
        self._half_destroyed.difference_update(gone)
        self.journal.forget(gone)
        return PassOutcome(tuple(destroyed), tuple(refused), tuple(forgotten))


def _fields(record: MigRecord) -> dict[str, Any]:
    instance = record.instance
    return {
        "pod": str(record.pod),
        "pod_uid": record.pod_uid,
        "gpu": record.gpu_uuid,
        "profile": instance.profile,
        "placement": str(instance.placement),
        "mig_uuid": instance.uuid,
        "gpu_instance": instance.gpu_instance_id,
        "compute_instance": instance.compute_instance_id,
    }


def _slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What a pass reads of a pod: its identity, phase and MIG annotation."""
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    slim = {
        key: metadata[key]
        for key in ("name", "namespace", "uid", "resourceVersion")
        if key in metadata
    }
    if VGPU_MIG_ALLOCATIONS in annotations:
        slim["annotations"] = {VGPU_MIG_ALLOCATIONS: annotations[VGPU_MIG_ALLOCATIONS]}
    return {"metadata": slim, "status": {"phase": (pod.get("status") or {}).get("phase")}}
