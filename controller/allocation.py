"""An engine placement -> each claim's `status.allocation`, as kube-scheduler writes it. Pure.

Per device given to a request: one result with a fresh `shareID` (for a
multi-allocatable device) and `consumedCapacity` for every capacity the device
publishes, each rounded up by the capacity's requestPolicy, so that the sums
kube-scheduler and the kubelet plugin compute agree with the controller's. The
claim's own capacity requests must be ones kube-scheduler would accept on that
device (`dra_driver.objects.capacity_policy`), whatever the engine granted.
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

from api.quantity import MIB, QuantityError, format_quantity
from controller.inventory import Inventory, PublishedDevice
from controller.requests import ClaimVariant, PodVariant, claim_name
from dra_driver.engine.engine import Placement
from dra_driver.objects.capacity_policy import (
    CapacityRefusal,
    requested_capacity,
    take_capacity,
    take_device,
)


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
) -> dict[str, Decimal] | CapacityRefusal:
    """Every capacity of the device as one share takes it, or why its policy refuses.

    The claim's capacity requests are first decided as kube-scheduler decides
    them. Memory and cores are then what the engine granted (it already applied
    the request, the VGPUConfig or HAMi's defaults), rounded by the policy; other
    capacities take what the claim requested, else the policy's default, else all
    of it.
    """
    capacities = device.capacity()
    taken = take_device(capacities, requested)
    if isinstance(taken, CapacityRefusal):
        return taken
    granted = {"memory": Decimal(memory_mib * MIB), "cores": Decimal(cores)}
    for name in sorted(granted.keys() & capacities.keys()):
        amount = take_capacity(name, granted[name], capacities[name], asked="a share of")
        if isinstance(amount, CapacityRefusal):
            return amount
        taken[name] = amount
    return taken


@dataclass(frozen=True, slots=True)
class PlannedResult:
    request: str
    device: PublishedDevice
    consumed: Mapping[str, Decimal] | None


def plan_results(
    variant: PodVariant, placement: Placement, inventory: Inventory
) -> list[list[PlannedResult]] | str:
    """Per claim, its results; or, when a device's requestPolicy refuses, which claim's
    request it refuses and why."""
    per_claim: list[list[PlannedResult]] = []
    position = 0
    for claim_variant in variant.claims:
        results: list[PlannedResult] = []
        for name in claim_variant.result_names:
            grants = placement.containers[placement.init_count + position]
            position += 1
            requested = requested_capacity(claim_variant.claim, name)
            for grant in grants:
                device = inventory.device(placement.node, grant.uuid)
                consumed = None
                if device.spec.get("allowMultipleAllocations"):
                    try:
                        taken = consumed_capacity(device, grant.memory_mib, grant.cores, requested)
                    except QuantityError as error:
                        taken = CapacityRefusal("", "", f"unreadable capacity: {error}")
                    if isinstance(taken, CapacityRefusal):
                        return refusal_note(claim_variant.claim, name, taken)
                    consumed = taken
                results.append(PlannedResult(name, device, consumed))
        per_claim.append(results)
    return per_claim


def refusal_note(claim: Mapping[str, Any], request: str, refusal: CapacityRefusal) -> str:
    """A capacity refusal as the pod's and the claim's events tell it."""
    return f"ResourceClaim {claim_name(claim)} request {request}: {refusal}"


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
    named = [
        *zip(variant.result_names, variant.class_names, strict=True),
        *((request.name, request.class_name) for request in variant.partitions),
    ]
    for name, class_name in named:
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
