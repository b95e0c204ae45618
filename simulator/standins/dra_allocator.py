"""The structured-parameters allocator of the kube-scheduler stand-in, pure.

Owns what the scheduler-allocated mode decides: which devices of a node's
ResourceSlices serve an unallocated claim's requests, and the `status.allocation`
kube-scheduler would write for them. Devices come from complete, newest-generation
pools on the node; they match by DeviceClass and request selectors (CEL, via
dra_cel, as kube-scheduler evaluates them); a device with a NoSchedule/NoExecute
taint the request does not tolerate is never chosen; consumable capacity is rounded
up, or refused, by each capacity's requestPolicy (capacity_policy, the rule the
controller uses too) and summed over every allocated claim.

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


@dataclass(frozen=True, slots=True)
class PoolDevice:
    """One device of a usable pool, as the slice publishes it."""

    driver: str
    pool: str
    spec: Mapping[str, Any]

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


def node_pool_devices(
    slices: Sequence[Mapping[str, Any]], node: dict[str, Any]
) -> list[PoolDevice]:
    """The devices the node can use: per pool, only the newest generation, only if complete."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        if _slice_on_node(spec, node):
            pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    devices: list[PoolDevice] = []
    for (driver, pool), specs in pools.items():
        newest = max(int(s["pool"]["generation"]) for s in specs)
        current = [s for s in specs if int(s["pool"]["generation"]) == newest]
        if len(current) != int(current[0]["pool"]["resourceSliceCount"]):
            continue
        for spec in current:
            devices.extend(PoolDevice(driver, pool, d) for d in spec.get("devices") or [])
    return devices


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
    requests: Sequence[DeviceRequest], devices: Sequence[PoolDevice], usage: DeviceUsage
) -> list[Pick] | None:
    """Devices for every request, or None: a depth-first search over the requests' device
    slots (distinct devices within a request), backtracking when capacity runs out."""
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
    return _search(slots, 0, used, set(), [])


def _search(
    slots: Sequence[tuple[DeviceRequest, Sequence[_Option]]],
    index: int,
    used: dict[DeviceKey, dict[str, Decimal]],
    whole: set[DeviceKey],
    chosen: list[Pick],
) -> list[Pick] | None:
    if index == len(slots):
        return list(chosen)
    request, options = slots[index]
    for option in options:
        key = option.device.key
        if key in whole or any(p.request is request and p.device.key == key for p in chosen):
            continue
        if option.take is None:
            if key in used:
                continue
            whole.add(key)
            chosen.append(Pick(request, option.device, None))
            found = _search(slots, index + 1, used, whole, chosen)
            chosen.pop()
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
            found = _search(slots, index + 1, used, whole, chosen)
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
