"""The structured-parameters allocator of the kube-scheduler stand-in, pure.

Owns what the scheduler-allocated mode decides: which devices of a node's
ResourceSlices serve an unallocated claim's requests, and the `status.allocation`
kube-scheduler would write for them. Devices come from complete, newest-generation
pools on the node; they match by DeviceClass and request selectors (CEL, via
dra_cel, as kube-scheduler evaluates them); a device with a NoSchedule/NoExecute
taint the request does not tolerate is never chosen; consumable capacity is rounded
up, or refused, by each capacity's requestPolicy (capacity_policy, the rule the
controller uses too) and summed over every allocated claim; a partitionable device
(`consumesCounters`, e.g. a MIG placement) is taken only while its pool's shared
counters hold what it consumes beside every allocated one, as kube-scheduler v1.36
does, so two overlapping placements are never both allocated.

It reads only the objects it is given (no client, no clock: `now` and share ids are
passed in), so dra_scheduler.py can try it on every node of one scheduling cycle.
It may call api.quantity, dra_driver.errors and dra_driver.objects (capacity_policy,
dra_cel, node_predicates).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from api.quantity import QuantityError, format_quantity_value, parse_quantity
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import CapacityRefusal, take_device
from dra_driver.objects.dra_cel import CelCompileError, cel_device_from_slice, compile_selector
from dra_driver.objects.node_predicates import node_selector_matches, untolerated_taint

log = logging.getLogger(__name__)

DeviceKey = tuple[str, str, str]
DeviceMatcher = Callable[[str, Mapping[str, Any]], bool]


def unqualified(name: str, driver: str) -> str:
    """An attribute or capacity name without the driver's own domain, which is implied."""
    prefix = f"{driver}/"
    return name[len(prefix) :] if name.startswith(prefix) else name


def selectors_matcher(selectors: Sequence[Mapping[str, Any]], field_path: str) -> DeviceMatcher:
    """All the selectors' CEL expressions (dra_cel, as kube-scheduler evaluates them).

    An expression that does not compile raises InvalidParameterError naming the field;
    one that fails on a device raises CelEvaluationError, which fails the allocation, as
    a CEL runtime error does in kube-scheduler.
    """
    compiled = []
    for index, selector in enumerate(selectors):
        expression = (selector.get("cel") or {}).get("expression") or ""
        try:
            compiled.append(compile_selector(expression))
        except CelCompileError as error:
            raise InvalidParameterError(
                f"{field_path}[{index}].cel.expression", error.reason
            ) from error

    def matches(driver: str, device: Mapping[str, Any]) -> bool:
        view = cel_device_from_slice(driver, device)
        return all(selector.matches(view) for selector in compiled)

    return matches


