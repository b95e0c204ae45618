"""Kunlun (Baidu) XPUs: whole cards (`kunlun`) and shared vXPUs (`XPU`).

Both place cards on an 8-slot graph instead of HAMi's standard loop: two wings
of four cards (slots 0-3, 4-7), every card linked inside its wing, card k
linked to card k+4 across. HAMi's `graghSelect` prefers the wing a request
fills best, then linked cross-wing pairs or 4-card groups, and refuses every
other shape (3, 5, 6 or 7 cards) with one coarse reason. Slots are positions
in the policy-sorted device list Fit receives, as in HAMi. The two vendors
differ only in what a card may take: a whole card must be idle; a vXPU card
takes another share only when the shares on it all have the same memory,
which the webhook rounds up to a quarter, half or all of a card.

Whole cards come from `status.capacity` (no register, handshake or lock) and
write only `hami.io/kunlun-allocated` plus `BAIDU_COM_DEVICE_IDX`; vXPUs
register JSON in `hami.io/node-register-xpu` and take the shared lock. Both
honour two uuid annotation pairs, HAMi's and the legacy `baidu.com` ones.
Reference: hami-vendors.md (Kunlun).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import Field

from api.hami_annotations import RegisteredDevice, decode_node_devices_json
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Device
from dra_driver.engine.requests import ContainerRequest, DeviceFilters, DeviceRequest
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
    capacity_cards,
)
from dra_driver.engine.vendor_backends.reading import resource_value
from dra_driver.engine.vendors import FitContext, VendorAdapter

WHOLE_TYPE = "kunlun"
VXPU_TYPE = "XPU"
WHOLE_COUNT = "kunlunxin.com/xpu"
VXPU_COUNT = "kunlunxin.com/vxpu"
VXPU_MEMORY = "kunlunxin.com/vxpu-memory"
CARD_MEMORY_MIB = 98304
MEMORY_STEPS_MIB = (24576, 49152)
"""vXPU memory is rounded up to the first step that holds it, else a whole card."""
USE_UUID, NO_USE_UUID = "hami.io/use-xpu-uuid", "hami.io/no-use-xpu-uuid"
LEGACY_USE_UUID, LEGACY_NO_USE_UUID = "baidu.com/use-gpuuuid", "baidu.com/nouse-gpuuuid"
DEVICE_SELECTION = "BAIDU_COM_DEVICE_IDX"
WHOLE_ALLOCATED = "hami.io/kunlun-allocated"
VXPU_REGISTER = "hami.io/node-register-xpu"
VXPU_HANDSHAKE = "hami.io/node-handshake-xpu"

MATCH_NOTHING = ("",)
"""A use-uuid list no device id equals: two use lists that share no uuid."""

WING = 4
SLOTS = 8
CROSS_PAIRS = frozenset({(0, 4), (1, 5), (2, 6), (3, 7)})
WING_PAIRS = (
    (0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3),
    (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7),
)  # fmt: skip
CROSS_QUADS = ((0, 1, 4, 5), (2, 3, 6, 7), (0, 2, 4, 6), (1, 3, 5, 7), (0, 3, 4, 7), (1, 2, 5, 6))
ODD_WING_SIZES = (1, 3, 2, 4)
"""For an odd count, the free-card counts of a wing tried in turn, so a lone
free card is used before a pair is broken."""
FRAGMENTATION_SCORES = {-1: 3000, 0: 2000, 1: 1000, 2: 0}


# -- the graph


def select_slots(free: Sequence[bool], indexes: Sequence[int], count: int) -> list[int]:
    """Device indexes for `count` cards, or [] when no shape fits (`graghSelect`).

    `free[slot]` says whether the card in that slot may take the request and
    `indexes[slot]` is its device index.
    """
    left = sum(1 for slot, ok in enumerate(free) if ok and slot < WING)
    right = sum(1 for slot, ok in enumerate(free) if ok and slot >= WING)
    if count == SLOTS:
        return list(range(SLOTS)) if left + right == SLOTS else []
    if count not in (1, 2, 4):
        return []
    if left >= count or right >= count:
        for size in range(count, WING + 1):
            wanted = ODD_WING_SIZES[size - 1] if count % 2 else size
            if left == wanted:
                return _first_free(free, indexes, 0, count)
            if right == wanted:
                return _first_free(free, indexes, WING, count)
    return _across_wings(free, indexes, count)


def _first_free(free: Sequence[bool], indexes: Sequence[int], start: int, count: int) -> list[int]:
    chosen: list[int] = []
    for slot in range(start, min(SLOTS, len(free))):
        if free[slot]:
            chosen.append(indexes[slot])
            if len(chosen) == count:
                break
    return chosen


def _across_wings(free: Sequence[bool], indexes: Sequence[int], count: int) -> list[int]:
    usable = [indexes[slot] for slot, ok in enumerate(free) if ok]
    if count == 2:
        for first in usable:
            for second in usable:
                if (first, second) in CROSS_PAIRS or (second, first) in CROSS_PAIRS:
                    return [first, second]
        return []
    have = set(usable)
    if count == 4 and len(usable) in (4, 5):
        return next((list(quad) for quad in CROSS_QUADS if have.issuperset(quad)), [])
    if count == 4 and len(usable) == 6:
        # Prefer a group whose two leftover cards are still linked; else the last group.
        chosen: list[int] = []
        for quad in CROSS_QUADS:
            if have.issuperset(quad):
                chosen = list(quad)
                rest = have.difference(quad)
                if any(rest.issuperset(pair) for pair in (*sorted(CROSS_PAIRS), *WING_PAIRS)):
                    return chosen
        return chosen
    return []


def fragments(indexes: Sequence[int]) -> int:
    """HAMi's countbubble: per wing 0 when full, 2 with one card, else 1; no cards is 1."""
    cards = set(indexes)
    left = sum(1 for index in cards if index < WING)
    right = len(cards) - left
    if not cards:
        return 1
    return _wing_fragments(left) + _wing_fragments(right)


