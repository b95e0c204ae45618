"""A MIG-mode card as DRA partitionable devices (KEP-4815): what the node publishes for it.

Pure. The names, counters and consumption are `dra_driver.objects.mig_devices`'s
contract; this module only decides which card is offered how, and which of its
placements are offered:

- A card that is not MIG capable, or whose MIG mode is off and stays off, is a
  shared card (`slices.build_device`), as before MIG existed here.
- A card in MIG mode that stays so, with profiles read, is published as partitions
  only, never as a share: one counter set (its memory slices, compute slices and
  media-extension unit) in a counters-only slice of the pool, and one device per
  profile placement consuming from it, so no allocator (kube-scheduler included)
  can hand out two overlapping placements.
- A card whose mode changes at the next GPU reset, or in MIG mode without readable
  profiles, is published as neither (`withheld_reason` says why).

Instances this driver did not create (an administrator's static layout, or a GPU
instance without a compute instance) take their placements for good: their
consumption is taken off the card's published counters, and every placement that
would no longer fit them (overlapping it, or a second `+me` instance) is not
offered. The driver's own instances are tracked by prepare, which hands the
publisher its cards without them (`without_instances`): those stay published as
devices, since they are allocated, and count as the allocator already counts them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from dra_driver.objects.mig_devices import (
    PARTITION_KIND,
    card_counters,
    counter_set_name,
    partition_consumption,
    partition_device_name,
)
from dra_driver.objects.mig_profiles import MigCard, MigProfile, Placement
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.mig_state import MigState

MAX_COUNTER_SETS_PER_SLICE = 8
"""`ResourceSliceMaxCounterSets` of the v1.36 API."""


def withheld_reason(gpu: GpuInfo) -> str | None:
    """Why the card is published neither as shares nor as partitions; None when it is
    published one way or the other."""
    mig = gpu.mig
    if mig.reset_pending:
        now = "enabled" if mig.enabled else "disabled"
        then = "enabled" if mig.pending_enabled else "disabled"
        return (
            f"GPU {gpu.index} ({gpu.uuid}): MIG mode is {now} and becomes {then} at the next "
            "GPU reset; it is published again once the administrator has reset the card"
        )
    if mig.partitionable and not mig.profiles:
        return (
            f"GPU {gpu.index} ({gpu.uuid}): in MIG mode, but no GPU-instance profile could be "
            "read from the driver, so no partition can be offered"
        )
    return None


def is_partitioned(gpu: GpuInfo) -> bool:
    """The card is offered as MIG partitions (and never as a share)."""
    return gpu.mig.partitionable and bool(gpu.mig.profiles)


def is_shared(gpu: GpuInfo) -> bool:
    """The card is offered as HAMi-core shares of the whole card, as before MIG."""
    return not is_partitioned(gpu) and withheld_reason(gpu) is None


def geometry(gpu: GpuInfo) -> MigCard:
    """The card's MIG geometry from what discovery read: its slices are the widest
    profile's (a real card's profiles come from NVML, not from NVIDIA's tables)."""
    profiles = gpu.mig.profiles
    return MigCard(
        model=gpu.product_name,
        compute_slices=max(p.compute_slices for p in profiles),
        memory_slices=max(placement.end for p in profiles for placement in p.placements),
        memory_from_nvml=True,
        profiles=profiles,
    )


def foreign_placements(mig: MigState) -> tuple[tuple[str, Placement], ...]:
    """(profile, placement) of every GPU instance present: one per GPU instance, however
    many compute instances it holds."""
    return tuple(sorted({(profile, placement) for _, profile, placement in mig.gpu_instances()}))


def available_counters(gpu: GpuInfo) -> dict[str, int]:
    """The card's counters less what the instances present consume."""
    counters = card_counters(geometry(gpu))
    for name, placement in foreign_placements(gpu.mig):
        profile = gpu.mig.profile(name)
        for counter, amount in _consumption(profile, placement).items():
            counters[counter] = max(counters.get(counter, 0) - amount, 0)
    return counters


