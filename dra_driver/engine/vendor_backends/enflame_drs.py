"""Enflame GCU DRS: hard partitions of a GCU chosen by profile.

A DRS card is cut into slices; its device plugin publishes the card list and
the partition profiles (`<slices>g.<GB>gb` -> profile id) in
`enflame.com/gcu-drs-capacity`. A pod asks either a slice count
(`enflame.com/drs-gcu`) or memory and cores (`enflame.com/gcu-memory`, GB or
MiB, and `enflame.com/gcu-core`, percent). Unlike the standard Fit, a profile
is chosen first, the smallest that holds the request (`ModeNotFit` when none
does), then the first card that can take it. A grant holds the profile's
memory (GB x 1024 MiB) and core share (slices / most slices, rounded up).
While the pod is fitted, a grant takes its profile's slices of the card's
slots (HAMi's AddResourceUsage), so its next container meets the card's slice
capacity; a placed pod counts one slot per container, as HAMi's pod cache does.
The pod keys are only `hami.io/enflame-vgpu-devices-allocated` plus the
plugin's `enflame.com/gcu-assigned-*` and `assigned-containers`. No lock.
Reference: hami-vendors.md (Enflame DRS).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from api.quantity import QuantityError, parse_quantity
from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Device
from dra_driver.engine.requests import DeviceFilters, DeviceRequest
from dra_driver.engine.vendor_backends.adapters import PinnedSection, vendor_keys, vendor_resources
from dra_driver.engine.vendor_backends.base import (
    NO_LOCK,
    NO_MUTATION,
    NO_PATCH_CONTEXT,
    BackendFamily,
    ContainerMutation,
    PatchContext,
    VendorBackend,
    VendorNodeDevices,
    annotations_of,
)
from dra_driver.engine.vendor_backends.fit_checks import sharing_refusal
from dra_driver.engine.vendor_backends.reading import INT32_MAX, resource_value
from dra_driver.engine.vendors import FitContext, VendorAdapter
from dra_driver.errors import InvalidParameterError

DRS_TYPE = "Enflame"
SLICE_RESOURCE = "enflame.com/drs-gcu"
MEMORY_RESOURCE = "enflame.com/gcu-memory"
CORE_RESOURCE = "enflame.com/gcu-core"
CAPACITY = "enflame.com/gcu-drs-capacity"
USE_UUID, NO_USE_UUID = "enflame.com/use-gpuuuid", "enflame.com/nouse-gpuuuid"
ALLOCATED = "hami.io/enflame-vgpu-devices-allocated"
ASSIGNED = "enflame.com/gcu-assigned"
ASSIGNED_TIME = "enflame.com/gcu-assigned-time"
ASSIGNED_INDEX = "enflame.com/gcu-assigned-index"
ASSIGNED_ID = "enflame.com/gcu-assigned-id"
ASSIGNED_MINOR = "enflame.com/gcu-assigned-minor"
REQUEST_SIZE = "enflame.com/gcu-request-size"
ASSIGNED_CONTAINERS = "assigned-containers"
BY_SLICES = 0
"""`memory_percent` of a request that names a slice count (`memory_mib` holds it)."""
BY_SPEC = -1
"""`memory_percent` of a request by memory (GB or MiB) and core percent."""
MODE_NOT_FIT = "ModeNotFit"
"""HAMi's reason when no DRS profile holds the request (common.ModeNotFit)."""


@dataclass(frozen=True, slots=True)
class Profile:
    """One partition shape and its share of the card."""

    name: str
    id: str
    slices: int
    memory_gb: int
    core_percent: int


def parse_profile_name(name: str) -> tuple[int, int]:
    """(slices, GB) of `3g.20gb`; a part that does not read is 0."""
    parts = name.strip().lower().split(".")
    if len(parts) < 2:
        return 0, 0
    slices = _atoi(parts[0].strip().removesuffix("g"))
    if slices is None:
        return 0, 0
    return slices, _atoi(parts[1].strip().removesuffix("gb")) or 0


def _atoi(text: str) -> int | None:
    body = text[1:] if text[:1] in "+-" else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    value = int(text)
    return value if -(1 << 63) <= value < (1 << 63) else None


