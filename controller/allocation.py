"""An engine placement -> each claim's `status.allocation`, as kube-scheduler writes it. Pure.

Per device given to a request: one result with a fresh `shareID` (for a
multi-allocatable device) and `consumedCapacity` for every capacity the device
publishes, each rounded up by the capacity's requestPolicy, so that the sums
kube-scheduler and the kubelet plugin compute agree with the controller's.
Then the DeviceClass configs (FromClass) and the claim's own (FromClaim), a
nodeSelector naming the node, and `allocationTimestamp`, without which a real
kube-scheduler never binds the pod.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any

from api.quantity import MIB, QuantityError, format_quantity, parse_quantity
from controller.inventory import Inventory, PublishedDevice, capacity_value
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Placement
from dra_driver.objects.node_predicates import round_up_request

CAPACITY_REFUSED = "CapacityRequestPolicyNotFit"
"""Reason for a device whose requestPolicy cannot serve the rounded request."""


def quantity_text(value: Decimal) -> str:
    """Integers in canonical form ("10Gi", "30"); fractions as milli-units."""
    if value == value.to_integral_value():
        return format_quantity(int(value))
    return f"{int((value * 1000).to_integral_value(rounding=ROUND_CEILING))}m"


def consumed_capacity(
    device: PublishedDevice,
    memory_mib: int,
    cores: int,
    requested: Mapping[str, Any],
) -> dict[str, Decimal] | None:
    """Every capacity of the device as one share takes it, or None if a policy refuses.

    Memory and cores are what the engine granted (it already applied the
    request, the VGPUConfig or HAMi's defaults); other capacities take what
    the claim requested, else the policy's default, else all of it.
    """
    taken: dict[str, Decimal] = {}
    for name, entry in device.capacity().items():
        policy = entry.get("requestPolicy")
        if name == "memory":
            wanted: Decimal | None = Decimal(memory_mib * MIB)
        elif name == "cores":
            wanted = Decimal(cores)
        elif name in requested:
            wanted = parse_quantity(str(requested[name]))
        elif policy and policy.get("default") is not None:
            wanted = parse_quantity(str(policy["default"]))
        else:
            wanted = capacity_value(entry)
        rounded = round_up_request(wanted, policy) if wanted is not None else None
        if rounded is None:
            return None
        taken[name] = rounded
    return taken


@dataclass(frozen=True, slots=True)
class PlannedResult:
    request: str
    device: PublishedDevice
    consumed: Mapping[str, Decimal] | None


def plan_results(
    variant: PodVariant, placement: Placement, inventory: Inventory
) -> list[list[PlannedResult]] | str:
    """Per claim, its results; or a reason when a device's requestPolicy refuses."""
    per_claim: list[list[PlannedResult]] = []
    position = 0
    for claim_variant in variant.claims:
        results: list[PlannedResult] = []
        for request_index, name in enumerate(claim_variant.result_names):
            grants = placement.containers[placement.init_count + position]
            position += 1
            requested = _capacity_requests(claim_variant, request_index)
            for grant in grants:
                device = inventory.device(placement.node, grant.uuid)
                consumed = None
                if device.spec.get("allowMultipleAllocations"):
                    try:
                        consumed = consumed_capacity(
                            device, grant.memory_mib, grant.cores, requested
                        )
                    except QuantityError:
                        consumed = None
                    if consumed is None:
                        return CAPACITY_REFUSED
                results.append(PlannedResult(name, device, consumed))
        per_claim.append(results)
    return per_claim


def _capacity_requests(variant: ClaimVariant, index: int) -> Mapping[str, Any]:
    requests = ((variant.claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    if index >= len(requests):
        return {}
    request = requests[index]
    body = request.get("exactly")
    if body is None:
        sub = variant.result_names[index].partition("/")[2]
        body = next((s for s in request.get("firstAvailable") or [] if s.get("name") == sub), {})
    return (body.get("capacity") or {}).get("requests") or {}


def node_selector(node: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
        ]
    }


def build_allocation(
    variant: ClaimVariant,
    results: Sequence[PlannedResult],
    classes: Mapping[str, Mapping[str, Any]],
    node: str,
    now: str,
    new_share_id: Callable[[], str] = lambda: str(uuid.uuid4()),
) -> dict[str, Any]:
    """status.allocation for one claim."""
    written = []
    for planned in results:
        result: dict[str, Any] = {
            "request": planned.request,
            "driver": planned.device.driver,
            "pool": planned.device.pool,
            "device": planned.device.name,
        }
        if planned.consumed is not None:
            result["shareID"] = new_share_id()
            result["consumedCapacity"] = {
                name: quantity_text(amount) for name, amount in planned.consumed.items()
            }
        written.append(result)
    config: list[dict[str, Any]] = []
    for name, class_name in zip(variant.result_names, variant.class_names, strict=True):
        for entry in ((classes.get(class_name) or {}).get("spec") or {}).get("config") or []:
            config.append({"source": "FromClass", "requests": [name], **entry})
    devices = (variant.claim.get("spec") or {}).get("devices") or {}
    for entry in devices.get("config") or []:
        config.append({"source": "FromClaim", **entry})
    allocated: dict[str, Any] = {"results": written}
    if config:
        allocated["config"] = config
    return {
        "devices": allocated,
        "nodeSelector": node_selector(node),
        "allocationTimestamp": now,
    }


def describe_results(allocation: Mapping[str, Any]) -> list[str]:
    """Each result of an allocation as `<pool>/<device>` with its share id, for the log
    line that answers "where is my claim"."""
    described = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        where = f"{result.get('pool')}/{result.get('device')}"
        share = result.get("shareID")
        described.append(f"{where} share {share}" if share else f"{where} (whole device)")
    return described