def counter_set(gpu: GpuInfo) -> dict[str, Any]:
    """The card's `sharedCounters` entry."""
    return {
        "name": counter_set_name(gpu.index),
        "counters": {
            name: {"value": str(value)} for name, value in available_counters(gpu).items()
        },
    }


def offered_placements(gpu: GpuInfo) -> list[tuple[MigProfile, Placement]]:
    """Every profile placement that still fits the card's available counters, in the
    profiles' order, then by start."""
    available = available_counters(gpu)
    return [
        (profile, placement)
        for profile in gpu.mig.profiles
        for placement in profile.placements
        if all(
            available.get(counter, 0) >= amount
            for counter, amount in partition_consumption(profile, placement).items()
        )
    ]


def partition_devices(
    gpu: GpuInfo,
    attributes: Mapping[str, Any],
    taints: Sequence[Mapping[str, str]],
) -> list[dict[str, Any]]:
    """One device per offered placement. `attributes` are the card's own (vendor, type,
    product, numa, ...), `taints` those a device of this card carries."""
    devices = []
    for profile, placement in offered_placements(gpu):
        device: dict[str, Any] = {
            "name": partition_device_name(gpu.index, profile.name, placement.start),
            "attributes": {
                **attributes,
                "kind": {"string": PARTITION_KIND},
                "profile": {"string": profile.name},
                "parentUUID": {"string": gpu.uuid},
                "parentIndex": {"int": gpu.index},
                "placementStart": {"int": placement.start},
                "placementSize": {"int": placement.size},
                "computeSlices": {"int": profile.compute_slices},
                "memorySlices": {"int": profile.memory_slices},
                "multiprocessors": {"int": profile.multiprocessors},
            },
            "capacity": {"memory": {"value": str(profile.memory_bytes)}},
            "consumesCounters": [
                {
                    "counterSet": counter_set_name(gpu.index),
                    "counters": {
                        name: {"value": str(value)}
                        for name, value in partition_consumption(profile, placement).items()
                    },
                }
            ],
        }
        if taints:
            device["taints"] = [dict(taint) for taint in taints]
        devices.append(device)
    return devices


def pack(groups: Iterable[list[dict[str, Any]]], limit: int) -> list[list[dict[str, Any]]]:
    """Chunks of at most `limit` items, a group (one card's devices) kept in one chunk
    whenever it fits in one, so a change on one card rewrites as few slices as possible."""
    chunks: list[list[dict[str, Any]]] = []
    for group in groups:
        for start in range(0, len(group), limit):
            part = group[start : start + limit]
            if chunks and len(chunks[-1]) + len(part) <= limit:
                chunks[-1].extend(part)
            else:
                chunks.append(list(part))
    return chunks


def without_instances(
    gpus: Iterable[GpuInfo], own: Mapping[str, Collection[Placement]]
) -> tuple[GpuInfo, ...]:
    """The cards as the publisher should see them: the instances at the placements this
    driver created (`own`, placements by card uuid, from prepare's journal) left out,
    so only an administrator's instances hide placements."""
    result = []
    for gpu in gpus:
        mine = own.get(gpu.uuid)
        if not mine:
            result.append(gpu)
            continue
        mig = replace(
            gpu.mig,
            instances=tuple(i for i in gpu.mig.instances if i.placement not in mine),
            empty_gpu_instances=tuple(e for e in gpu.mig.empty_gpu_instances if e[2] not in mine),
        )
        result.append(replace(gpu, mig=mig))
    return tuple(result)


def _consumption(profile: MigProfile | None, placement: Placement) -> dict[str, int]:
    """What an instance present consumes; one of a profile discovery did not list still
    takes its memory slices."""
    if profile is not None:
        return partition_consumption(profile, placement)
    stand_in = MigProfile("", 0, 0, 0, placement.size, 0, 0, 1, (placement,))
    return {k: v for k, v in partition_consumption(stand_in, placement).items() if v}
