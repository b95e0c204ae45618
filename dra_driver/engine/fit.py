"""HAMi's Fit: choose devices on one node for one container's requests.

A faithful port of the rules of HAMi's NVIDIA `Fit` and `fitInDevices`
(reference/hami-protocol.md §2), written for speed: devices are mutable
`Slot`s that a caller copies per attempt. NVIDIA's Fit is also HAMi's
"standard Fit" of most other vendors (Hygon, Iluvatar, ...): their devices
carry no cordons, and the topology-aware policy only reaches vendors whose
adapter says so. A vendor whose Fit differs supplies its own
(`VendorAdapter.fit`). The namespace quota is checked for every vendor the
ledger holds a quota of (`limits.<that vendor's names>`): HAMi's Fit checks it
for NVIDIA and Cambricon only and leaves the others to its webhook, which
counts no memory for a whole card asked by percentage and cannot see pods
admitted together; DRA claims pass no webhook at all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from itertools import combinations

from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.mig_fit import (
    CARD_MIG_TOPOLOGY_INFEASIBLE,
    MIG_CHARGE_FAILED,
    MIG_MODE,
    charge_slice,
    custom_filter,
    is_mig_request,
    usage_sound,
)
from dra_driver.engine.model import Device
from dra_driver.engine.policy import SCORE_WEIGHT, device_sort_key
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    ContainerRequest,
    DeviceFilters,
    DeviceRequest,
    ScoringWeights,
)
from dra_driver.engine.vendors import FitContext

FULL_CARD_CORES = 100


def type_allowed(filters: DeviceFilters, device: Device) -> bool:
    """HAMi's checkGPUtype plus the vgpu-mode filter; empty lists constrain nothing."""
    return type_and_mode_allowed(filters, device.type, device.mode)


def type_and_mode_allowed(filters: DeviceFilters, device_type: str, mode: str) -> bool:
    """`type_allowed` for a device known by its type and mode only."""
    card_type = device_type.upper()
    if filters.use_types and not any(t.upper() in card_type for t in filters.use_types):
        return False
    if filters.no_use_types and any(t.upper() in card_type for t in filters.no_use_types):
        return False
    return filters.modes is None or mode in filters.modes


def uuid_allowed(filters: DeviceFilters, device_id: str) -> bool:
    """HAMi's CheckUUID: both lists apply, so a device named in both is refused."""
    if filters.use_uuids and device_id not in filters.use_uuids:
        return False
    return device_id not in filters.no_use_uuids


def score_device(slot: Slot, served: Sequence[DeviceRequest], weights: ScoringWeights) -> float:
    """HAMi's ComputeScore for the container's requests of the slot's vendor (`served`,
    those whose vendor matches the device's type)."""
    device = slot.device
    if not device.count or not device.cores or not device.memory_mib:
        return 0.0
    requested = cores = memory = 0
    for request in served:
        requested += 1
        cores += request.cores
        if request.memory_percent not in (0, MEMORY_PERCENT_UNSET):
            memory += device.memory_mib * request.memory_percent // 100
        else:
            memory += request.memory_mib
    return SCORE_WEIGHT * (
        weights.slot * (requested + slot.used) / device.count
        + weights.core * (cores + slot.cores) / device.cores
        + weights.memory * (memory + slot.memory) / device.memory_mib
    )


