"""What kubelet and HAMi's scheduler are told about this node's GPUs, decided without I/O.

kubelet sees `splitCount` replicas per GPU, named `<uuid>-<i>`, so that many
containers may be admitted onto one card; HAMi's scheduler reads the node
register annotation, one entry per GPU, in the exact shape HAMi's NVIDIA
device plugin writes (`getAPIDevices`): memory in MiB times the memory
scaling, cores 100 times the core scaling, the model name with `NVIDIA-` in
front unless it already starts with `NVIDIA`. Next to it, the GPUs' pair
scores (`hami.io/node-nvidia-score`) for the `topology-aware` policy.

A card in MIG mode is registered as HAMi's device plugin registers it in its
`mig` operating mode: `mode: mig`, memory unscaled, cores 100, `count` the
largest instance count of its profiles, and `migProfiles` (the profiles the
`migProfileAllowlist` allows for its model, each with its memory, its share of
the card's multiprocessors rounded up, its memory-slice count and placements);
a MIG card with no allowed profile is left out, as HAMi leaves it out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.hami_annotations import (
    DeviceMode,
    MigPlacement,
    MigProfile,
    RegisteredDevice,
    encode_node_devices,
    encode_pair_scores,
)
from api.quantity import MIB
from dra_driver.objects.mig_allowlist import MigAllowlist, allowed_profiles
from kubeletplugin.gpu_topology import PairScores, pair_scores
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
HAMI_MODEL_PREFIX = "NVIDIA"


def replica_id(uuid: str, replica: int) -> str:
    return f"{uuid}-{replica}"


def replica_uuid(device_id: str) -> str | None:
    """The GPU UUID of a replica ID, None for an ID that is not `<uuid>-<replica>`."""
    uuid, separator, replica = device_id.rpartition("-")
    if not separator or not uuid or not replica.isdigit():
        return None
    return uuid


def kubelet_devices(gpus: Sequence[GpuInfo], sharing: SliceSettings) -> list[pb2.Device]:
    """The ListAndWatch list: every replica of a GPU shares its health and NUMA node."""
    return [
        pb2.Device(
            ID=replica_id(gpu.uuid, replica),
            health=HEALTHY if gpu.healthy else UNHEALTHY,
            topology=pb2.TopologyInfo(nodes=[pb2.NUMANode(ID=gpu.numa_node)]),
        )
        for gpu in gpus
        for replica in range(sharing.split_count)
    ]


def hami_device_type(product_name: str) -> str:
    """HAMi's register `type`: the NVML name as is when it starts with `NVIDIA` (case
    matters, spaces kept), else with `NVIDIA-` in front."""
    if product_name.startswith(HAMI_MODEL_PREFIX):
        return product_name
    return f"{HAMI_MODEL_PREFIX}-{product_name}"


def registered_devices(
    gpus: Iterable[GpuInfo], sharing: SliceSettings, allowlist: MigAllowlist | None = None
) -> list[RegisteredDevice]:
    """The node register entries, ordered by NVML index."""
    entries = []
    for gpu in sorted(gpus, key=lambda g: g.index):
        if gpu.mig.partitionable:
            entry = _mig_device(gpu, allowlist)
            if entry is not None:
                entries.append(entry)
            continue
        entries.append(
            RegisteredDevice(
                id=gpu.uuid,
                index=gpu.index,
                count=sharing.split_count,
                devmem=_registered_memory(gpu.memory_bytes, sharing.memory_scaling),
                devcore=int(sharing.core_scaling * 100),
                type=hami_device_type(gpu.product_name),
                numa=gpu.numa_node,
                mode=DeviceMode.HAMI_CORE.value,
                health=gpu.healthy,
            )
        )
    return entries


def _mig_device(gpu: GpuInfo, allowlist: MigAllowlist | None) -> RegisteredDevice | None:
    """HAMi's register entry of a MIG-mode card; None when no profile is allowed on it.
    Profiles come in the allowlist's order (HAMi's), else in discovery order."""
    model = hami_device_type(gpu.product_name)
    allowed = allowed_profiles(allowlist, model)
    found = (gpu.mig.profile(name) for name in allowed) if allowed is not None else None
    profiles = list(gpu.mig.profiles) if found is None else [p for p in found if p is not None]
    if not profiles:
        return None
    full = max(p.multiprocessors for p in gpu.mig.profiles)
    return RegisteredDevice(
        id=gpu.uuid,
        index=gpu.index,
        count=max(p.max_instances for p in profiles),
        devmem=gpu.memory_bytes // MIB,
        devcore=100,
        type=model,
        numa=gpu.numa_node,
        mode=DeviceMode.MIG.value,
        health=gpu.healthy,
        mig_profiles=tuple(
            MigProfile(
                name=p.name,
                memory_mb=p.memory_mib,
                core=-(-p.multiprocessors * 100 // full) if full else 0,
                slice_count=p.memory_slices,
                placements=tuple(MigPlacement(x.start, x.size) for x in p.placements),
            )
            for p in profiles
        ),
    )


def register_annotation(
    gpus: Iterable[GpuInfo], sharing: SliceSettings, allowlist: MigAllowlist | None = None
) -> str:
    return encode_node_devices(registered_devices(gpus, sharing, allowlist))


def topology_scores(gpus: Iterable[GpuInfo]) -> PairScores | None:
    """HAMi's pair scores among the registered GPUs, in register order; None when no
    GPU reports a link (one GPU, a mock file without links): nothing to publish."""
    ordered = sorted(gpus, key=lambda g: g.index)
    if not any(gpu.links for gpu in ordered):
        return None
    return pair_scores({gpu.uuid: gpu.links for gpu in ordered})


def score_annotation(scores: PairScores | None) -> str | None:
    return None if scores is None else encode_pair_scores(scores.scores)


def _registered_memory(memory_bytes: int, scaling: float) -> int:
    """Whole MiB first, then scaled and truncated, in HAMi's order of operations."""
    mebibytes = memory_bytes // MIB
    return mebibytes if scaling == 1 else int(mebibytes * scaling)


def preferred_replicas(
    available: Sequence[str],
    must_include: Sequence[str],
    size: int,
    wanted_uuids: Sequence[str],
) -> list[str]:
    """Replica IDs for kubelet: the required ones, then one replica of each GPU the
    pod's device list names, then replicas of GPUs not yet picked, then any."""
    chosen = list(dict.fromkeys(must_include))[:size]
    free = [device for device in available if device not in chosen]

    picked = {replica_uuid(d) for d in chosen}
    for uuid in wanted_uuids:
        if uuid in picked or len(chosen) >= size:
            continue
        replica = next((d for d in free if replica_uuid(d) == uuid and d not in chosen), None)
        if replica is not None:
            chosen.append(replica)
            picked.add(uuid)
    for device in free:
        uuid = replica_uuid(device)
        if len(chosen) < size and device not in chosen and uuid not in picked:
            chosen.append(device)
            picked.add(uuid)
    chosen += [d for d in free if d not in chosen][: size - len(chosen)]
    return chosen
