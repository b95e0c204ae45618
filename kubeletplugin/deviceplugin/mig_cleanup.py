"""Which MIG instances the device plugin destroys now: a decision without I/O.

The legacy device plugin creates a MIG instance at Allocate (`mig_allocate`) and
nothing else destroys it when the pod ends, so the reconciler (`mig_reconcile`)
asks this module, on each pod event and periodically, what to do with each
instance the plugin recorded (`mig_journal`). An instance is destroyed only when
every one of these holds:

- the plugin created it (it is in the record: never an administrator's instance,
  never a partition the DRA kubelet plugin prepared);
- its card still shows it exactly (GPU and compute instance ids, MIG uuid, profile,
  placement): an instance gone from the card is dropped from the record instead;
- the pod it was made for has ended: the pod object is gone (or its name now
  belongs to a pod with another uid) or its phase is Succeeded or Failed. A pod
  being deleted (deletionTimestamp set) still runs its containers until kubelet
  stops them, so it has not ended (HAMi's reconciler, which lists pods every 5 s,
  counts it as ended; here the instance waits for the pod's last event);
- no pod that has not ended names a slice on the same card overlapping its
  placement in `hami.io/vgpu-mig-allocations` (a pod the scheduler placed there
  may be in Allocate, about to reuse it). If such a pod's annotation cannot be
  read, nothing is destroyed: what it holds is unknown.

Preferring to leave an instance over destroying one in use is the rule throughout:
a card discovery does not show, or an owner whose state could not be read, keeps
the instance until a later pass.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.hami_annotations import VGPU_MIG_ALLOCATIONS, AnnotationDecodeError
from api.hami_annotations.mig_allocations import decode_mig_allocations
from dra_driver.objects.mig_profiles import Placement
from kubeletplugin.deviceplugin.mig_journal import InstanceKey, MigRecord
from kubeletplugin.mig_state import MigState

ENDED_PHASES = frozenset({"Succeeded", "Failed"})
"""Pod phases after which no container of the pod runs again."""


@dataclass(frozen=True, slots=True)
class HeldSlice:
    """A MIG slice a pod that has not ended names in its annotation."""

    pod: str
    gpu_uuid: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class LiveSlices:
    """What the node's pods that have not ended hold, or why that is unknown."""

    slices: tuple[HeldSlice, ...] = ()
    unreadable: tuple[str, ...] = ()
    """`ns/name: reason` of each pod whose MIG annotation could not be decoded."""


@dataclass(frozen=True, slots=True)
class CleanupPlan:
    destroy: tuple[MigRecord, ...] = ()
    forget: tuple[MigRecord, ...] = ()
    """Instances no longer on their card: dropped from the record."""
    keep: tuple[tuple[MigRecord, str], ...] = ()
    """Instances left in place this pass, each with why."""


def pod_ended(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ENDED_PHASES


def pod_uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def live_slices(pods: Iterable[Mapping[str, Any]]) -> LiveSlices:
    """The slices named by pods that have not ended."""
    slices: list[HeldSlice] = []
    unreadable: list[str] = []
    for pod in pods:
        if pod_ended(pod):
            continue
        metadata = pod.get("metadata") or {}
        name = f"{metadata.get('namespace')}/{metadata.get('name')}"
        value = (metadata.get("annotations") or {}).get(VGPU_MIG_ALLOCATIONS, "")
        try:
            entries = decode_mig_allocations(value)
        except AnnotationDecodeError as error:
            unreadable.append(f"{name}: {error}")
            continue
        slices += (HeldSlice(name, e.gpu_uuid, Placement(e.start, e.size)) for e in entries)
    return LiveSlices(tuple(slices), tuple(unreadable))


def plan_cleanup(
    records: Sequence[MigRecord],
    cards: Mapping[str, MigState],
    ended_owners: Collection[str],
    live: LiveSlices,
    half_destroyed: Collection[InstanceKey] = (),
) -> CleanupPlan:
    """What to do with each recorded instance, by the rules above.

    `cards`: each discovered card's MIG state by uuid. `ended_owners`: uids of the
    recorded pods known to have ended. `half_destroyed`: instances whose destroy
    failed this process after their compute instance may have gone; an empty GPU
    instance with their id, profile and placement is still theirs.
    """
    destroy: list[MigRecord] = []
    forget: list[MigRecord] = []
    keep: list[tuple[MigRecord, str]] = []
    for record in records:
        state = cards.get(record.gpu_uuid)
        if state is None:
            keep.append((record, f"card {record.gpu_uuid} not discovered"))
        elif not _on_card(record, state, record.key in half_destroyed):
            forget.append(record)
        elif record.pod_uid not in ended_owners:
            keep.append((record, f"pod {record.pod} has not ended"))
        elif live.unreadable:
            keep.append((record, f"MIG allocations unreadable: {'; '.join(live.unreadable)}"))
        else:
            holder = _holder(record, live.slices)
            if holder is None:
                destroy.append(record)
            else:
                keep.append((record, f"pod {holder.pod} names placement {holder.placement}"))
    return CleanupPlan(tuple(destroy), tuple(forget), tuple(keep))


def _on_card(record: MigRecord, state: MigState, half_destroyed: bool) -> bool:
    wanted = record.instance
    if wanted in state.instances:
        return True
    if not half_destroyed:
        return False
    empty = (wanted.gpu_instance_id, wanted.profile, wanted.placement)
    return empty in state.empty_gpu_instances


def _holder(record: MigRecord, slices: Iterable[HeldSlice]) -> HeldSlice | None:
    placement = record.instance.placement
    return next(
        (
            held
            for held in slices
            if held.gpu_uuid == record.gpu_uuid and held.placement.overlaps(placement)
        ),
        None,
    )
