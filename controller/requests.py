"""A pending pod's unallocated claims -> the engine requests to try, in order. Pure.

`dra_driver.objects.claim_workloads.claim_request` turns one `exactly`-only claim into
engine requests (capacity requests and VGPUConfig). This module adds what a
DRA allocator needs around it:

- `firstAvailable`: every combination of subrequests, first preferred, each
  written as an `exactly` request; results are named `<request>/<subrequest>`.
- CEL selectors of the DeviceClass and the request: evaluated per published
  device through the shared `dra_driver.objects.dra_cel` evaluator (results cached
  per slice generation) and handed to the engine as a uuid filter, so HAMi's
  fit rules, scores and reasons stay the engine's.
- Capacity requests: a device whose requestPolicy refuses them (kube-scheduler's
  rule, `dra_driver.objects.capacity_policy`) is left out of the uuid filter too,
  and a node with no device that can serve them is named with the refusal, so
  nothing kube-scheduler would refuse is allocated, and the user is told why.
- `matchAttribute` constraints: one variant per attribute value, restricted
  to the devices that carry it.
- All claims of one pod become one engine request (one "container" per claim
  request), so they land on one node, as HAMi fits one pod.

An unusable claim raises `InvalidParameterError` naming the claim and field.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from api import hami_annotations as keys
from api.quantity import QuantityError, parse_quantity
from api.vgpu_config import VGPUConfig, VGPUConfigError, parse_vgpu_config
from controller.inventory import DeviceKey, Inventory, PublishedDevice
from controller.partitions import PartitionRequest
from dra_driver.engine.requests import (
    ContainerRequest,
    DeviceRequest,
    PodRequest,
    parse_scoring_weights,
)
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import CapacityRefusal, take_device
from dra_driver.objects.claim_workloads import claim_request, exact_count

MAX_VARIANTS = 64
"""Combinations tried per pod (firstAvailable x matchAttribute); later ones are dropped."""

MAX_DISTINCT_VALUES = 8
"""distinctAttribute over at most this many values (NUMA nodes, types) is searched per value."""

NO_DEVICE = "-"
"""A uuid no device has: a request whose selectors match nothing fits nowhere."""

SelectorMatch = Callable[[str, PublishedDevice], bool]
"""(CEL expression, device) -> bool; raises dra_cel errors for bad expressions."""


@dataclass(frozen=True, slots=True)
class CapacityScreen:
    """Where one request's capacity requests are refused by a device's requestPolicy."""

    refused: frozenset[str]
    """uuids of the devices that refuse (kept out of the request's uuid filter)."""
    nodes: Mapping[str, CapacityRefusal]
    """Each node none of whose devices can serve the request, with a device's refusal."""


SERVED_EVERYWHERE = CapacityScreen(frozenset(), {})


@dataclass(frozen=True, slots=True)
class ClaimVariant:
    """One way to satisfy one claim: engine containers and the result name of each."""

    claim: Mapping[str, Any]
    containers: tuple[ContainerRequest, ...]
    result_names: tuple[str, ...]
    class_names: tuple[str, ...]
    gpu_policy: str | None
    node_policy: str | None
    screens: tuple[CapacityScreen, ...] = ()
    """Per request (as `result_names`), where its capacity requests are refused."""
    partitions: tuple[PartitionRequest, ...] = ()
    """Its requests of a partition class: whole MIG partitions, not engine containers
    (controller/partitions.py); not among `result_names`."""


@dataclass(frozen=True, slots=True)
class PodVariant:
    """One engine request for all of a pod's claims, and which containers are whose."""

    request: PodRequest
    claims: tuple[ClaimVariant, ...]


@dataclass(frozen=True, slots=True)
class RequestContext:
    """What building requests reads besides the claim."""

    driver: str
    device_classes: Mapping[str, str]
    classes: Mapping[str, Mapping[str, Any]]
    inventory: Inventory
    selector_match: SelectorMatch
    vendors: VendorRegistry
    selected: dict[tuple[str, ...], frozenset[str] | None] = field(default_factory=dict)
    """Memo of `_allowed` for this inventory: a decision never re-walks every device."""
    screened: dict[tuple[tuple[str, str], ...], CapacityScreen] = field(default_factory=dict)
    """Memo of `_capacity_screen` for this inventory, by the capacity requests."""
    capacity_kinds: list[tuple[Mapping[str, Mapping[str, Any]], list[tuple[str, str]]]] = field(
        default_factory=list
    )
    """Devices grouped by what they publish as capacity (few groups: one per GPU model
    and setting), each with its (node, uuid)s: a screen checks each policy once."""
    partition_classes: frozenset[str] = frozenset()
    """The DeviceClasses whose requests are MIG partitions, not shares."""
    partition_selected: dict[tuple[Any, ...], frozenset[DeviceKey]] = field(default_factory=dict)
    """Memo of `_partition_allowed` for this inventory, by selectors and capacity."""
    every_uuid: frozenset[str] = field(init=False)
    """The inventory's uuids, gathered once per context (8,000 at 1,000 x 8 nodes)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "every_uuid", self.inventory.uuids())


def claim_name(claim: Mapping[str, Any]) -> str:
    metadata = claim.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')} ({metadata.get('uid', '')})"


def class_vgpu_configs(
    classes: Mapping[str, Mapping[str, Any]], driver: str
) -> dict[str, list[VGPUConfig]]:
    """Each DeviceClass's own VGPUConfig parameters (those addressed to `driver`)."""
    result: dict[str, list[VGPUConfig]] = {}
    for name, device_class in classes.items():
        for position, entry in enumerate((device_class.get("spec") or {}).get("config") or []):
            opaque = entry.get("opaque") or {}
            if opaque.get("driver") != driver:
                continue
            where = f"DeviceClass {name} spec.config[{position}].opaque.parameters"
            try:
                config = parse_vgpu_config(opaque.get("parameters") or {}, where, from_class=True)
            except VGPUConfigError as error:
                raise InvalidParameterError(where, str(error)) from None
            result.setdefault(name, []).append(config)
    return result


def _request_options(request: Mapping[str, Any], where: str) -> list[tuple[str, dict[str, Any]]]:
    """(result name, exactly-shaped body) for each way the request can be met."""
    name = request.get("name") or ""
    if request.get("exactly") is not None:
        return [(name, dict(request["exactly"]))]
    subrequests = request.get("firstAvailable") or []
    if not subrequests:
        raise InvalidParameterError(where, "needs `exactly` or `firstAvailable`")
    return [
        (f"{name}/{sub.get('name', '')}", {k: v for k, v in sub.items() if k != "name"})
        for sub in subrequests
    ]


def _selectors(exactly: Mapping[str, Any], classes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    device_class = classes.get(exactly.get("deviceClassName") or "") or {}
    entries = [
        *((device_class.get("spec") or {}).get("selectors") or []),
        *(exactly.get("selectors") or []),
    ]
    return [(entry.get("cel") or {}).get("expression", "") for entry in entries if entry.get("cel")]


def _allowed(expressions: Sequence[str], context: RequestContext) -> frozenset[str] | None:
    """uuids of devices every expression selects; None when that is every device (or
    there is nothing to check), so the request needs no uuid filter."""
    if not expressions:
        return None
    key = tuple(expressions)
    if key not in context.selected:
        found = context.inventory.uuids_where(
            lambda device: all(context.selector_match(e, device) for e in expressions)
        )
        context.selected[key] = None if found == context.every_uuid else found
    return context.selected[key]


def _capacity_kinds(
    context: RequestContext,
) -> list[tuple[Mapping[str, Mapping[str, Any]], list[tuple[str, str]]]]:
    if not context.capacity_kinds:
        kinds: dict[str, tuple[Mapping[str, Mapping[str, Any]], list[tuple[str, str]]]] = {}
        for where, device in context.inventory.by_node_uuid.items():
            capacities = device.capacity()
            kinds.setdefault(repr(capacities), (capacities, []))[1].append(where)
        context.capacity_kinds.extend(kinds.values())
    return context.capacity_kinds


def _capacity_screen(
    exactly: Mapping[str, Any], context: RequestContext, where: str
) -> CapacityScreen:
    """Which devices kube-scheduler would refuse for the request's capacity requests."""
    requested = (exactly.get("capacity") or {}).get("requests") or {}
    if not requested:
        return SERVED_EVERYWHERE
    key = tuple(sorted((str(name), str(amount)) for name, amount in requested.items()))
    if key in context.screened:
        return context.screened[key]
    for name, amount in key:
        try:
            parse_quantity(amount)
        except QuantityError as error:
            raise InvalidParameterError(f"{where}.capacity.requests.{name}", error.reason) from None
    outcomes = []
    for capacities, members in _capacity_kinds(context):
        try:
            outcome = take_device(capacities, dict(key))
        except QuantityError as error:
            outcome = CapacityRefusal("", "", f"the device's capacity is unreadable: {error}")
        outcomes.append((outcome, members))
    screen = SERVED_EVERYWHERE
    if any(isinstance(outcome, CapacityRefusal) for outcome, _ in outcomes):
        refused: set[str] = set()
        served: set[str] = set()
        first_refusal: dict[str, CapacityRefusal] = {}
        for outcome, members in outcomes:
            for node, uuid in members:
                if isinstance(outcome, CapacityRefusal):
                    refused.add(uuid)
                    first_refusal.setdefault(node, outcome)
                else:
                    served.add(node)
        nodes = {node: why for node, why in first_refusal.items() if node not in served}
        screen = CapacityScreen(frozenset(refused), nodes)
    context.screened[key] = screen
    return screen


def _without(
    allowed: frozenset[str] | None, refused: frozenset[str], context: RequestContext
) -> frozenset[str] | None:
    if not refused:
        return allowed
    return (context.every_uuid if allowed is None else allowed) - refused


def _restrict(request: DeviceRequest, allowed: frozenset[str] | None) -> DeviceRequest:
    """The request limited to `allowed` uuids (and to its own uuid filter, if any)."""
    if allowed is None:
        return request
    wanted = set(request.filters.use_uuids)
    uuids = allowed & wanted if wanted else allowed
    filters = replace(request.filters, use_uuids=tuple(sorted(uuids)) or (NO_DEVICE,))
    return replace(request, filters=filters)


def _claim_variants(
    claim: Mapping[str, Any],
    context: RequestContext,
    class_configs: Mapping[str, Sequence[VGPUConfig]],
) -> Iterator[ClaimVariant]:
    devices = (claim.get("spec") or {}).get("devices") or {}
    requests = devices.get("requests") or []
    where = f"ResourceClaim {claim_name(claim)} spec.devices.requests"
    options = [
        _request_options(request, f"{where}[{position}]")
        for position, request in enumerate(requests)
    ]
    for combination in itertools.islice(itertools.product(*options), MAX_VARIANTS):
        chosen = list(enumerate(zip(requests, combination, strict=True)))
        shares = [
            (position, request, option)
            for position, (request, option) in chosen
            if option[1].get("deviceClassName") not in context.partition_classes
        ]
        partitions = tuple(
            _partition_request(claim, name, exactly, context, f"{where}[{position}]")
            for position, (_, (name, exactly)) in chosen
            if exactly.get("deviceClassName") in context.partition_classes
        )
        _check_constraints(devices.get("constraints") or [], partitions, len(requests), where)
        pod_request = _share_request(claim, devices, shares, context, class_configs)
        screens = tuple(
            _capacity_screen(exactly, context, f"{where}[{position}].exactly")
            for position, _, (_, exactly) in shares
        )
        allowed = [
            _without(
                _allowed(_selectors(exactly, context.classes), context), screen.refused, context
            )
            for (_, _, (_, exactly)), screen in zip(shares, screens, strict=True)
        ]
        names = tuple(name for _, _, (name, _) in shares)
        for restricted in _match_attribute_variants(
            devices.get("constraints") or [], names, allowed, context
        ):
            containers = tuple(
                tuple(_restrict(r, scope) for r in container)
                for container, scope in zip(pod_request.containers, restricted, strict=True)
            )
            yield ClaimVariant(
                claim=claim,
                containers=containers,
                result_names=names,
                class_names=tuple(e.get("deviceClassName", "") for _, _, (_, e) in shares),
                gpu_policy=pod_request.gpu_policy,
                node_policy=pod_request.node_policy,
                screens=screens,
                partitions=partitions,
            )


def _share_request(
    claim: Mapping[str, Any],
    devices: Mapping[str, Any],
    shares: Sequence[tuple[int, Mapping[str, Any], tuple[str, dict[str, Any]]]],
    context: RequestContext,
    class_configs: Mapping[str, Sequence[VGPUConfig]],
) -> PodRequest:
    """The engine request for the claim's share requests (none for a claim whose every
    request is a partition)."""
    metadata = claim.get("metadata") or {}
    if not shares:
        return PodRequest(metadata.get("namespace") or "default", metadata.get("name") or "", ())
    body = {
        **claim,
        "spec": {
            **(claim.get("spec") or {}),
            "devices": {
                **devices,
                "requests": [
                    {"name": (request.get("name") or ""), "exactly": exactly}
                    for _, request, (_, exactly) in shares
                ],
            },
        },
    }
    try:
        pod_request, _ = claim_request(
            body,
            context.vendors,
            driver=context.driver,
            device_classes=context.device_classes,
            class_configs=class_configs,
        )
    except InvalidParameterError as error:
        raise InvalidParameterError(
            f"ResourceClaim {claim_name(claim)} {error.field}", error.reason
        ) from None
    return pod_request


def _check_constraints(
    constraints: Sequence[Mapping[str, Any]],
    partitions: Sequence[PartitionRequest],
    requests: int,
    where: str,
) -> None:
    """matchAttribute and distinctAttribute are not applied to partition requests: a
    constraint that would bind one is refused rather than ignored."""
    if not partitions:
        return
    names = {p.name for p in partitions} | {p.name.split("/")[0] for p in partitions}
    for position, constraint in enumerate(constraints):
        scope = set(constraint.get("requests") or ())
        if (scope & names) or (not scope and requests > 1):
            raise InvalidParameterError(
                f"{where.removesuffix('.requests')}.constraints[{position}]",
                "constraints over requests of a partition class are not supported",
            )


def _partition_request(
    claim: Mapping[str, Any],
    name: str,
    exactly: Mapping[str, Any],
    context: RequestContext,
    where: str,
) -> PartitionRequest:
    """A request of a partition class: its count and the partition devices its class
    and request selectors accept, each with at least the capacity it requests."""
    count = exact_count(exactly, where)
    requested = (exactly.get("capacity") or {}).get("requests") or {}
    amounts = {}
    for capacity, amount in requested.items():
        try:
            amounts[str(capacity).rsplit("/", 1)[-1]] = parse_quantity(str(amount))
        except QuantityError as error:
            raise InvalidParameterError(
                f"{where}.capacity.requests.{capacity}", error.reason
            ) from None
    expressions = _selectors(exactly, context.classes)
    key = (tuple(expressions), tuple(sorted(amounts.items())))
    if key not in context.partition_selected:
        context.partition_selected[key] = frozenset(
            device_key
            for device_key, device in context.inventory.partition_devices.items()
            if _covers(device, amounts)
            and all(context.selector_match(e, device) for e in expressions)
        )
    own = [(e.get("cel") or {}).get("expression", "") for e in exactly.get("selectors") or []]
    asked = [*own, *(f"{c} >= {requested[c]}" for c in sorted(requested))]
    return PartitionRequest(
        claim=claim_name(claim),
        name=name,
        class_name=str(exactly.get("deviceClassName") or ""),
        count=count,
        allowed=context.partition_selected[key],
        asked=" && ".join(asked) or "any partition",
    )


def _covers(device: PublishedDevice, amounts: Mapping[str, Any]) -> bool:
    """Whether a whole device has at least each requested capacity."""
    capacities = device.capacity()
    try:
        return all(
            name in capacities and parse_quantity(str(capacities[name]["value"])) >= amount
            for name, amount in amounts.items()
        )
    except (QuantityError, KeyError):
        return False


def _assignments(
    groups: Sequence[frozenset[str]], members: int, distinct: bool
) -> Iterator[Sequence[frozenset[str]]]:
    """Device groups for the constrained requests: the same group for all (match), or
    different groups for each (distinct); at most MAX_VARIANTS of them."""
    if distinct:
        return itertools.islice(itertools.permutations(groups, members), MAX_VARIANTS)
    return ([group] * members for group in groups)


def _match_attribute_variants(
    constraints: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    allowed: Sequence[frozenset[str] | None],
    context: RequestContext,
) -> Iterator[list[frozenset[str] | None]]:
    """Per matchAttribute constraint, one restriction per attribute value (sorted); per
    distinctAttribute constraint, one per assignment of different values to its requests.
    A request asking for several devices, and an attribute with more than
    MAX_DISTINCT_VALUES values (a uuid), are checked for distinct values after the fit."""
    variants: list[list[frozenset[str] | None]] = [list(allowed)]
    for constraint in constraints:
        attribute = constraint.get("matchAttribute") or constraint.get("distinctAttribute")
        if not attribute:
            continue
        distinct = not constraint.get("matchAttribute")
        scope = set(constraint.get("requests") or ())
        members = [
            i
            for i, name in enumerate(names)
            if not scope or name in scope or name.split("/")[0] in scope
        ]
        ordered = [uuids for _, uuids in sorted(context.inventory.uuid_groups(attribute).items())]
        if distinct and len(ordered) > MAX_DISTINCT_VALUES:
            continue
        expanded = []
        for variant in variants:
            for choice in _assignments(ordered, len(members), distinct):
                narrowed = list(variant)
                for i, group in zip(members, choice, strict=True):
                    current = variant[i]
                    narrowed[i] = group & (current if current is not None else context.every_uuid)
                expanded.append(narrowed)
        variants = expanded[:MAX_VARIANTS] or [[frozenset() for _ in names]]
    yield from variants


def pod_variants(
    pod: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], context: RequestContext
) -> list[PodVariant]:
    """Every combination to try for the pod's unallocated claims, preferred first."""
    class_configs = class_vgpu_configs(context.classes, context.driver)
    per_claim = [list(_claim_variants(claim, context, class_configs)) for claim in claims]
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    weights = parse_scoring_weights(annotations.get(keys.DEVICE_SCORING_WEIGHTS))
    metadata = pod.get("metadata") or {}
    variants = []
    for combination in itertools.islice(itertools.product(*per_claim), MAX_VARIANTS):
        containers = tuple(c for variant in combination for c in variant.containers)
        gpu_policy = next((v.gpu_policy for v in combination if v.gpu_policy), None)
        node_policy = next((v.node_policy for v in combination if v.node_policy), None)
        request = PodRequest(
            namespace=metadata.get("namespace") or "default",
            name=metadata.get("name") or "",
            containers=containers,
            gpu_policy=gpu_policy or annotations.get(keys.GPU_SCHEDULER_POLICY),
            node_policy=node_policy or annotations.get(keys.NODE_SCHEDULER_POLICY),
            weights=weights,
        )
        variants.append(PodVariant(request, tuple(combination)))
    return variants