def profiles_of(profiles: Mapping[str, str], most_slices: int) -> list[Profile]:
    """The readable profiles, smallest first (by slices, then memory)."""
    found = []
    for name, profile_id in profiles.items():
        slices, memory = parse_profile_name(name)
        if slices > 0 and memory > 0 and most_slices > 0:
            core = math.ceil(slices * 100 / most_slices)
            found.append(Profile(name, str(profile_id), slices, memory, core))
    return sorted(found, key=lambda p: (p.slices, p.memory_gb))


def choose_profile(candidates: Sequence[Profile], request: DeviceRequest) -> Profile | None:
    """By slices: the profile of exactly that many. By spec: the first that holds
    the memory (MiB when above twice the largest profile's GB) and the cores."""
    if not candidates:
        return None
    if request.memory_percent == BY_SLICES:
        return next((p for p in candidates if p.slices == request.memory_mib), None)
    largest = candidates[-1].memory_gb
    memory_gb = request.memory_mib
    if memory_gb > largest * 2:
        memory_gb = math.ceil(memory_gb / 1024)
    for profile in candidates:
        if memory_gb > 0 and profile.memory_gb < memory_gb:
            continue
        if request.cores > 0 and profile.core_percent < request.cores:
            continue
        return profile
    return None


def _profile_for(slots: Sequence[Slot], request: DeviceRequest) -> Profile | None:
    most = max((int(s.device.custom_info.get("maxSlice", 0)) for s in slots), default=0)
    merged: dict[str, str] = {}
    for slot in slots:
        merged.update(slot.device.custom_info.get("profiles") or {})
    if most <= 0:
        most = max((parse_profile_name(name)[0] for name in merged), default=0)
    profile = choose_profile(profiles_of(merged, most), request)
    if profile is None or profile.slices > INT32_MAX or profile.memory_gb > INT32_MAX // 1024:
        return None
    return profile


