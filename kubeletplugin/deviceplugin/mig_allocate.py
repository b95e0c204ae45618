"""Allocate for a container HAMi's scheduler gave MIG slices: the instances themselves.

The extender reserved each slice in `hami.io/vgpu-mig-allocations` (card,
profile, placement; container numbered init containers first, as the device
list). Allocate creates, through the GPU backend, a GPU instance of that profile
at that placement with one compute instance spanning it, answers the container
with the MIG device (`NVIDIA_VISIBLE_DEVICES=<MIG uuid>`, and on a real node the
parent card's node, the instance's capability nodes and the control nodes, as
`cdi.mig` lists them for a DRA partition; no libvgpu) and hands back the
annotation with the runtime identity (MIG uuid, GPU and compute instance ids)
filled in, which HAMi's device plugin writes back on the pod
(`annotateMigRuntimeInfo`).

Idempotent: an entry whose instance the card still shows (its recorded ids, or,
with none recorded, an instance of its profile exactly at its placement, left by
an Allocate that stopped before it recorded) is reused. A refusal destroys what
this call created, so nothing is left half-made, and names the card, the
profile, the placement and what is free.

Each instance created is written to the device plugin's record (`mig_journal`)
right after the create, before anything else can fail: the reconciler destroys
it once its pod has ended, and only instances that record names. One the record
cannot take is destroyed again and the container refused.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from api.hami_annotations import (
    VGPU_MIG_ALLOCATIONS,
    AnnotationDecodeError,
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
)
from cdi.mig import NVIDIA_VISIBLE_DEVICES, MigDevice, mig_device_nodes
from dra_driver.objects.mig_profiles import Placement
from kubeletplugin.deviceplugin.allocation import AllocateError, ContainerGrant
from kubeletplugin.deviceplugin.mig_journal import MigJournal, MigJournalError, instance_key
from kubeletplugin.gpus import GpuBackend, GpuInfo, MigInstanceManager
from kubeletplugin.host_files import HostSetupError, host_device_nodes
from kubeletplugin.mig_caps import NVIDIA_CAPABILITIES, mig_cap_minors
from kubeletplugin.mig_free import free_placements
from kubeletplugin.mig_state import MigError, MigInstance, MigState
from libvgpu.container_edits import EnvVar

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device node kubelet gives the container (`DeviceSpec`)."""

    container_path: str
    host_path: str


@dataclass(frozen=True, slots=True)
class MigAnswer:
    """What one container's MIG slices give it, and what this call created."""

    env: tuple[EnvVar, ...]
    devices: tuple[DeviceNode, ...]
    annotation: str
    """`hami.io/vgpu-mig-allocations` with this container's runtime identities set."""

    created: tuple[tuple[str, MigInstance], ...]
    """(card uuid, instance) made by this call: what to destroy if the answer is not used."""


def pod_mig_allocations(pod: Mapping[str, Any], grant: ContainerGrant) -> list[MigAllocation]:
    """The pod's MIG allocations, every container's (the annotation is written whole)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    try:
        entries = decode_mig_allocations(annotations.get(VGPU_MIG_ALLOCATIONS, ""))
    except AnnotationDecodeError as error:
        raise AllocateError(f"pod {grant.pod}: {error}") from None
    return entries


class MigAllocator:
    """Creates and reuses the instances of a container's slices (blocking calls)."""

    def __init__(
        self,
        backend: GpuBackend,
        dev_dir: Path = Path("/dev"),
        caps_root: Path = NVIDIA_CAPABILITIES,
        journal: MigJournal | None = None,
    ) -> None:
        self.backend = backend
        self.dev_dir = dev_dir
        self.caps_root = caps_root
        self.journal = journal
        """Where created instances are recorded for the reconciler; None: not recorded."""

    def answer(self, grant: ContainerGrant, entries: Sequence[MigAllocation]) -> MigAnswer | None:
        """The container's MIG answer, None when it has no slice."""
        mine = sorted(
            (e for e in entries if e.container_index == grant.position),
            key=lambda e: e.device_index,
        )
        if not mine:
            return None
        where = f"pod {grant.pod} container {grant.container}"
        _require_only_slices(where, grant, mine)
        manager = self._manager(where)
        cards = {gpu.uuid: gpu for gpu in self.backend.discover()}
        created: list[tuple[str, MigInstance]] = []
        realised: dict[tuple[int, int], MigAllocation] = {}
        try:
            for entry in mine:
                gpu = _card(where, cards, entry)
                instance = _existing(gpu.mig, entry)
                if instance is None:
                    instance = _create(where, manager, gpu, entry)
                    created.append((gpu.uuid, instance))
                    self._record(where, grant, gpu.uuid, instance, new=True)
                else:
                    self._record(where, grant, gpu.uuid, instance, new=False)
                realised[(entry.container_index, entry.device_index)] = replace(
                    entry,
                    mig_uuid=instance.uuid,
                    gpu_instance_id=instance.gpu_instance_id,
                    compute_instance_id=instance.compute_instance_id,
                )
            devices = self._device_nodes(where, cards, list(realised.values()))
        except (AllocateError, HostSetupError):
            self.undo(created)
            raise
        updated = [realised.get((e.container_index, e.device_index), e) for e in entries]
        visible = ",".join(e.mig_uuid for e in realised.values())
        return MigAnswer(
            env=(EnvVar(NVIDIA_VISIBLE_DEVICES, visible),),
            devices=devices,
            annotation=encode_mig_allocations(updated),
            created=tuple(created),
        )

    def undo(self, created: Sequence[tuple[str, MigInstance]]) -> None:
        """Destroy instances this allocator made for an answer that was not given; one
        NVML refuses to destroy stays recorded, so the reconciler retries it once the
        pod (refused, hence failed) has ended."""
        if not created:
            return
        manager = self._manager("undo")
        destroyed = []
        for gpu_uuid, instance in reversed(created):
            try:
                manager.destroy_mig_instance(
                    gpu_uuid, instance.gpu_instance_id, instance.compute_instance_id
                )
            except MigError:
                continue
            destroyed.append(instance_key(gpu_uuid, instance))
        if self.journal is None:
            return
        try:
            self.journal.forget(destroyed)
        except MigJournalError as error:
            log.error("destroyed MIG instances still recorded", extra={"error": str(error)})

    def _record(
        self, where: str, grant: ContainerGrant, gpu_uuid: str, instance: MigInstance, new: bool
    ) -> None:
        """Write the instance to the record as the pod's; a record that cannot be written
        refuses the container (and the caller destroys what it created)."""
        if self.journal is None:
            return
        try:
            if new:
                self.journal.add(grant.pod, grant.pod_uid, gpu_uuid, instance)
            else:
                self.journal.hand_over(grant.pod, grant.pod_uid, gpu_uuid, instance)
        except MigJournalError as error:
            raise AllocateError(f"{where}: {error}") from error

    def _manager(self, where: str) -> MigInstanceManager:
        if not isinstance(self.backend, MigInstanceManager):
            raise AllocateError(f"{where}: this node's GPU backend cannot create MIG instances")
        return self.backend

    def _device_nodes(
        self, where: str, cards: Mapping[str, GpuInfo], realised: Sequence[MigAllocation]
    ) -> tuple[DeviceNode, ...]:
        """The parent cards', control and capability nodes; none on a mock node."""
        if not self.backend.has_device_nodes:
            return ()
        minors = [cards[e.gpu_uuid].minor for e in realised]
        nodes = host_device_nodes(self.dev_dir, minors)
        for entry, minor in zip(realised, minors, strict=True):
            assert entry.gpu_instance_id is not None and entry.compute_instance_id is not None
            caps = mig_cap_minors(
                minor, entry.gpu_instance_id, entry.compute_instance_id, self.caps_root
            )
            for path in mig_device_nodes(MigDevice("", minor, entry.mig_uuid, caps))[1:]:
                host = self.dev_dir / Path(path).relative_to("/dev")
                if not host.exists():
                    raise HostSetupError(
                        f"{where}: MIG capability node {host} of {entry.mig_uuid} is missing"
                    )
                nodes[path] = str(host)
        return tuple(DeviceNode(path, host) for path, host in nodes.items())


