"""Allocate and GetPreferredAllocation against the API server.

One call at a time per node (HAMi takes a process-wide mutex too): read the
node lock, read the pod it names, decide (allocation.py: only an allocation in
the state the scheduler left it, within what this node registers), check the host's
libvgpu files, create the container's libvgpu cache dir, then write the
outcome back on the pod (`hami.io/vgpu-devices-to-allocate` with the served
container emptied; `hami.io/bind-phase` success once no container is left)
and release the lock.
A container HAMi's scheduler gave MIG slices (`hami.io/vgpu-mig-allocations`)
gets its instances instead (mig_allocate.py), created before the pod is written
and destroyed again if that write fails; the same patch records their runtime
identity in the annotation.
Any failure after the pod is known marks it `failed` and releases the lock,
so the node is not held for a pod kubelet has already rejected.

Every refusal is also a Warning Event (`VGPUAllocationRefused`, the message
kubelet gets): on the pod being served when there is one (a forged or stale
allocation, a missing libvgpu file), else on the node (no lock, a lock naming
no pod, or a lock holder not bound here, when the pod kubelet is admitting is
unknown), so a refusal is seen where `kubectl describe` looks, not only in the log.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from api.hami_annotations import (
    BIND_PHASE,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_MIG_ALLOCATIONS,
    BindPhase,
    RegisteredDevice,
)
from dra_driver.errors import DriverError
from dra_driver.kube.events import WARNING, EventRecorder, involved_object
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, NotFoundError, object_path
from dra_driver.objects.mig_allowlist import MigAllowlist
from kubeletplugin.deviceplugin.allocation import (
    AllocateError,
    ContainerGrant,
    PodRef,
    lock_holder,
    next_container,
    require_bound,
    require_registered,
    share_set,
)
from kubeletplugin.deviceplugin.devices import (
    preferred_replicas,
    registered_devices,
    replica_uuid,
)
from kubeletplugin.deviceplugin.mig_allocate import MigAllocator, MigAnswer, pod_mig_allocations
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.host_files import check_libvgpu_files
from kubeletplugin.mixed_reads import fetch_allocated_claims, fetch_node_pods, fetch_slice_uuids
from kubeletplugin.mixed_usage import allocate_overcommit, register_limits
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_dirs import CacheDirSettings, create_cache_dir, new_cache_nonce
from libvgpu.cache_paths import legacy_cache_location
from libvgpu.container_edits import ContainerEdits, build_container_edits
from libvgpu.settings import LibvgpuPaths

log = logging.getLogger(__name__)

NODES = "/api/v1/nodes"
EVENT_REASON_REFUSED = "VGPUAllocationRefused"


def pod_path(ref: PodRef) -> str:
    return object_path(f"/api/v1/namespaces/{ref.namespace}/pods", ref.name)


class PodAllocator:
    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        gpus: Callable[[], Sequence[GpuInfo]],
        sharing: Callable[[], SliceSettings],
        libvgpu: LibvgpuPaths,
        cache_dirs: CacheDirSettings,
        events: EventRecorder,
        *,
        disable_core_limit: bool = False,
        locker: NodeLocker | None = None,
        mixed_driver: str | None = None,
        mig: MigAllocator | None = None,
        mig_allowlist: Callable[[], MigAllowlist | None] = lambda: None,
    ) -> None:
        self.client = client
        self.node_name = node_name
        self.gpus = gpus
        self.sharing = sharing
        self.libvgpu = libvgpu
        self.cache_dirs = cache_dirs
        self.events = events
        self.disable_core_limit = disable_core_limit
        self.locker = locker or NodeLocker(client)
        self.mixed_driver = mixed_driver
        """Mixed mode: the DRA driver whose claims share these GPUs; None: legacy only."""
        self.mig = mig
        self.mig_allowlist = mig_allowlist
        self._serial = asyncio.Lock()

    @property
    def lock(self) -> asyncio.Lock:
        """Held through each Allocate: the MIG reconciler holds it for a pass, so it never
        destroys an instance an Allocate is creating, reusing or recording."""
        return self._serial

    async def allocate(self, device_ids: Sequence[str]) -> ContainerEdits | MigAnswer:
        """The edits for kubelet's next container request; AllocateError says why not."""
        async with self._serial:
            node = await self._node()
            try:
                ref = lock_holder(node)
                pod = await self._pod(ref)
                require_bound(pod, self.node_name)
            except AllocateError as error:
                self._refused(involved_object(node, "Node", "v1"), error)
                raise
            try:
                grant = next_container(pod, self.node_name, len(device_ids))
                registered = registered_devices(self.gpus(), self.sharing(), self.mig_allowlist())
                require_registered(grant, registered)
                if self.mixed_driver is not None:
                    await self._require_fit(pod, ref, registered, self.mixed_driver)
                edits = await self._mig_answer(pod, grant)
                if edits is None:
                    edits = await asyncio.to_thread(self._prepare, grant)
                    await self._record(grant)
                else:
                    await self._record_mig(grant, edits)
            except DriverError as error:
                refusal = (
                    error
                    if isinstance(error, AllocateError)
                    else AllocateError(f"pod {ref}: {error}")
                )
                await self._fail(ref, pod, refusal)
                if refusal is error:
                    raise
                raise refusal from error
            self._note_kubelet_choice(grant, device_ids)
            log.info(
                "allocated",
                extra={
                    "pod": str(ref),
                    "container": grant.container,
                    "gpus": ",".join(d.uuid for d in grant.devices),
                    "finished": grant.finished,
                },
            )
            return edits

    async def preferred(
        self, available: Sequence[str], must_include: Sequence[str], size: int
    ) -> list[str]:
        """Replicas of the GPUs the lock holder's next container was given, so kubelet's
        accounting follows the scheduler's choice; a plain spread when there is none."""
        wanted: list[str] = []
        try:
            ref = lock_holder(await self._node())
            pod = await self._pod(ref)
            require_bound(pod, self.node_name)
            wanted = [d.uuid for d in next_container(pod, self.node_name, size).devices]
        except DriverError as error:
            log.info("no pod to prefer devices for", extra={"reason": str(error)})
        return preferred_replicas(available, must_include, size, wanted)

    async def _require_fit(
        self,
        pod: Mapping[str, Any],
        ref: PodRef,
        registered: Sequence[RegisteredDevice],
        driver: str,
    ) -> None:
        """Mixed mode's second line: the pod's share on top of what the node runs (its
        other legacy pods, the DRA claims allocated on its GPUs) must fit each GPU."""
        node_pods = await fetch_node_pods(self.client, self.node_name)
        uuid_of = await fetch_slice_uuids(self.client, self.node_name, driver)
        claims = await fetch_allocated_claims(self.client)
        limits = register_limits(registered)
        problem = allocate_overcommit(pod, node_pods, claims, driver, uuid_of, limits)
        if problem is not None:
            raise AllocateError(f"pod {ref}: {problem}")

    async def _mig_answer(self, pod: Mapping[str, Any], grant: ContainerGrant) -> MigAnswer | None:
        """The container's MIG instances, None when the scheduler gave it no slice."""
        entries = pod_mig_allocations(pod, grant)
        if not any(entry.container_index == grant.position for entry in entries):
            return None
        if self.mig is None:
            raise AllocateError(
                f"pod {grant.pod} container {grant.container}: {VGPU_MIG_ALLOCATIONS} gives "
                "it MIG slices, but this device plugin manages no MIG instances"
            )
        return await asyncio.to_thread(self.mig.answer, grant, entries)

    async def _record_mig(self, grant: ContainerGrant, answer: MigAnswer) -> None:
        """Record the served container and its instances' identity; instances this call
        made are destroyed again when the pod cannot be written."""
        assert self.mig is not None
        try:
            await self._record(grant, {VGPU_MIG_ALLOCATIONS: answer.annotation})
        except DriverError:
            await asyncio.to_thread(self.mig.undo, answer.created)
            raise

    def _prepare(self, grant: ContainerGrant) -> ContainerEdits:
        """The container's edits, once the host has every file they mount (as the DRA
        plugin's prepare checks): kubelet would otherwise start it with empty mounts."""
        cache = legacy_cache_location(
            self.libvgpu, grant.pod_uid, grant.container, new_cache_nonce()
        )
        gpus = {gpu.uuid: gpu for gpu in self.gpus()}
        shares = share_set(grant, gpus, cache, self.disable_core_limit)
        edits = build_container_edits(shares, self.libvgpu)
        check_libvgpu_files(self.libvgpu, with_preload=not shares.disable_control)
        create_cache_dir(cache, self.libvgpu, self.cache_dirs)
        return edits

    async def _record(self, grant: ContainerGrant, extra: Mapping[str, str] | None = None) -> None:
        annotations = {VGPU_DEVICES_TO_ALLOCATE: grant.remaining, **(extra or {})}
        if grant.finished:
            annotations[BIND_PHASE] = BindPhase.SUCCESS.value
        await self.client.patch(pod_path(grant.pod), {"metadata": {"annotations": annotations}})
        if grant.finished:
            await self._release(grant.pod)

    def _refused(self, reference: dict[str, Any], refusal: AllocateError) -> None:
        """The refusal as a Warning Event on `reference`, written in the background."""
        self.events.emit(reference, WARNING, EVENT_REASON_REFUSED, str(refusal))

    async def _fail(self, ref: PodRef, pod: Mapping[str, Any], cause: AllocateError) -> None:
        """Tell the pod why (an Event), and mark it `failed` if it was being allocated; a
        pod already past allocation keeps its phase. Either way the lock it still holds
        is released."""
        log.warning("allocation failed", extra={"pod": str(ref), "error": str(cause)})
        self._refused(involved_object(pod, "Pod", "v1"), cause)
        phase = ((pod.get("metadata") or {}).get("annotations") or {}).get(BIND_PHASE)
        if phase != BindPhase.ALLOCATING:
            await self._release(ref)
            return
        try:
            await self.client.patch(
                pod_path(ref),
                {"metadata": {"annotations": {BIND_PHASE: BindPhase.FAILED.value}}},
            )
        except DriverError as error:
            log.error("bind-phase not marked failed", extra={"pod": str(ref), "error": str(error)})
        await self._release(ref)

    async def _release(self, ref: PodRef) -> None:
        try:
            await self.locker.release(self.node_name, ref.namespace, ref.name)
        except DriverError as error:
            log.error("node lock not released", extra={"pod": str(ref), "error": str(error)})

    async def _node(self) -> Mapping[str, Any]:
        try:
            return await self.client.get(object_path(NODES, self.node_name))
        except NotFoundError:
            raise AllocateError(f"node {self.node_name} not found") from None
        except DriverError as error:
            raise AllocateError(f"node {self.node_name} not read: {error}") from error

    async def _pod(self, ref: PodRef) -> Mapping[str, Any]:
        try:
            return await self.client.get(pod_path(ref))
        except NotFoundError:
            raise AllocateError(
                f"pod {ref}, named by the lock of node {self.node_name}, does not exist"
            ) from None
        except DriverError as error:
            raise AllocateError(f"pod {ref} not read: {error}") from error

    def _note_kubelet_choice(self, grant: ContainerGrant, device_ids: Sequence[str]) -> None:
        """kubelet's replicas count devices only; the GPUs served are the pod's. A
        difference is logged: kubelet did not follow GetPreferredAllocation."""
        kubelet_gpus = sorted({replica_uuid(d) or d for d in device_ids})
        granted = sorted(d.uuid for d in grant.devices)
        if kubelet_gpus != granted:
            log.info(
                "kubelet's replicas name other GPUs than the pod's device list",
                extra={"pod": str(grant.pod), "kubelet": kubelet_gpus, "granted": granted},
            )