def drs_fit(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[list[Grant] | None, str]:
    """Choose the profile, then the first card (tail first) with a free slice,
    the profile's memory and cores; one card per request."""
    profile = _profile_for(slots, request)
    if profile is None:
        return None, reasons.format_reason({MODE_NOT_FIT: 1}, len(slots))
    memory = profile.memory_gb * 1024
    failed: dict[str, int] = {}
    filters = request.filters
    for slot in reversed(slots):
        device = slot.device
        reason = ""
        if not device.healthy:
            reason = reasons.CARD_NOT_HEALTH
        elif request.vendor != DRS_TYPE:
            reason = reasons.CARD_TYPE_MISMATCH
        elif refusal := sharing_refusal(slot, filters, ctx.policy.mutex):
            reason = refusal
        elif device.memory_mib - slot.memory < memory:
            reason = reasons.CARD_INSUFFICIENT_MEMORY
        elif device.cores > 0 and device.cores - slot.cores < profile.core_percent:
            reason = reasons.CARD_INSUFFICIENT_CORE
        if reason:
            failed[reason] = failed.get(reason, 0) + 1
            continue
        return [Grant(device.id, request.vendor, memory, profile.core_percent, device.index)], ""
    return None, reasons.format_reason(failed, len(slots))


def add_slices(used: int, slices: int) -> int:
    """HAMi's AddResourceUsage on a card's `used`: the grant's slices (1 when it
    names none), clamped at int32 as HAMi's `Used` is."""
    return min(used + (slices if slices > 0 else 1), INT32_MAX)


def drs_charge(used: int, slots: Sequence[Slot], request: DeviceRequest) -> int:
    """`used` after one grant of `request`: plus the slices of the profile Fit chose."""
    profile = _profile_for(slots, request)
    return add_slices(used, profile.slices if profile is not None else 0)


def _value(raw: Any) -> int | None:
    """Quantity's Value(): rounded up to a whole number (None when unreadable)."""
    try:
        return math.ceil(parse_quantity(str(raw)))
    except QuantityError:
        return None


def drs_request(
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """Always one card: a slice count, else memory and cores to find a profile by."""

    def listed(key: str) -> tuple[str, ...]:
        return tuple(item.strip() for item in annotations.get(key, "").split(",") if item.strip())

    filters = DeviceFilters(use_uuids=listed(USE_UUID), no_use_uuids=listed(NO_USE_UUID))
    slices_raw = resource_value(container, SLICE_RESOURCE)
    if slices_raw is not None:
        slices = _value(slices_raw)
        if slices is not None and slices > 0:
            if slices > INT32_MAX:
                return None
            return DeviceRequest(DRS_TYPE, 1, slices, BY_SLICES, 0, filters)
    memory_raw, core_raw = (
        resource_value(container, MEMORY_RESOURCE),
        resource_value(container, CORE_RESOURCE),
    )
    if memory_raw is None and core_raw is None:
        return None
    memory = (_value(memory_raw) or 0) if memory_raw is not None else 0
    cores = (_value(core_raw) or 0) if core_raw is not None else 0
    if memory > INT32_MAX or cores > INT32_MAX:
        return None
    return DeviceRequest(DRS_TYPE, 1, memory, BY_SPEC, cores, filters)


DRS = VendorAdapter(
    name=DRS_TYPE,
    common_word=DRS_TYPE,
    resources=vendor_resources(SLICE_RESOURCE, MEMORY_RESOURCE, CORE_RESOURCE),
    annotations=vendor_keys(
        use_uuids=USE_UUID,
        no_use_uuids=NO_USE_UUID,
        to_allocate="",
        allocated=ALLOCATED,
    ),
    read_request=drs_request,
    fit=drs_fit,
    charge_slots=drs_charge,
)


def _capacity(raw: Any) -> int | None:
    """A card's slice capacity: a JSON number or a numeric string, clamped to int32."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        if isinstance(raw, float) and (math.isnan(raw) or abs(raw) > INT32_MAX + 1):
            return None
        return max(min(int(raw), INT32_MAX), -INT32_MAX - 1)
    if isinstance(raw, str):
        value = _atoi(raw.strip())
        return None if value is None else max(min(value, INT32_MAX), -INT32_MAX - 1)
    return None


class EnflameDrsBackend(VendorBackend):
    """Enflame DRS cards from `enflame.com/gcu-drs-capacity`."""

    def __init__(self) -> None:
        super().__init__(
            DRS, register_key=None, handshake_key=None, lock=NO_LOCK, to_allocate_key=""
        )

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """Checks the values and mirrors each of the three resources into whichever
        of limits and requests lacks it."""
        resources = container.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}

        def mirrored(name: str) -> tuple[dict[str, str], dict[str, str]]:
            value = str(limits.get(name, requests.get(name)))
            return (
                {} if name in limits else {name: value},
                {} if name in requests else {name: value},
            )

        if SLICE_RESOURCE in limits or SLICE_RESOURCE in requests:
            if (_value(limits.get(SLICE_RESOURCE, requests.get(SLICE_RESOURCE))) or 0) <= 0:
                raise InvalidParameterError(
                    f"{where}.resources.{SLICE_RESOURCE}",
                    f"{SLICE_RESOURCE} must be greater than 0",
                )
            add_limits, add_requests = mirrored(SLICE_RESOURCE)
            return ContainerMutation(True, add_limits, add_requests)
        has_memory = MEMORY_RESOURCE in limits or MEMORY_RESOURCE in requests
        has_core = CORE_RESOURCE in limits or CORE_RESOURCE in requests
        if not has_memory and not has_core:
            return NO_MUTATION
        add_limits: dict[str, str] = {}
        add_requests: dict[str, str] = {}
        if has_memory:
            if (_value(resource_value(container, MEMORY_RESOURCE)) or 0) <= 0:
                raise InvalidParameterError(
                    f"{where}.resources.{MEMORY_RESOURCE}",
                    f"{MEMORY_RESOURCE} must be greater than 0",
                )
            more_limits, more_requests = mirrored(MEMORY_RESOURCE)
            add_limits.update(more_limits)
            add_requests.update(more_requests)
        if has_core:
            core = _value(resource_value(container, CORE_RESOURCE)) or 0
            if not 0 < core <= 100:
                raise InvalidParameterError(
                    f"{where}.resources.{CORE_RESOURCE}",
                    f"{CORE_RESOURCE} must be in range (0,100]",
                )
            more_limits, more_requests = mirrored(CORE_RESOURCE)
            add_limits.update(more_limits)
            add_requests.update(more_requests)
        return ContainerMutation(True, add_limits, add_requests)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """One device per card: slots = its slice capacity, memory = the largest
        profile's GB x 1024 MiB, cores 100; the profiles ride in custom_info."""
        name = str((node.get("metadata") or {}).get("name") or "")
        raw = annotations_of(node).get(CAPACITY)
        if raw is None:
            return VendorNodeDevices(self.name, problem=f"annotation not found {CAPACITY}")
        try:
            spec = json.loads(raw)
            cards = list(spec.get("devices") or [])
            profiles = {str(k): str(v) for k, v in (spec.get("profiles") or {}).items()}
        except (ValueError, AttributeError, TypeError) as error:
            return VendorNodeDevices(self.name, (), raw, f"failed to parse {CAPACITY}: {error}")
        most_slices = max((parse_profile_name(p)[0] for p in profiles), default=0)
        most_gb = max((parse_profile_name(p)[1] for p in profiles), default=0) or most_slices
        if most_slices <= 0:
            return VendorNodeDevices(
                self.name, (), raw, f"no valid drs profiles found on node {name}"
            )
        devices = []
        for position, card in enumerate(cards):
            index = _atoi(str(card.get("index", "")))
            index = position if index is None else index
            capacity = _capacity(card.get("capacity"))
            if capacity is None or capacity <= 0:
                return VendorNodeDevices(self.name, (), raw, f"invalid drs capacity on node {name}")
            minor = str(card.get("minor") or "").strip() or str(index)
            devices.append(
                Device(
                    id=f"{name}-enflame-drs-{index}",
                    index=index,
                    type=DRS_TYPE,
                    count=capacity,
                    memory_mib=most_gb * 1024,
                    cores=100,
                    custom_info={
                        "minor": minor,
                        "index": str(index),
                        "profiles": dict(profiles),
                        "maxSlice": most_slices,
                    },
                )
            )
        if not devices:
            return VendorNodeDevices(self.name, (), raw, f"no drs devices found on node {name}")
        return VendorNodeDevices(self.name, tuple(devices), raw, "")

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """PatchAnnotations: the allocated key, `gcu-assigned` false with its time,
        the first granted card's index, id, minor and slices, and per container
        name its slices and profile (`assigned-containers`, JSON). The profile is
        chosen again from the container's request (`context.requests`) on its card
        (`context.devices`); the names come from `context.pod`."""
        result = super().pod_annotations(containers)
        if not result:
            return result
        result[ASSIGNED] = "false"
        result[ASSIGNED_TIME] = str(context.now_ns)
        requests = [
            next((r for r in container if r.vendor == self.name), None)
            for container in context.requests
        ]
        by_id = {device.id: device for device in context.devices}
        spec = context.pod.get("spec") or {}
        names = [
            c.get("name", "")
            for c in (*(spec.get("initContainers") or []), *(spec.get("containers") or []))
        ]
        assigned: dict[str, dict[str, Any]] = {}
        for position, container in enumerate(containers):
            grants = [grant for grant in container if grant.vendor == self.name]
            request = requests[position] if position < len(requests) else None
            if not grants or request is None:
                continue
            device = by_id.get(grants[0].uuid)
            slots = [_slot_view(device)] if device is not None else []
            profile = _profile_for(slots, request)
            slices = profile.slices if profile is not None else 1
            entry: dict[str, Any] = {"allocated": False, "request": slices}
            if profile is not None:
                entry |= {"profileID": profile.id, "profileName": profile.name}
            name = names[position] if position < len(names) else f"container-{position}"
            assigned[name] = entry
            info = device.custom_info if device is not None else {}
            if ASSIGNED_INDEX not in result and info.get("index"):
                result[ASSIGNED_INDEX] = result[ASSIGNED_ID] = str(info["index"])
            if ASSIGNED_MINOR not in result and info.get("minor"):
                result[ASSIGNED_MINOR] = str(info["minor"])
            result.setdefault(REQUEST_SIZE, str(slices))
        if assigned:
            result[ASSIGNED_CONTAINERS] = json.dumps(
                dict(sorted(assigned.items())), separators=(",", ":")
            )
        return result


def _slot_view(device: Device) -> Slot:
    return Slot(device, 0, 0, 0)


class EnflameConfig(PinnedSection):
    """The `enflame:` section of device-config.yaml (HAMi's keys)."""

    resource_name_drs_gcu: Literal[SLICE_RESOURCE] = Field(
        SLICE_RESOURCE, alias="resourceNameDRSGCU"
    )
    resource_name_memory: Literal[MEMORY_RESOURCE] = Field(
        MEMORY_RESOURCE, alias="resourceNameGCUMemory"
    )
    resource_name_core: Literal[CORE_RESOURCE] = Field(CORE_RESOURCE, alias="resourceNameGCUCore")


FAMILY = BackendFamily(
    section="enflame",
    model=EnflameConfig,
    build=lambda config: (EnflameDrsBackend(),),
)
