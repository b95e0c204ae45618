"""Who holds which share of which GPU: the cluster view behind `dra-driver status`.

Built from plain API objects (ResourceSlices, ResourceClaims, Pods, Nodes,
Events), so it has no I/O and the same code serves the CLI, the simulator and
tests. DRA shares come from claim allocations of this driver's devices;
legacy-mode shares from HAMi's node register and pod device annotations, so
both kinds of GPU appear on one view. A MIG-mode card's partition devices fold into
one row with its placements and their holders (`partitions.py`). A card a mixed
node serves both ways (a slice device and a register entry with one uuid) is one
GPU with both modes' holders, so the bar shows everything the card holds. Each
share says who holds it to its memory and cores (`enforced_by`) and whether they
hold: for an NVIDIA card HAMi-core, off where an opt-out is in effect
(`enforcement.py` has the rules); for another family what `dra_vendors` says of
it: the vendor's runtime (an Ascend vNPU template) or nobody, the share being
accounting only; for a MIG partition the hardware.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from api.hami_annotations import (
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    AnnotationDecodeError,
    decode_node_devices,
    decode_pod_devices,
)
from api.quantity import MIB, QuantityError, to_bytes_ceil
from dra_driver.objects.dra_vendors import LIBVGPU, vendor_of_request_type
from dra_driver.objects.dra_vendors import NVIDIA as NVIDIA_FAMILY
from dra_driver.objects.pod_claims import pod_claim_names, reserving_pods
from dra_driver.status.enforcement import (
    ENFORCED,
    ClaimKey,
    Enforcement,
    claim_enforcement,
    legacy_opt_outs,
    opt_out_reports,
)
from dra_driver.status.partitions import (
    DeviceKey,
    add_legacy_partitions,
    fold_partitions,
    partition_of,
)
from dra_driver.status.summary import cluster_totals, summarize_nodes
from dra_driver.status.views import GpuView, PartitionView, PendingClaimView, ShareView

DRA = "dra"
LEGACY = "legacy"
MIXED = "mixed"
"""A GPU's mode when its node serves it both ways; each share then says its own."""
_TERMINATED_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(slots=True)
class ClusterStatus:
    gpus: list[GpuView]
    pending: list[PendingClaimView]

    def to_dict(self) -> dict[str, Any]:
        gpus = []
        for gpu in self.gpus:
            entry = plain_data(gpu)
            if not gpu.partitions:
                # Only a MIG-mode card has placements; other cards keep their keys.
                del entry["partitions"]
            for share in entry["shares"]:
                if not share["partition"]:
                    del share["partition"]
            entry["allocatedMemoryBytes"] = gpu.allocated_memory_bytes
            entry["allocatedCores"] = gpu.allocated_cores
            gpus.append(entry)
        nodes = summarize_nodes(self.gpus)
        return {
            "gpus": gpus,
            "pending": [plain_data(claim) for claim in self.pending],
            "nodes": [plain_data(node) for node in nodes],
            "totals": plain_data(cluster_totals(nodes, self.pending)),
        }


def plain_data(value: Any) -> Any:
    """A dataclass as JSON-ready data, its field names camel-cased (`memory_bytes` ->
    `memoryBytes`) and dict keys (GPU type names) kept. `asdict` + `camel_case_keys` say
    the same, at several times the cost on a thousand nodes' shares: asdict deep-copies."""
    names = getattr(type(value), "__dataclass_fields__", None)
    if names is not None:
        return {_camel(name): plain_data(getattr(value, name)) for name in names}
    if isinstance(value, list):
        return [plain_data(item) for item in value]
    if isinstance(value, dict):
        return {key: plain_data(item) for key, item in value.items()}
    return value


def camel_case_keys(value: Any) -> Any:
    """Dataclass dicts in the API's JSON style (`memory_bytes` -> `memoryBytes`)."""
    if isinstance(value, dict):
        return {_camel(key): camel_case_keys(item) for key, item in value.items()}
    if isinstance(value, list):
        return [camel_case_keys(item) for item in value]
    return value


@functools.lru_cache(maxsize=256)
def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