def untolerated_device_taint(
    device: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """The first NoSchedule/NoExecute taint of the device no toleration of the request covers."""
    taint = untolerated_taint(device.get("taints") or [], tolerations)
    return dict(taint) if taint is not None else None


CounterKey = tuple[str, str, str]
"""(driver, pool, counter set): one pool's shared counter set."""
Counters = Mapping[CounterKey, Mapping[str, Decimal]]


@dataclass(frozen=True, slots=True)
class PoolDevice:
    """One device of a usable pool, as the slice publishes it."""

    driver: str
    pool: str
    spec: Mapping[str, Any]
    consumes: Counters = field(default_factory=dict)
    """What it takes of its pool's shared counters while allocated (`consumesCounters`)."""

    @property
    def key(self) -> DeviceKey:
        return (self.driver, self.pool, str(self.spec["name"]))

    @property
    def shared(self) -> bool:
        return bool(self.spec.get("allowMultipleAllocations"))


def _slice_on_node(spec: Mapping[str, Any], node: dict[str, Any]) -> bool:
    if spec.get("nodeName"):
        return bool(spec["nodeName"] == node["metadata"]["name"])
    if spec.get("allNodes"):
        return True
    selector = spec.get("nodeSelector")
    return selector is not None and node_selector_matches(node, dict(selector))


def _node_pools(
    slices: Sequence[Mapping[str, Any]], node: dict[str, Any]
) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """The slice specs of each pool the node can use: only the newest generation, only if
    complete (a pool's counters-only slice counts among its slices)."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if _slice_on_node(spec, node):
            pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    usable = {}
    for key, specs in pools.items():
        newest = max(int(s["pool"]["generation"]) for s in specs)
        current = [s for s in specs if int(s["pool"]["generation"]) == newest]
        if len(current) == int(current[0]["pool"]["resourceSliceCount"]):
            usable[key] = current
    return usable


def _amounts(driver: str, pool: str, sets: Sequence[Mapping[str, Any]]) -> Counters:
    """`sharedCounters` or `consumesCounters` entries as amounts per counter set."""
    found: dict[CounterKey, dict[str, Decimal]] = {}
    for entry in sets:
        name = str(entry.get("name") or entry.get("counterSet") or "")
        amounts = found.setdefault((driver, pool, name), {})
        for counter, value in (entry.get("counters") or {}).items():
            amount = parse_quantity(str((value or {}).get("value", "0")))
            amounts[counter] = amounts.get(counter, Decimal(0)) + amount
    return found


def node_pool_devices(
    slices: Sequence[Mapping[str, Any]], node: dict[str, Any]
) -> list[PoolDevice]:
    """The devices the node can use (`_node_pools`); one whose counter consumption does
    not parse is left out, as kube-scheduler cannot charge it."""
    devices: list[PoolDevice] = []
    for (driver, pool), specs in _node_pools(slices, node).items():
        for spec in specs:
            for device in spec.get("devices") or []:
                try:
                    consumes = _amounts(driver, pool, device.get("consumesCounters") or [])
                except QuantityError:
                    log.warning("unreadable consumesCounters", extra={"device": device.get("name")})
                    continue
                devices.append(PoolDevice(driver, pool, device, consumes))
    return devices


def node_pool_counters(slices: Sequence[Mapping[str, Any]], node: dict[str, Any]) -> Counters:
    """The shared counter sets of the pools the node can use (`sharedCounters`, v1.36:
    in slices of their own), what partitionable devices consume."""
    counters: dict[CounterKey, Mapping[str, Decimal]] = {}
    for (driver, pool), specs in _node_pools(slices, node).items():
        for spec in specs:
            try:
                counters.update(_amounts(driver, pool, spec.get("sharedCounters") or []))
            except QuantityError:
                log.warning("unreadable sharedCounters", extra={"pool": pool})
    return counters


@dataclass
class DeviceUsage:
    """What the allocated claims hold: whole devices (results without shareID) and, per
    shared device, the consumed capacity summed over its shares (unqualified names)."""

    dedicated: set[DeviceKey] = field(default_factory=set)
    consumed: dict[DeviceKey, dict[str, Decimal]] = field(default_factory=dict)


def device_usage(claims: Sequence[Mapping[str, Any]]) -> DeviceUsage:
    usage = DeviceUsage()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            key = (result["driver"], result["pool"], result["device"])
            if not result.get("shareID"):
                usage.dedicated.add(key)
                continue
            totals = usage.consumed.setdefault(key, {})
            for name, quantity in (result.get("consumedCapacity") or {}).items():
                try:
                    amount = parse_quantity(str(quantity))
                except QuantityError:
                    log.warning("unreadable consumedCapacity", extra={"device": key, "name": name})
                    continue
                short = unqualified(name, result["driver"])
                totals[short] = totals.get(short, Decimal(0)) + amount
    return usage


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One `exactly` request of an unallocated claim, with its selectors compiled."""

    claim: int
    name: str
    device_class: str
    matches: DeviceMatcher
    count: int | None
    tolerations: tuple[Mapping[str, Any], ...]
    capacity: Mapping[str, Decimal]


def build_requests(
    claims: Sequence[Mapping[str, Any]], classes: Mapping[str, Mapping[str, Any]]
) -> list[DeviceRequest]:
    """The requests of the claims to allocate; a class that does not exist matches nothing."""
    requests = []
    for index, claim in enumerate(claims):
        where = f"ResourceClaim {claim['metadata'].get('namespace')}/{claim['metadata']['name']}"
        for position, request in enumerate(claim["spec"]["devices"].get("requests") or []):
            path = f"{where} spec.devices.requests[{position}]"
            exactly = request.get("exactly")
            if exactly is None:
                raise InvalidParameterError(
                    f"{path}.firstAvailable", "not supported by the kube-scheduler stand-in"
                )
            class_name = exactly["deviceClassName"]
            device_class = classes.get(class_name)
            if device_class is None:
                matches: DeviceMatcher = lambda driver, device: False  # noqa: E731
            else:
                by_class = selectors_matcher(
                    (device_class.get("spec") or {}).get("selectors") or [],
                    f'DeviceClass "{class_name}" spec.selectors',
                )
                by_request = selectors_matcher(
                    exactly.get("selectors") or [], f"{path}.exactly.selectors"
                )
                matches = _both(by_class, by_request)
            try:
                capacity = {
                    name: parse_quantity(str(quantity))
                    for name, quantity in (
                        (exactly.get("capacity") or {}).get("requests") or {}
                    ).items()
                }
            except QuantityError as error:
                raise InvalidParameterError(f"{path}.exactly.capacity", str(error)) from error
            all_devices = exactly.get("allocationMode") == "All"
            requests.append(
                DeviceRequest(
                    claim=index,
                    name=request["name"],
                    device_class=class_name,
                    matches=matches,
                    count=None if all_devices else int(exactly.get("count") or 1),
                    tolerations=tuple(exactly.get("tolerations") or ()),
                    capacity=capacity,
                )
            )
    return requests


def _both(first: DeviceMatcher, second: DeviceMatcher) -> DeviceMatcher:
    return lambda driver, device: first(driver, device) and second(driver, device)


@dataclass(frozen=True, slots=True)
class _Option:
    """A device that can serve a request, with what one share of it would take."""

    device: PoolDevice
    take: Mapping[str, Decimal] | None
    limits: Mapping[str, Decimal]


@dataclass(frozen=True, slots=True)
class Pick:
    """One device chosen for one request; `consumed` is None for a dedicated device."""

    request: DeviceRequest
    device: PoolDevice
    consumed: Mapping[str, Decimal] | None


def _option(device: PoolDevice, request: DeviceRequest) -> _Option | None:
    capacities = {
        unqualified(k, device.driver): v for k, v in (device.spec.get("capacity") or {}).items()
    }
    wanted = {unqualified(k, device.driver): v for k, v in request.capacity.items()}
    try:
        limits = {name: parse_quantity(str(c["value"])) for name, c in capacities.items()}
        take = take_device(capacities, wanted)
    except QuantityError:
        return None
    if isinstance(take, CapacityRefusal):
        return None
    if not device.shared:
        fits = all(take[name] <= limits[name] for name in wanted)
        return _Option(device, None, limits) if fits else None
    return _Option(device, take, limits)


def plan_allocation(
    requests: Sequence[DeviceRequest],
    devices: Sequence[PoolDevice],
    usage: DeviceUsage,
    counters: Counters | None = None,
) -> list[Pick] | None:
    """Devices for every request, or None: a depth-first search over the requests' device
    slots (distinct devices within a request), backtracking when capacity runs out. A
    whole device that consumes shared counters (a partition) is taken only while its
    pool's `counters` still hold what it consumes beside the allocated devices' and the
    ones chosen before it, so overlapping partitions are never both handed out."""
    slots: list[tuple[DeviceRequest, list[_Option]]] = []
    for request in requests:
        options = []
        for device in devices:
            if device.key in usage.dedicated or (
                not device.shared and device.key in usage.consumed
            ):
                continue
            if not request.matches(device.driver, device.spec):
                continue
            if untolerated_device_taint(device.spec, request.tolerations) is not None:
                continue
            option = _option(device, request)
            if option is not None:
                options.append(option)
        count = len(options) if request.count is None else request.count
        if count == 0:
            return None
        slots.extend((request, options) for _ in range(count))
    used = {key: dict(amounts) for key, amounts in usage.consumed.items()}
    ledger = _CounterLedger(counters or {})
    for device in devices:
        if device.key in usage.dedicated:
            ledger.charge(device.consumes, 1)
    return _search(slots, 0, used, set(), [], ledger)


class _CounterLedger:
    """What the pools' shared counter sets hold, and what the taken devices consume."""

    def __init__(self, available: Counters) -> None:
        self.available = available
        self.consumed: dict[CounterKey, dict[str, Decimal]] = {}

    def fits(self, consumes: Counters) -> bool:
        for key, amounts in consumes.items():
            held = self.available.get(key)
            if held is None:
                return False
            taken = self.consumed.get(key) or {}
            for name, amount in amounts.items():
                if taken.get(name, Decimal(0)) + amount > held.get(name, Decimal(0)):
                    return False
        return True

    def charge(self, consumes: Counters, sign: int) -> None:
        for key, amounts in consumes.items():
            taken = self.consumed.setdefault(key, {})
            for name, amount in amounts.items():
                taken[name] = taken.get(name, Decimal(0)) + sign * amount


def _search(
    slots: Sequence[tuple[DeviceRequest, Sequence[_Option]]],
    index: int,
    used: dict[DeviceKey, dict[str, Decimal]],
    whole: set[DeviceKey],
    chosen: list[Pick],
    ledger: _CounterLedger,
) -> list[Pick] | None:
    if index == len(slots):
        return list(chosen)
    request, options = slots[index]
    for option in options:
        key = option.device.key
        if key in whole or any(p.request is request and p.device.key == key for p in chosen):
            continue
        if option.take is None:
            consumes = option.device.consumes
            if key in used or not ledger.fits(consumes):
                continue
            whole.add(key)
            ledger.charge(consumes, 1)
            chosen.append(Pick(request, option.device, None))
            found = _search(slots, index + 1, used, whole, chosen, ledger)
            chosen.pop()
            ledger.charge(consumes, -1)
            whole.discard(key)
        else:
            before = used.get(key)
            after = dict(before or {})
            for name, amount in option.take.items():
                after[name] = after.get(name, Decimal(0)) + amount
            if any(after[name] > limit for name, limit in option.limits.items() if name in after):
                continue
            used[key] = after
            chosen.append(Pick(request, option.device, option.take))
            found = _search(slots, index + 1, used, whole, chosen, ledger)
            chosen.pop()
            if before is None:
                del used[key]
            else:
                used[key] = before
        if found is not None:
            return found
    return None


def build_allocation(
    claim: Mapping[str, Any],
    picks: Sequence[Pick],
    classes: Mapping[str, Mapping[str, Any]],
    node_name: str,
    now: str,
    new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> dict[str, Any]:
    """status.allocation as kube-scheduler writes it: one result per device (a shareID and
    every capacity for a shared device), class configs then claim configs, the node."""
    results = []
    for pick in picks:
        result: dict[str, Any] = {
            "request": pick.request.name,
            "driver": pick.device.driver,
            "pool": pick.device.pool,
            "device": pick.device.spec["name"],
        }
        if pick.request.tolerations:
            result["tolerations"] = [dict(t) for t in pick.request.tolerations]
        if pick.consumed is not None:
            names = {
                unqualified(k, pick.device.driver): k
                for k in pick.device.spec.get("capacity") or {}
            }
            result["shareID"] = new_share_id()
            result["consumedCapacity"] = {
                names[name]: format_quantity_value(amount) for name, amount in pick.consumed.items()
            }
        results.append(result)
    config: list[dict[str, Any]] = []
    seen: set[str] = set()
    for pick in picks:
        if pick.request.name in seen:
            continue
        seen.add(pick.request.name)
        device_class = classes.get(pick.request.device_class) or {}
        for entry in (device_class.get("spec") or {}).get("config") or []:
            config.append({"source": "FromClass", "requests": [pick.request.name], **entry})
    for entry in claim["spec"]["devices"].get("config") or []:
        config.append({"source": "FromClaim", **entry})
    devices: dict[str, Any] = {"results": results}
    if config:
        devices["config"] = config
    return {
        "devices": devices,
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
        "allocationTimestamp": now,
    }