def _wing_fragments(cards: int) -> int:
    if cards == WING:
        return 0
    return 2 if cards == 1 else 1


def fragmentation_score(busy: Sequence[int], placed: Sequence[int]) -> int:
    """Whole-card ScoreNode: 3000 when the pod's cards fragment one step less than
    the node's busy cards, 2000 the same, 1000 one more, 0 two more."""
    return FRAGMENTATION_SCORES.get(fragments(placed) - fragments(busy), 1000)


# -- requests


def round_memory(mib: int) -> int:
    """The vXPU memory a request gets: 24576, 49152 or a whole card (98304 MiB)."""
    return next((step for step in MEMORY_STEPS_MIB if mib <= step), CARD_MEMORY_MIB)


def _whole_value(raw: Any) -> int | None:
    """Quantity's AsInt64: the value when it is a whole number within int64."""
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return None
    if value != value.to_integral_value() or not -(1 << 63) <= value < (1 << 63):
        return None
    return int(value)


def uuid_filters(annotations: Mapping[str, str]) -> DeviceFilters:
    """Both uuid pairs as one: a device must pass HAMi's and the legacy pair."""

    def listed(key: str) -> tuple[str, ...]:
        return tuple(item.strip() for item in annotations.get(key, "").split(",") if item.strip())

    ours, legacy = listed(USE_UUID), listed(LEGACY_USE_UUID)
    use = ours or legacy
    if ours and legacy:
        use = tuple(uuid for uuid in ours if uuid in legacy) or MATCH_NOTHING
    return DeviceFilters(
        use_uuids=use, no_use_uuids=listed(NO_USE_UUID) + listed(LEGACY_NO_USE_UUID)
    )


