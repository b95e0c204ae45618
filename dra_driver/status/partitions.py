"""A MIG-mode card in the cluster view: one GPU row with its placements and holders.

The kubelet plugin publishes a partitioned card as one device per profile placement
(`gpu-<i>-mig-<profile>-at-<start>`, attributes `kind=mig`, `profile`, `parentUUID`,
`parentIndex`, `placementStart`, `placementSize`, `computeSlices`; `memory`
capacity). Listed as they are, a card would be a dozen-odd "GPUs"; folded here, it is
one row named `gpu-<i>`: its placements each with the claim holding it (from the
claims' allocation results), a share per held placement (the partition's memory and
its compute slices as a percentage of the card's), so the bar and the node summary
count partitions beside HAMi-core shares. A legacy pod's MIG slices come from
`hami.io/vgpu-mig-allocations` and are listed on the card its register names.

Pure: API objects and the view's rows in, the rows changed in place.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from api.hami_annotations import AnnotationDecodeError
from api.hami_annotations.keys import VGPU_MIG_ALLOCATIONS
from api.hami_annotations.mig_allocations import decode_mig_allocations
from dra_driver.objects.mig_devices import PARTITION_KIND
from dra_driver.status.views import GpuView, PartitionView, ShareView

MIG_ENFORCED_BY = "MIG (hardware partition)"
CARD_COMPUTE_SLICES = 7
"""Every card with a MIG table (A100, H100, H200) has 7 compute slices."""
_TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})

DeviceKey = tuple[str, str]
"""(pool, device name) of a slice device."""


def _attribute(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    return next(iter(value.values()), "") if isinstance(value, Mapping) else ""


def partition_of(device: Mapping[str, Any], memory_bytes: int) -> PartitionView | None:
    """A slice device's placement, None when the device is not a MIG partition."""
    if _attribute(device, "kind") != PARTITION_KIND:
        return None
    start, size = (
        int(_attribute(device, "placementStart") or 0),
        int(_attribute(device, "placementSize") or 0),
    )
    return PartitionView(
        profile=str(_attribute(device, "profile")),
        placement=f"{start}:{size}",
        memory_bytes=memory_bytes,
        device=str(device.get("name", "")),
    )


def fold_partitions(
    gpus: dict[DeviceKey, GpuView],
    partitions: Mapping[DeviceKey, tuple[PartitionView, str, int, int]],
) -> None:
    """Replace each card's partition rows by one row for the card.

    `partitions` maps a partition's device key to (placement, parent uuid, parent index,
    compute slices); the rows' shares (the claims holding the partition) become the
    placement's holder and a share of the card.
    """
    cards: dict[tuple[str, str], GpuView] = {}
    for key, (partition, parent, index, compute) in sorted(
        partitions.items(), key=lambda item: _order(item[1][0])
    ):
        row = gpus.pop(key, None)
        if row is None:
            continue
        card = cards.get((key[0], parent))
        if card is None:
            card = GpuView(
                node=row.node,
                device=f"gpu-{index}",
                uuid=parent,
                type=row.type,
                mode=row.mode,
                memory_bytes=0,
                cores=100,
                shares_total=CARD_COMPUTE_SLICES,
                healthy=row.healthy,
                vendor=row.vendor,
            )
            cards[(key[0], parent)] = card
            gpus[(key[0], card.device)] = card
        card.healthy = card.healthy and row.healthy
        start, size = (int(part) for part in partition.placement.split(":"))
        card.memory_bytes = max(card.memory_bytes, partition.memory_bytes // size * (start + size))
        card.partitions.append(partition)
        for share in row.shares:
            partition.mode, partition.namespace = share.mode, share.namespace
            partition.holder, partition.pods = share.holder, list(share.pods)
            share.memory_bytes = partition.memory_bytes
            share.cores = compute * 100 // CARD_COMPUTE_SLICES
            share.partition = f"{partition.profile} {partition.placement}"
            share.enforced, share.enforcement_note = True, ""
            share.enforced_by = MIG_ENFORCED_BY
            card.shares.append(share)


def _order(partition: PartitionView) -> tuple[int, int, str]:
    start, size = (int(part) for part in partition.placement.split(":"))
    return start, -size, partition.profile


def add_legacy_partitions(
    gpus: Mapping[str, GpuView], pods: Iterable[Mapping[str, Any]], mode: str
) -> None:
    """Each legacy pod's MIG slices on the card its allocation names (by uuid): a
    placement, and the pod's share of the card says it (a share of its own, without
    memory or cores, when the device annotations gave the pod none on that card)."""
    for pod in pods:
        metadata = pod.get("metadata") or {}
        value = (metadata.get("annotations") or {}).get(VGPU_MIG_ALLOCATIONS)
        if not value or (pod.get("status") or {}).get("phase") in _TERMINATED_PHASES:
            continue
        try:
            allocations = decode_mig_allocations(value)
        except AnnotationDecodeError:
            continue
        name = str(metadata.get("name", ""))
        for allocation in allocations:
            gpu = gpus.get(allocation.gpu_uuid)
            if gpu is None:
                continue
            partition = PartitionView(
                profile=allocation.profile,
                placement=f"{allocation.start}:{allocation.size}",
                memory_bytes=0,
                mode=mode,
                namespace=str(metadata.get("namespace", "")),
                holder=name,
                pods=[name],
            )
            gpu.partitions.append(partition)
            _mark_legacy_share(gpu, partition)


def _mark_legacy_share(gpu: GpuView, partition: PartitionView) -> None:
    share = next(
        (
            s
            for s in gpu.shares
            if (s.mode, s.namespace, s.holder)
            == (partition.mode, partition.namespace, partition.holder)
        ),
        None,
    )
    if share is None:
        share = ShareView(partition.mode, partition.namespace, partition.holder, [], 0, 0)
        share.pods = list(partition.pods)
        gpu.shares.append(share)
    placed = f"{partition.profile} {partition.placement}"
    share.partition = f"{share.partition}, {placed}" if share.partition else placed
    share.enforced, share.enforcement_note, share.enforced_by = True, "", MIG_ENFORCED_BY
