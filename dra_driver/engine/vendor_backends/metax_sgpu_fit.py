"""Metax sGPU's Fit and ScoreNode (HAMi's `pkg/device/metax/sdevice.go`, `score.go`).

HAMi's Fit reads the annotations of the pods already on a card (PodInfos) and
the qos policy the card runs; here each grant's `tag` holds the pod's app class
and the qos it expects the card to run (none for an online pod or a whole card),
kept in the card's usage (`Slot.tags`). HAMi also remembers, per card, the qos
it promised until the device plugin reports it (a jittery-qos cache); here the
latest share's tag is that promise, so it survives a scheduler restart and
needs no state of its own. The backend, webhook and register are in
`metax_sgpu`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import combinations

from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Device
from dra_driver.engine.policy import SPREAD
from dra_driver.engine.requests import ContainerRequest, DeviceRequest
from dra_driver.engine.vendor_backends.fit_checks import sharing_refusal
from dra_driver.engine.vendors import FitContext

METAX_SGPU = "Metax-SGPU"
QOS_POLICY = "metax-tech.com/sgpu-qos-policy"
TOPOLOGY_AWARE = "metax-tech.com/sgpu-topology-aware"
APP_CLASS = "metax-tech.com/sgpu-app-class"
ONLINE, OFFLINE = "online", "offline"
APP_CLASSES = (ONLINE, OFFLINE)
CARD_UNHEALTHY = "CardUnhealthy"
CARD_QOS_POLICY_MISMATCH = "CardQosPolicyMismatch"
CARD_APP_CLASS_MISMATCH = "CardAppClassMismatch"
WHOLE_CARD = 100
DIRECT_LINK_SCORE = 10
OVERRIDE_WEIGHT = 10000
"""HAMi's OverrideScore weight of a policy-neutral score (negated under spread)."""
TAG_SEPARATOR = ";"
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


# -- what a share tells later Fits


def share_tag(app_class: str, qos: str, cores: int) -> str:
    """A grant's tag: the pod's app class and the qos it expects the card to run (none
    for an online pod, nor for a whole card), as HAMi's AddResourceUsage."""
    expected = "" if app_class == ONLINE or cores == WHOLE_CARD else qos
    return f"{app_class}{TAG_SEPARATOR}{expected}"


def _tag_parts(tag: str) -> tuple[str, str]:
    app_class, _, qos = tag.partition(TAG_SEPARATOR)
    return app_class, qos


def class_counts(slot: Slot) -> tuple[int, int]:
    """How many shares on the card are of online and of offline pods."""
    classes = Counter(_tag_parts(tag)[0] for tag in slot.tags)
    return classes[ONLINE], classes[OFFLINE]


def app_class_fits(app_class: str, slot: Slot) -> bool:
    """checkAppClass: an idle card takes anyone; app-class pods share only with app-class
    pods, others only with others; an offline pod never joins an online one."""
    if slot.used == 0:
        return True
    online, offline = class_counts(slot)
    card_classed = bool(online or offline)
    if card_classed != (app_class in APP_CLASSES):
        return False
    return not (online and app_class == OFFLINE)


def card_qos(slot: Slot, earlier: Sequence[ContainerGrants]) -> str:
    """The qos the card runs: the latest non-online share's promise, else what this
    pod's earlier containers promised there, else the registered qos."""
    for tag in reversed(slot.tags):
        app_class, qos = _tag_parts(tag)
        if app_class != ONLINE:
            return qos
    for container in reversed(earlier):
        for grant in container:
            if grant.uuid == slot.device.id and grant.vendor == METAX_SGPU:
                app_class, qos = _tag_parts(grant.tag)
                if app_class != ONLINE:
                    return qos
    value = slot.device.custom_info.get("QosPolicy", "")
    return value if isinstance(value, str) else ""