def whole_request(
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """Whole cards: `{n, kunlun, 0 MiB, 100 %, 0 cores}`; a non-integer count asks nothing."""
    raw = resource_value(container, WHOLE_COUNT)
    count = None if raw is None else _whole_value(raw)
    if not count or count < 0:
        return None
    return DeviceRequest(WHOLE_TYPE, count, 0, 100, 0, uuid_filters(annotations))


def vxpu_request(
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """vXPUs: memory rounded up, cores in proportion; no memory is a whole card."""
    raw = resource_value(container, VXPU_COUNT)
    count = None if raw is None else _whole_value(raw)
    if not count or count < 0:
        return None
    raw_memory = resource_value(container, VXPU_MEMORY)
    memory = None if raw_memory is None else _whole_value(raw_memory)
    filters = uuid_filters(annotations)
    if memory is None:
        return DeviceRequest(VXPU_TYPE, count, CARD_MEMORY_MIB, 100, 100, filters)
    rounded = round_memory(memory)
    return DeviceRequest(VXPU_TYPE, count, rounded, 0, rounded * 100 // CARD_MEMORY_MIB, filters)


# -- fit and score


def _uuid_allowed(filters: DeviceFilters, device_id: str) -> bool:
    if filters.use_uuids and device_id not in filters.use_uuids:
        return False
    return device_id not in filters.no_use_uuids


def whole_card_free(slot: Slot, request: DeviceRequest) -> bool:
    """A whole card takes a request only when idle and healthy (HAMi's FitXPU)."""
    return slot.used == 0 and slot.device.healthy


def vxpu_card_fits(slot: Slot, request: DeviceRequest) -> bool:
    """HAMi's FitVXPU: healthy, memory left, and every share on it the same size."""
    device = slot.device
    if not device.healthy or request.memory_mib + slot.memory > device.memory_mib:
        return False
    return slot.used == 0 or slot.memory // slot.used == request.memory_mib


def _graph_fit(
    slots: Sequence[Slot],
    request: DeviceRequest,
    takes: Callable[[Slot, DeviceRequest], bool],
    whole: bool,
    mutex: bool,
) -> tuple[list[Grant] | None, str]:
    refused_by_uuid: set[str] = set()

    def free(slot: Slot) -> bool:
        if not _uuid_allowed(request.filters, slot.device.id):
            refused_by_uuid.add(slot.device.id)
            return False
        return (not mutex or slot.used == 0) and takes(slot, request)

    flags = [free(slot) for slot in slots]
    chosen = select_slots(flags, [slot.device.index for slot in slots], request.count)
    if not chosen:
        failed: dict[str, int] = {}
        if mutex:
            busy = sum(1 for slot in slots if slot.used > 0 and takes(slot, request))
            if busy:
                failed[reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] = busy
        if not failed and refused_by_uuid:
            failed[reasons.CARD_UUID_MISMATCH] = len(refused_by_uuid)
        if not failed:
            failed[reasons.NUMA_NOT_FIT] = 1
        return None, reasons.format_reason(failed, len(slots))
    by_index = {}
    for slot in slots:
        by_index.setdefault(slot.device.index, slot)
    grants = []
    for index in chosen:
        slot = by_index.get(index)
        if slot is None:
            continue
        device = slot.device
        memory, cores = (
            (device.memory_mib, device.cores) if whole else (request.memory_mib, request.cores)
        )
        grants.append(Grant(device.id, request.vendor, memory, cores, device.index))
    return grants, ""


def whole_fit(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[list[Grant] | None, str]:
    """Whole cards on the graph; a grant holds the card's memory and cores."""
    return _graph_fit(slots, request, whole_card_free, True, mutex=False)


def vxpu_fit(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[list[Grant] | None, str]:
    """vXPUs on the graph; under `mutex` only idle cards, and a refusal counts the
    busy cards that would otherwise have taken the share."""
    return _graph_fit(slots, request, vxpu_card_fits, False, mutex=ctx.policy.mutex)


def whole_score(
    slots: Sequence[Slot],
    grants: Sequence[ContainerGrants],
    container_requests: Sequence[ContainerRequest],
    node_policy: str,
) -> float:
    """HAMi's ScoreNode for whole cards: the fragmentation of the pod's cards against
    the cards busy before the pod (`slots`, the node's usage), whatever the policy;
    0 on a node that has devices of another type too, as HAMi's."""
    if any(WHOLE_TYPE not in slot.device.type for slot in slots):
        return 0.0
    busy = [slot.device.index for slot in slots if slot.used > 0]
    placed = [grant.index for ctr in grants for grant in ctr if grant.vendor == WHOLE_TYPE]
    return float(fragmentation_score(busy, placed))


WHOLE = VendorAdapter(
    name=WHOLE_TYPE,
    common_word=WHOLE_TYPE,
    resources=vendor_resources(WHOLE_COUNT),
    annotations=vendor_keys(
        use_uuids=USE_UUID,
        no_use_uuids=NO_USE_UUID,
        to_allocate="",
        allocated=WHOLE_ALLOCATED,
    ),
    read_request=whole_request,
    fit=whole_fit,
    usage_score=whole_score,
)

VXPU = VendorAdapter(
    name=VXPU_TYPE,
    common_word=VXPU_TYPE,
    resources=vendor_resources(VXPU_COUNT, VXPU_MEMORY),
    annotations=vendor_keys(
        use_uuids=USE_UUID,
        no_use_uuids=NO_USE_UUID,
        to_allocate="hami.io/xpu-devices-to-allocate",
        allocated="hami.io/xpu-devices-allocated",
    ),
    read_request=vxpu_request,
    fit=vxpu_fit,
)


class KunlunBackend(VendorBackend):
    """Whole Kunlun cards, read from `status.capacity`."""

    def __init__(self) -> None:
        super().__init__(
            WHOLE, register_key=None, handshake_key=None, lock=NO_LOCK, to_allocate_key=""
        )

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """One card per unit of capacity, 98304 MiB each; the upper half on NUMA 1."""

        def card(name: str, index: int, cards: int) -> Device:
            return Device(
                id=f"{name}-kunlun-{index}",
                index=index,
                type=WHOLE_TYPE,
                count=100,
                memory_mib=CARD_MEMORY_MIB,
                cores=100,
                numa=1 if index >= cards // 2 else 0,
            )

        return capacity_cards(node, self.name, WHOLE_COUNT, card)

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """`hami.io/kunlun-allocated`, and `BAIDU_COM_DEVICE_IDX`: the device indexes
        of the last container that got cards (HAMi overwrites it per container)."""
        result = super().pod_annotations(containers)
        for container in containers:
            indexes = [str(grant.index) for grant in container if grant.vendor == self.name]
            if indexes:
                result[DEVICE_SELECTION] = ",".join(indexes)
        return result


class KunlunVxpuBackend(VendorBackend):
    """Shared Kunlun vXPUs, registered as JSON by their device plugin."""

    def __init__(self) -> None:
        super().__init__(VXPU, register_key=VXPU_REGISTER, handshake_key=VXPU_HANDSHAKE)

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        """Only HAMi's JSON register (UnMarshalNodeDevices)."""
        return decode_node_devices_json(value, VXPU_REGISTER)

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """The vXPU count in limits; a memory limit is rounded up into limits and requests."""
        limits = (container.get("resources") or {}).get("limits") or {}
        if VXPU_COUNT not in limits:
            return NO_MUTATION
        if VXPU_MEMORY not in limits:
            return ContainerMutation(True)
        memory = _whole_value(limits[VXPU_MEMORY])
        rounded = str(round_memory(memory if memory is not None else 0))
        return ContainerMutation(
            True, limits={VXPU_MEMORY: rounded}, requests={VXPU_MEMORY: rounded}
        )


class KunlunConfig(PinnedSection):
    """The `kunlun:` section of device-config.yaml (HAMi's keys)."""

    resource_count_name: Literal[WHOLE_COUNT] = Field(WHOLE_COUNT, alias="resourceCountName")
    resource_v_count_name: Literal[VXPU_COUNT] = Field(VXPU_COUNT, alias="resourceVCountName")
    resource_v_memory_name: Literal[VXPU_MEMORY] = Field(VXPU_MEMORY, alias="resourceVMemoryName")


FAMILY = BackendFamily(
    section="kunlun",
    model=KunlunConfig,
    build=lambda config: (KunlunBackend(), KunlunVxpuBackend()),
)