@dataclass(frozen=True, slots=True)
class StatusFilter:
    node: str | None = None
    namespace: str | None = None


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _quantity_bytes(raw: Any) -> int:
    try:
        return to_bytes_ceil(str(raw))
    except QuantityError:
        return 0


def _attribute(device: Mapping[str, Any], name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    return next(iter(value.values()), "") if isinstance(value, Mapping) else ""


def _capacity(device: Mapping[str, Any], name: str) -> int:
    return _quantity_bytes(((device.get("capacity") or {}).get(name) or {}).get("value", "0"))


PartitionInfo = dict[DeviceKey, tuple[PartitionView, str, int, int]]
"""A partition device's placement, parent uuid, parent index and compute slices."""


def _dra_gpus(
    slices: Iterable[Mapping[str, Any]], driver: str
) -> tuple[dict[DeviceKey, GpuView], PartitionInfo]:
    partitions: PartitionInfo = {}
    newest: dict[str, int] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") == driver:
            pool = (spec.get("pool") or {}).get("name", "")
            newest[pool] = max(newest.get(pool, 0), int(spec["pool"].get("generation", 0)))
    gpus: dict[tuple[str, str], GpuView] = {}
    for item in slices:
        spec = item.get("spec") or {}
        pool = (spec.get("pool") or {}).get("name", "")
        if spec.get("driver") != driver or spec["pool"].get("generation", 0) != newest[pool]:
            continue
        for device in spec.get("devices") or []:
            taints = device.get("taints") or []
            partition = partition_of(device, _capacity(device, "memory"))
            if partition is not None:
                partitions[(pool, device["name"])] = (
                    partition,
                    str(_attribute(device, "parentUUID")),
                    int(_attribute(device, "parentIndex") or 0),
                    int(_attribute(device, "computeSlices") or 0),
                )
            gpus[(pool, device["name"])] = GpuView(
                node=spec.get("nodeName") or pool,
                device=device["name"],
                uuid=str(_attribute(device, "uuid")),
                type=str(_attribute(device, "type")),
                mode=DRA,
                memory_bytes=_capacity(device, "memory"),
                cores=_capacity(device, "cores"),
                shares_total=_capacity(device, "shares"),
                healthy=not any(t.get("key", "").endswith("/unhealthy") for t in taints),
                vendor=str(_attribute(device, "vendor") or ""),
            )
    return gpus, partitions


def _add_claim_shares(
    gpus: Mapping[tuple[str, str], GpuView],
    claims: Iterable[Mapping[str, Any]],
    driver: str,
    events: Iterable[Mapping[str, Any]],
) -> None:
    reports = opt_out_reports(events)
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        key = (_meta(claim).get("namespace", ""), _meta(claim).get("name", ""))
        marks = claim_enforcement(claim, driver, reports.get(key, []))
        for result in (allocation.get("devices") or {}).get("results") or []:
            gpu = gpus.get((result.get("pool", ""), result.get("device", "")))
            if result.get("driver") != driver or gpu is None:
                continue
            consumed = result.get("consumedCapacity") or {}
            mark, enforced_by = marks.get(result.get("pool", ""), ENFORCED), LIBVGPU
            family = vendor_of_request_type(gpu.vendor)
            if family is not None and family is not NVIDIA_FAMILY:
                mark, enforced_by = Enforcement(family.limits_enforced), family.enforced_by
            gpu.shares.append(
                ShareView(
                    mode=DRA,
                    namespace=_meta(claim).get("namespace", ""),
                    holder=_meta(claim).get("name", ""),
                    pods=[pod.name for pod in reserving_pods(claim)],
                    memory_bytes=_quantity_bytes(consumed.get("memory", "0")),
                    cores=_quantity_bytes(consumed.get("cores", "0")),
                    enforced=mark.enforced,
                    enforcement_note=mark.note,
                    enforced_by=enforced_by,
                )
            )


def _legacy_gpus(nodes: Iterable[Mapping[str, Any]]) -> dict[str, GpuView]:
    gpus: dict[str, GpuView] = {}
    for node in nodes:
        value = (_meta(node).get("annotations") or {}).get(NODE_NVIDIA_REGISTER)
        if not value:
            continue
        try:
            devices = decode_node_devices(value)
        except AnnotationDecodeError:
            continue
        for device in devices:
            gpus[device.id] = GpuView(
                node=_meta(node).get("name", ""),
                device=device.id,
                uuid=device.id,
                type=device.type,
                mode=LEGACY,
                memory_bytes=device.devmem * MIB,
                cores=device.devcore,
                shares_total=device.count,
                healthy=device.health,
                vendor="NVIDIA",
            )
    return gpus


def _add_pod_shares(gpus: Mapping[str, GpuView], pods: Iterable[Mapping[str, Any]]) -> None:
    for pod in pods:
        value = (_meta(pod).get("annotations") or {}).get(VGPU_DEVICES_ALLOCATED)
        if not value or (pod.get("status") or {}).get("phase") in _TERMINATED_PHASES:
            continue
        try:
            containers = decode_pod_devices(value, VGPU_DEVICES_ALLOCATED)
        except AnnotationDecodeError:
            continue
        opt_outs = legacy_opt_outs(pod)
        per_device: dict[str, tuple[int, int]] = {}
        notes: dict[str, list[str]] = {}
        for position, container in enumerate(containers):
            why = opt_outs[position] if position < len(opt_outs) else ""
            for device in container:
                memory, cores = per_device.get(device.uuid, (0, 0))
                per_device[device.uuid] = (memory + device.usedmem, cores + device.usedcores)
                if why and why not in notes.setdefault(device.uuid, []):
                    notes[device.uuid].append(why)
        for uuid, (memory_mib, cores) in per_device.items():
            gpu = gpus.get(uuid)
            if gpu is not None:
                name = _meta(pod).get("name", "")
                why = "; ".join(notes.get(uuid, []))
                gpu.shares.append(
                    ShareView(
                        LEGACY,
                        _meta(pod).get("namespace", ""),
                        name,
                        [name],
                        memory_mib * MIB,
                        cores,
                        enforced=not why,
                        enforcement_note=why,
                    )
                )


def merge_served_both_ways(dra: Iterable[GpuView], legacy: Iterable[GpuView]) -> list[GpuView]:
    """Every GPU once: a legacy GPU whose (node, uuid) a slice device has joins that device.

    The merged GPU keeps the slice's name, totals and vendor (the register's are used
    only for a card no slice has), carries both modes' shares, each with its own mode,
    and is healthy only when both views say so: a card either side cannot use is not whole.
    """
    merged = list(dra)
    by_uuid: dict[tuple[str, str], GpuView] = {}
    for gpu in merged:
        # A uuid two slice devices claim is already a fault the status shows; the first keeps it.
        if gpu.uuid:
            by_uuid.setdefault((gpu.node, gpu.uuid), gpu)
    for gpu in legacy:
        card = by_uuid.get((gpu.node, gpu.uuid))
        if card is None:
            merged.append(gpu)
            continue
        card.mode = MIXED
        card.healthy = card.healthy and gpu.healthy
        card.shares.extend(gpu.shares)
    return merged


ObjectKey = tuple[str, str, str]
"""(kind, namespace, name) of the object an event is about."""


def pods_by_claim(pods: Iterable[Mapping[str, Any]]) -> dict[ClaimKey, list[str]]:
    """Claim -> the pods that reference it, by name or through a template-generated status
    entry: one pass over the pods, so finding a claim's pods does not scan them all again."""
    users: dict[ClaimKey, list[str]] = {}
    for pod in pods:
        namespace, name = _meta(pod).get("namespace", ""), _meta(pod).get("name", "")
        for claim in dict.fromkeys(pod_claim_names(pod).values()):
            if claim:
                users.setdefault((namespace, claim), []).append(name)
    return users


def claim_pods(claim: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Pods that reference the claim, by name or through a template-generated status entry."""
    key = (_meta(claim).get("namespace", ""), _meta(claim).get("name", ""))
    return pods_by_claim(pods).get(key, [])


def _warning_about(event: Mapping[str, Any]) -> tuple[ObjectKey, str, str] | None:
    """(object, stamp, `reason: message`) of a Warning event, None for any other event."""
    if event.get("type") != "Warning":
        return None
    involved = event.get("involvedObject") or event.get("regarding") or {}
    namespace = involved.get("namespace", _meta(event).get("namespace"))
    stamp = str(
        event.get("lastTimestamp")
        or event.get("eventTime")
        or _meta(event).get("creationTimestamp")
        or ""
    )
    message = f"{event.get('reason', '')}: {event.get('message') or event.get('note') or ''}"
    return (involved.get("kind"), namespace, involved.get("name")), stamp, message


def newest_warnings(events: Iterable[Mapping[str, Any]]) -> dict[ObjectKey, tuple[str, str]]:
    """Object -> (stamp, `reason: message`) of its newest Warning event (the later in list
    order at equal stamps): one pass, so each pending claim's reason is a look-up."""
    newest: dict[ObjectKey, tuple[str, str]] = {}
    for event in events:
        warning = _warning_about(event)
        if warning is None:
            continue
        key, stamp, message = warning
        seen = newest.get(key)
        if seen is None or stamp >= seen[0]:
            newest[key] = (stamp, message)
    return newest


def newest_warning(
    events: Iterable[Mapping[str, Any]], kind: str, namespace: str, names: set[str]
) -> str:
    """The newest Warning about any of the named objects, "" when there is none."""
    return _newest_of(newest_warnings(events), kind, namespace, names)


def _newest_of(
    warnings: Mapping[ObjectKey, tuple[str, str]], kind: str, namespace: str, names: Iterable[str]
) -> str:
    newest: tuple[str, str] | None = None
    for name in names:
        seen = warnings.get((kind, namespace, name))
        if seen is not None and (newest is None or seen[0] >= newest[0]):
            newest = seen
    return newest[1] if newest else ""


def _pending_claims(
    claims: Iterable[Mapping[str, Any]],
    pods: list[Mapping[str, Any]],
    events: list[Mapping[str, Any]],
    class_names: set[str],
) -> list[PendingClaimView]:
    pending = []
    users_of: dict[ClaimKey, list[str]] | None = None
    warnings: dict[ObjectKey, tuple[str, str]] | None = None
    for claim in claims:
        if (claim.get("status") or {}).get("allocation"):
            continue
        requests = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
        classes = {
            entry.get("deviceClassName")
            for request in requests
            for entry in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]
        }
        if not classes & class_names:
            continue
        if users_of is None or warnings is None:
            users_of, warnings = pods_by_claim(pods), newest_warnings(events)
        namespace, name = _meta(claim).get("namespace", ""), _meta(claim).get("name", "")
        users = users_of.get((namespace, name), [])
        reason = _newest_of(warnings, "ResourceClaim", namespace, [name]) or _newest_of(
            warnings, "Pod", namespace, users
        )
        if not reason:
            reason = "waiting for allocation" if users else "no pod uses this claim yet"
        pending.append(PendingClaimView(namespace, name, users, reason))
    return pending


def build_status(
    *,
    driver: str,
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    nodes: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    device_classes: Iterable[Mapping[str, Any]],
    only: StatusFilter | None = None,
) -> ClusterStatus:
    """The view; `device_classes` whose selectors name `driver` mark the pending claims as ours."""
    only = only or StatusFilter()
    claims, pods, events = list(claims), list(pods), list(events)
    dra, partitions = _dra_gpus(list(slices), driver)
    _add_claim_shares(dra, claims, driver, events)
    fold_partitions(dra, partitions)
    legacy = _legacy_gpus(nodes)
    _add_pod_shares(legacy, pods)
    add_legacy_partitions(legacy, pods, LEGACY)
    merged = merge_served_both_ways(dra.values(), legacy.values())
    gpus = sorted(merged, key=lambda g: (g.node, g.mode, g.device))
    if only.node:
        gpus = [gpu for gpu in gpus if gpu.node == only.node]
    if only.namespace:
        for gpu in gpus:
            gpu.shares = [share for share in gpu.shares if share.namespace == only.namespace]
    class_names = {
        _meta(item).get("name", "")
        for item in device_classes
        if driver in str((item.get("spec") or {}).get("selectors"))
    }
    pending = _pending_claims(claims, pods, events, class_names)
    if only.namespace:
        pending = [claim for claim in pending if claim.namespace == only.namespace]
    return ClusterStatus(gpus=gpus, pending=sorted(pending, key=lambda c: (c.namespace, c.name)))
