"""The monitor's MIG series: which MIG device each container runs on, and every MIG
device on the node's cards.

Names and label sets are HAMi's:
- `hami_mig_device_info` (HAMi's `cmd/vGPUmonitor/metrics.go`): namespace, pod,
  container, vdevice_index, device_uuid (the parent card), mig_uuid, profile,
  gpu_instance_id, compute_instance_id; value 1. Here it also carries `claim_uid`
  (as every container series does: empty for a legacy pod) and the placement as
  `placement_start`/`placement_size` (the names of HAMi's node series), so a
  partition's place on the card is readable without a join.
- `hami_node_gpu_mig_instance_info` (HAMi exports it from its scheduler,
  `cmd/scheduler/metrics.go`, for the instances its allocations made): node,
  device_uuid, device_index, mig_uuid, profile, gpu_instance_id,
  compute_instance_id, placement_start, placement_size; value 1. Here the monitor
  exports it from discovery for every MIG device on the node's cards, so an
  administrator's static instances show as well as those prepare made.
- With `--legacy-metrics`: `MigInfo` (podnamespace, podname, ctrname, vdeviceid,
  deviceuuid, instanceid = the GPU instance id, plus claim_uid) and
  `nodeGPUMigInstance` (nodeid, deviceuuid, deviceidx, migname = `<profile>-<GPU
  instance id>`), as HAMi's legacy names.

A claim's partition names its card by index and its profile by slug; the device is
the card's MIG device of that profile at that start. A partition with no such device
yet (not prepared, or the instance gone) is not reported. Like the host series, none
of these exist without a node name (HAMi's monitor requires NODE_NAME for them).
Pure: host readings and uses in, text out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dra_driver.objects.mig_devices import profile_slug
from dra_driver.objects.mig_profiles import Placement
from libvgpu.exposition import gauge_header, label_set, sample
from libvgpu.host_gpus import HostGpu
from libvgpu.host_mig import HostMigInstance
from libvgpu.mig_users import ClaimPartitionUse, LegacyMigUse

ZONE = "vGPU"
MIG_DEVICE_INFO = "hami_mig_device_info"
NODE_MIG_INSTANCE_INFO = "hami_node_gpu_mig_instance_info"
LEGACY_MIG_INFO = "MigInfo"
LEGACY_NODE_MIG_INSTANCE = "nodeGPUMigInstance"
MIG_DEVICE_LABELS = (
    "zone",
    "namespace",
    "pod",
    "container",
    "vdevice_index",
    "device_uuid",
    "mig_uuid",
    "profile",
    "gpu_instance_id",
    "compute_instance_id",
    "claim_uid",
    "placement_start",
    "placement_size",
)
NODE_MIG_LABELS = (
    "zone",
    "node",
    "device_uuid",
    "device_index",
    "mig_uuid",
    "profile",
    "gpu_instance_id",
    "compute_instance_id",
    "placement_start",
    "placement_size",
)
LEGACY_MIG_INFO_LABELS = (
    "zone",
    "podnamespace",
    "podname",
    "ctrname",
    "vdeviceid",
    "deviceuuid",
    "instanceid",
    "claim_uid",
)
LEGACY_NODE_MIG_LABELS = ("zone", "nodeid", "deviceuuid", "deviceidx", "migname")
_HEADERS = {
    MIG_DEVICE_INFO: gauge_header(
        MIG_DEVICE_INFO, "MIG runtime identity for a container allocation"
    ),
    NODE_MIG_INSTANCE_INFO: gauge_header(
        NODE_MIG_INSTANCE_INFO, "Realized MIG instance identity and placement"
    ),
    LEGACY_MIG_INFO: gauge_header(LEGACY_MIG_INFO, "Mig device information for container"),
    LEGACY_NODE_MIG_INSTANCE: gauge_header(
        LEGACY_NODE_MIG_INSTANCE, "GPU Sharing mode. 0 for hami-core, 1 for mig, 2 for mps"
    ),
}


def _container_row(
    namespace: str,
    pod: str,
    container: str,
    vdevice_index: int,
    gpu_uuid: str,
    instance: HostMigInstance,
    claim_uid: str,
) -> tuple[str, ...]:
    """`MIG_DEVICE_LABELS` values."""
    return (
        ZONE,
        namespace,
        pod,
        container,
        str(vdevice_index),
        gpu_uuid,
        instance.mig_uuid,
        instance.profile,
        str(instance.gpu_instance_id),
        str(instance.compute_instance_id),
        claim_uid,
        str(instance.placement.start),
        str(instance.placement.size),
    )


def _legacy_row(use: LegacyMigUse) -> tuple[str, ...]:
    instance = HostMigInstance(
        use.gpu_instance_id,
        use.compute_instance_id,
        use.profile,
        Placement(use.placement_start, use.placement_size),
        use.mig_uuid,
    )
    return _container_row(
        use.namespace, use.pod, use.container, use.vdevice_index, use.gpu_uuid, instance, ""
    )


def _claim_rows(
    gpus: Sequence[HostGpu], uses: Iterable[ClaimPartitionUse]
) -> list[tuple[str, ...]]:
    by_index = {gpu.index: gpu for gpu in gpus}
    rows = []
    for use in uses:
        gpu = by_index.get(use.gpu_index)
        instance = None if gpu is None else _instance_at(gpu, use.profile_slug, use.start)
        if gpu is None or instance is None:
            continue
        rows.append(
            _container_row(
                use.namespace, use.pod, "", use.vdevice_index, gpu.uuid, instance, use.claim_uid
            )
        )
    return rows


def _instance_at(gpu: HostGpu, slug: str, start: int) -> HostMigInstance | None:
    return next(
        (
            instance
            for instance in gpu.mig_instances
            if profile_slug(instance.profile) == slug and instance.placement.start == start
        ),
        None,
    )


def render_mig_series(
    node: str,
    gpus: Sequence[HostGpu],
    legacy_uses: Iterable[LegacyMigUse],
    claim_uses: Iterable[ClaimPartitionUse],
    *,
    legacy_metrics: bool = False,
) -> str:
    """The MIG families' text: headers always, samples only with a node name."""
    rows: list[tuple[str, ...]] = []
    node_rows: list[tuple[str, ...]] = []
    if node:
        rows = sorted([*map(_legacy_row, legacy_uses), *_claim_rows(gpus, claim_uses)])
        node_rows = [
            (
                ZONE,
                node,
                gpu.uuid,
                str(gpu.index),
                instance.mig_uuid,
                instance.profile,
                str(instance.gpu_instance_id),
                str(instance.compute_instance_id),
                str(instance.placement.start),
                str(instance.placement.size),
            )
            for gpu in gpus
            for instance in gpu.mig_instances
        ]
    text = [_HEADERS[MIG_DEVICE_INFO]]
    text.extend(sample(MIG_DEVICE_INFO, label_set(MIG_DEVICE_LABELS, row), 1) for row in rows)
    text.append(_HEADERS[NODE_MIG_INSTANCE_INFO])
    text.extend(
        sample(NODE_MIG_INSTANCE_INFO, label_set(NODE_MIG_LABELS, row), 1) for row in node_rows
    )
    if legacy_metrics:
        text.append(_HEADERS[LEGACY_MIG_INFO])
        text.extend(
            sample(
                LEGACY_MIG_INFO,
                label_set(LEGACY_MIG_INFO_LABELS, (*row[:6], row[8], row[10])),
                1,
            )
            for row in rows
        )
        text.append(_HEADERS[LEGACY_NODE_MIG_INSTANCE])
        text.extend(
            sample(
                LEGACY_NODE_MIG_INSTANCE,
                label_set(LEGACY_NODE_MIG_LABELS, (*row[:4], f"{row[5]}-{row[6]}")),
                1,
            )
            for row in node_rows
        )
    return "".join(text)