def fit_container(
    slots: Sequence[Slot],
    container: ContainerRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[ContainerGrants | None, str]:
    """Place every vendor request of one container, charging the slots.

    Returns the grants, or None and HAMi's reason. `earlier` holds the grants
    of this pod's previous containers on this node (they count against quota).
    """
    adapters = [(request, ctx.vendors.get(request.vendor)) for request in container]
    # Per device type, the requests whose vendor it matches: found once per type.
    served_by_type: dict[str, tuple[DeviceRequest, ...]] = {}
    for slot in slots:
        served = served_by_type.get(slot.device.type)
        if served is None:
            served = served_by_type[slot.device.type] = tuple(
                request for request, vendor in adapters if vendor.matches(slot.device.type)
            )
        slot.score = score_device(slot, served, ctx.weights)
    granted: list[Grant] = []
    for request in sorted(container, key=lambda r: r.vendor):
        vendor = ctx.vendors.get(request.vendor)
        key = device_sort_key(ctx.policy, request.filters.numa_bind)
        ordered = sorted(
            (slot for slot in slots if request in served_by_type[slot.device.type]),
            key=lambda s: key((s.score, s.device.numa, s.used, s.device.index)),
        )
        if request.count > len(ordered) and not is_mig_request(
            request, (slot.device for slot in ordered)
        ):
            return None, reasons.NODE_INSUFFICIENT_DEVICE
        fit = vendor.fit or fit_request
        picks, reason = fit(ordered, request, ctx, [*earlier, tuple(granted)])
        if picks is None:
            return None, reason
        by_id = {slot.device.id: slot for slot in ordered}
        charge = vendor.charge_slots
        for pick in picks:
            slot = by_id[pick.uuid]
            grant = charge_slice(slot, pick) if slot.device.mode == MIG_MODE else pick
            if grant is None:
                return None, f"AddResourceUsage failed for device {pick.uuid}: {MIG_CHARGE_FAILED}"
            slot.used = charge(slot.used, ordered, request) if charge else slot.used + 1
            slot.memory += grant.memory_mib
            slot.cores += grant.cores
            granted.append(grant)
    return tuple(granted), ""


CustomFilterRule = Callable[[Device, Sequence[ContainerGrants]], bool]
"""HAMi's `customFilterRule` (Metax GPU, Mthreads): may this device, which passed every
other check, be given, knowing the pod's grants on this node so far?"""


def fit_request(
    devices: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
    custom_rule: CustomFilterRule | None = None,
) -> tuple[list[Grant] | None, str]:
    """HAMi's NVIDIA (standard) Fit over policy-sorted devices, trying the tail first.

    `custom_rule`, checked last, refuses a device as `CardNotFoundCustomFilterRule`.
    A GPU in MIG mode is checked last by the MIG rule instead (`mig_fit.custom_filter`,
    `CardMigTopologyInfeasible`), and is tried again after each slice it gives, as
    one GPU may host several slices of one container."""
    filters = request.filters
    topology = ctx.policy.topology and ctx.vendors.get(request.vendor).topology_aware
    wanted = remaining = request.count
    cores = request.cores
    previous_numa: int | None = None
    picks: list[Grant] = []
    failed: Counter[str] = Counter()
    position = len(devices)
    while position > 0:
        position -= 1
        slot = devices[position]
        device = slot.device
        if not device.healthy or (
            (slot.tags or device.mode == MIG_MODE) and not usage_sound(device, slot)
        ):
            failed[reasons.CARD_NOT_HEALTH] += 1
            continue
        if device.id in ctx.node.cordoned:
            failed[reasons.CARD_CORDONED] += 1
            continue
        if not type_allowed(filters, device):
            failed[reasons.CARD_TYPE_MISMATCH] += 1
            continue
        if filters.numa_bind and previous_numa != device.numa:
            if remaining != wanted:
                failed[reasons.NUMA_NOT_FIT] += len(picks)
            remaining = wanted
            previous_numa = device.numa
            picks = []
        if not uuid_allowed(filters, device.id):
            failed[reasons.CARD_UUID_MISMATCH] += 1
            continue
        if device.count <= slot.used:
            failed[reasons.CARD_TIME_SLICING_EXHAUSTED] += 1
            continue
        if ctx.policy.mutex and slot.used > 0:
            failed[reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
            continue
        cores = min(cores, FULL_CARD_CORES)
        memory = request.memory_on(device.memory_mib)
        if not _quota_allows(ctx, request.vendor, memory, cores, picks, earlier):
            failed[reasons.RESOURCE_QUOTA_NOT_FIT] += 1
            continue
        if device.memory_mib - slot.memory < memory:
            failed[reasons.CARD_INSUFFICIENT_MEMORY] += 1
            continue
        if device.cores - slot.cores < cores:
            failed[reasons.CARD_INSUFFICIENT_CORE] += 1
            continue
        if device.cores == FULL_CARD_CORES and cores == FULL_CARD_CORES and slot.used > 0:
            failed[reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
            continue
        if device.cores != 0 and slot.cores == device.cores and cores == 0:
            failed[reasons.CARD_COMPUTE_UNITS_EXHAUSTED] += 1
            continue
        mig = device.mode == MIG_MODE
        if mig:
            if not custom_filter(device, slot, picks, memory):
                failed[CARD_MIG_TOPOLOGY_INFEASIBLE] += 1
                continue
        elif custom_rule is not None and not custom_rule(device, earlier):
            failed[reasons.CARD_NOT_FOUND_CUSTOM_FILTER_RULE] += 1
            continue
        if remaining > 0:
            if not topology:
                remaining -= 1
            picks.append(Grant(device.id, request.vendor, memory, cores, device.index))
        if remaining == 0 and not topology:
            return picks, ""
        if mig:
            position += 1
    if topology and len(picks) >= wanted:
        return _choose_by_topology(picks, wanted, ctx.node.pair_scores.get), ""
    if picks:
        failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picks)
    return None, reasons.format_reason(failed, len(devices))


def _quota_allows(
    ctx: FitContext,
    vendor: str,
    memory: int,
    cores: int,
    picks: Sequence[Grant],
    earlier: Sequence[ContainerGrants],
) -> bool:
    """HAMi's fitQuota: this device plus what the pod already took on this node."""
    if ctx.quota is None:
        return True
    for grant in picks:
        memory += grant.memory_mib
        cores += grant.cores
    for container in earlier:
        for grant in container:
            if grant.vendor == vendor:
                memory += grant.memory_mib
                cores += grant.cores
    return ctx.quota.fits(ctx.namespace, vendor, memory, cores)


def _choose_by_topology(
    picks: list[Grant], wanted: int, scores_of: Callable[[str], Mapping[str, int] | None]
) -> list[Grant]:
    """topology-aware: one card -> the worst-connected; several -> the set with
    the highest sum of pair scores, even when every sum is negative. As in
    HAMi, the first candidate wins a tie (candidates in the order Fit took them).
    """

    def pair(a: Grant, b: Grant) -> int:
        return (scores_of(a.uuid) or {}).get(b.uuid, 0)

    if len(picks) == wanted:
        return picks
    if wanted == 1:
        totals = [sum(pair(a, b) for b in picks if b.uuid != a.uuid) for a in picks]
        return [picks[totals.index(min(totals))]]
    best: tuple[Grant, ...] = ()
    best_score = 0
    for combo in combinations(picks, wanted):
        score = sum(pair(combo[i], b) for i in range(len(combo)) for b in combo[i + 1 :])
        if not best or score > best_score:
            best, best_score = combo, score
    return list(best)