def qos_fits(
    qos: str, slot: Slot, request: DeviceRequest, earlier: Sequence[ContainerGrants]
) -> bool:
    """checkDeviceQos: an idle card or a whole-card request needs no check; otherwise the
    card runs no qos yet or the one the pod asks for."""
    if slot.used == 0 or request.cores == WHOLE_CARD:
        return True
    running = card_qos(slot, earlier)
    return running in ("", qos)


# -- Fit


def link_zone(device: Device) -> int:
    value = device.custom_info.get("LinkZone", 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def online_order(slot: Slot) -> tuple[int, int, int]:
    """prioritizeOnlineDevices: cards with fewer online shares first, cards running only
    offline shares last (fewest first), ties by fewer offline shares."""
    online, offline = class_counts(slot)
    if offline and not online:
        return (1, offline, 0)
    return (0, online, offline)


def prefer_online(candidates: list[Slot], wanted: int) -> list[Slot]:
    """The `wanted` least loaded cards for an online pod (stable where HAMi's sort is not)."""
    return sorted(candidates, key=online_order)[:wanted]


def prefer_link_zone(candidates: list[Slot], wanted: int) -> list[Slot]:
    """prioritizeExclusiveDevices: the smallest MetaLink zone that holds them all, else
    zones smallest first, then cards on no zone. Zones of one size keep the order
    their first card came in (HAMi's map order is random)."""
    zones: dict[int, list[Slot]] = {}
    for slot in candidates:
        zones.setdefault(link_zone(slot.device), []).append(slot)
    linked = sorted((cards for zone, cards in zones.items() if zone > 0), key=len)
    unlinked = [slot for zone, cards in zones.items() if zone <= 0 for slot in cards]
    for cards in linked:
        if len(cards) >= wanted:
            return cards[:wanted]
    chosen = [slot for cards in linked for slot in cards] + unlinked
    return chosen[:wanted]


def fit_sgpu(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[list[Grant] | None, str]:
    """HAMi's MetaxSDevices.Fit: collect every candidate from the tail, then take the
    first `count` (re-ordered for online pods and for whole cards); on failure
    HAMi's `k/N Reason` counts, with the candidates as AllocatedCardsInsufficientRequest."""
    facts = dict(request.pod_facts)
    declared = facts.get(APP_CLASS)
    app_class = declared or ""
    qos = facts.get(QOS_POLICY, "")
    failed: Counter[str] = Counter()
    candidates: list[Slot] = []
    for slot in reversed(slots):
        reason = _refusal(slot, request, ctx, earlier, app_class, qos)
        if reason:
            failed[reason] += 1
            continue
        candidates.append(slot)
    if len(candidates) < request.count:
        if candidates:
            failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(candidates)
        return None, reasons.format_reason(failed, len(slots))
    best = candidates[: request.count]
    if len(candidates) > request.count:
        if declared is not None:
            if declared == ONLINE:
                best = prefer_online(candidates, request.count)
        elif request.cores == WHOLE_CARD:
            best = prefer_link_zone(candidates, request.count)
    cores = 0 if app_class == ONLINE else request.cores
    tag = share_tag(app_class, qos, cores)
    grants = []
    for slot in best:
        device = slot.device
        memory = _memory_of(request, device)
        grants.append(Grant(device.id, METAX_SGPU, memory, cores, device.index, tag=tag))
    return grants, ""


def _memory_of(request: DeviceRequest, device: Device) -> int:
    if request.memory_mib > 0:
        return request.memory_mib
    return device.memory_mib * request.memory_percent // 100


def _refusal(
    slot: Slot,
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
    app_class: str,
    qos: str,
) -> str:
    """Why the card is no candidate, in HAMi's order of checks; empty: it is one."""
    device = slot.device
    if request.vendor != METAX_SGPU:
        return reasons.CARD_TYPE_MISMATCH
    if not device.healthy:
        return CARD_UNHEALTHY
    if not app_class_fits(app_class, slot):
        return CARD_APP_CLASS_MISMATCH
    if app_class != ONLINE and not qos_fits(qos, slot, request, earlier):
        return CARD_QOS_POLICY_MISMATCH
    if refusal := sharing_refusal(slot, request.filters, ctx.policy.mutex):
        return refusal
    if device.memory_mib - slot.memory < _memory_of(request, device):
        return reasons.CARD_INSUFFICIENT_MEMORY
    if app_class == ONLINE:
        return ""
    if device.cores - slot.cores < request.cores:
        return reasons.CARD_INSUFFICIENT_CORE
    if device.cores == WHOLE_CARD and request.cores == WHOLE_CARD and slot.used > 0:
        return reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT
    if device.cores != 0 and slot.cores == device.cores and request.cores == 0:
        return reasons.CARD_COMPUTE_UNITS_EXHAUSTED
    return ""


# -- score


def link_score(cards: Sequence[tuple[str, int]]) -> int:
    """LinkDevices.Score: 10 for every pair of distinct cards on one MetaLink zone."""
    return sum(
        DIRECT_LINK_SCORE
        for (a, zone_a), (b, zone_b) in combinations(cards, 2)
        if a != b and zone_a and zone_a == zone_b
    )


def score_exclusive(grants: Sequence[Grant], slots: Sequence[Slot]) -> int:
    """scoreExclusiveDevices: ten times the links among the whole cards taken, minus the
    links among free cards that the choice breaks."""
    zones = {slot.device.id: link_zone(slot.device) for slot in slots}
    taken = [(g.uuid, zones.get(g.uuid, 0)) for g in grants if g.cores == WHOLE_CARD]
    free = [(s.device.id, link_zone(s.device)) for s in slots if s.used == 0]
    taken_ids = {uuid for uuid, _ in taken}
    rest = [card for card in free if card[0] not in taken_ids]
    loss = link_score(free) - link_score(taken) - link_score(rest)
    return 10 * link_score(taken) - loss


def score_online(grants: Sequence[Grant], slots: Sequence[Slot]) -> int:
    """scoreOnlineDevices: per card taken, -100 per offline share on a card running only
    offline shares, else -20 per online and -2 per offline share."""
    taken = {grant.uuid for grant in grants}
    total = 0
    for slot in slots:
        if slot.device.id not in taken:
            continue
        online, offline = class_counts(slot)
        total += -100 * offline if offline and not online else -20 * online - 2 * offline
    return total


def topology_scored(grants: Sequence[Grant], facts: Mapping[str, str], default: bool) -> bool:
    """topologyAwareEnable: only when the pod takes a whole card; the pod's
    `sgpu-topology-aware` (Go's ParseBool) overrides the configured default."""
    if not any(grant.cores == WHOLE_CARD for grant in grants):
        return False
    value = facts.get(TOPOLOGY_AWARE)
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    return default


def sgpu_score(
    slots: Sequence[Slot],
    grants: Sequence[ContainerGrants],
    container_requests: Sequence[ContainerRequest],
    node_policy: str,
    *,
    topology_default: bool,
) -> float:
    """ScoreNode (online load, else MetaLink topology, else 0) weighted as OverrideScore
    weights a policy-neutral score: x10000, or x-10000 under spread."""
    mine = [grant for container in grants for grant in container if grant.vendor == METAX_SGPU]
    facts = next(
        (
            dict(request.pod_facts)
            for container in container_requests
            for request in container
            if request.vendor == METAX_SGPU
        ),
        {},
    )
    if not mine:
        raw = 0
    elif facts.get(APP_CLASS) == ONLINE:
        raw = score_online(mine, slots)
    elif topology_scored(mine, facts, topology_default):
        raw = score_exclusive(mine, slots)
    else:
        raw = 0
    weight = -OVERRIDE_WEIGHT if node_policy == SPREAD else OVERRIDE_WEIGHT
    return float(weight * raw)