def _require_only_slices(where: str, grant: ContainerGrant, mine: Sequence[MigAllocation]) -> None:
    """The container's device list and its slices must agree: one slice per device entry,
    on the same cards; a container mixing a slice with a shared card is not served."""
    slice_cards = sorted(e.gpu_uuid for e in mine)
    device_cards = sorted(d.uuid for d in grant.devices)
    if slice_cards != device_cards:
        raise AllocateError(
            f"{where}: {VGPU_MIG_ALLOCATIONS} gives MIG slices on {slice_cards} but its device "
            f"list names {device_cards}; a container mixing MIG slices with shared GPUs is "
            "not served"
        )


def _card(where: str, cards: Mapping[str, GpuInfo], entry: MigAllocation) -> GpuInfo:
    gpu = cards.get(entry.gpu_uuid)
    if gpu is None:
        raise AllocateError(f"{where}: MIG card {entry.gpu_uuid} is not on this node")
    if not gpu.mig.partitionable:
        state = "a MIG mode change pending a GPU reset" if gpu.mig.reset_pending else "not MIG"
        raise AllocateError(
            f"{where}: GPU {gpu.uuid} is {state}; {entry.profile} at placement "
            f"{entry.start}:{entry.size} cannot be created"
        )
    profile = gpu.mig.profile(entry.profile)
    placement = Placement(entry.start, entry.size)
    if profile is None:
        names = ", ".join(p.name for p in gpu.mig.profiles)
        raise AllocateError(
            f"{where}: GPU {gpu.uuid} has no MIG profile {entry.profile} (it has {names})"
        )
    if placement not in profile.placements:
        raise AllocateError(
            f"{where}: placement {placement} is not one of {entry.profile}'s on GPU {gpu.uuid}; "
            f"free: {_free(gpu.mig, entry.profile)}"
        )
    return gpu


def _existing(state: MigState, entry: MigAllocation) -> MigInstance | None:
    """The instance the entry holds: its recorded one while the card shows it; with none
    recorded, one of its profile exactly at its placement."""
    placement = Placement(entry.start, entry.size)
    for instance in state.instances:
        if instance.profile != entry.profile or instance.placement != placement:
            continue
        if entry.gpu_instance_id is None or (
            instance.gpu_instance_id == entry.gpu_instance_id
            and instance.compute_instance_id == entry.compute_instance_id
            and instance.uuid == entry.mig_uuid
        ):
            return instance
    return None


def _create(
    where: str, manager: MigInstanceManager, gpu: GpuInfo, entry: MigAllocation
) -> MigInstance:
    try:
        return manager.create_mig_instance(gpu.uuid, entry.profile, entry.start)
    except MigError as error:
        raise AllocateError(
            f"{where}: MIG {entry.profile} at placement {entry.start}:{entry.size} on GPU "
            f"{gpu.uuid} not created: {error.reason}; free {entry.profile} placements: "
            f"{_free(gpu.mig, entry.profile)}"
        ) from error


def _free(state: MigState, profile_name: str) -> str:
    """The profile's placements an instance could take now (`mig_free`: NVML's rule)."""
    profile = state.profile(profile_name)
    if profile is None:
        return "none"
    return " ".join(str(p) for p in free_placements(state, profile)) or "none"
