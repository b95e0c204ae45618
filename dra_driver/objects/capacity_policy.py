"""kube-scheduler's consumable-capacity rule: what a share takes, and what is refused. Pure.

Every allocator here (the controller, the kube-scheduler stand-in) and the
kubelet plugin's check at prepare must charge and refuse a capacity request
exactly as kube-scheduler does, or a claim one of them places is one the real
scheduler would never have placed. This is that rule, once, as the v1.36
allocator has it (k8s.io/dynamic-resource-allocation v0.36.2,
`structured/internal/incubating/consumable_capacity.go`):

- What one allocation consumes of a capacity: with no request, the policy's
  `default`, else the capacity's whole `value`; a request under no policy is
  taken as it is. `validRange` (with `min`): below `min` takes `min`; without
  `step` the request itself; else `min + ceil((request - min) / step) * step`.
  `validValues`: the smallest valid value >= the request, else the request.
- Refused (the device cannot serve the request): the consumed amount is above
  `validRange.max` or off its step, or is not one of `validValues`; an amount
  equal to `default` never is. A request naming a capacity the device does not
  publish (names compared as written) refuses the device too.

kube-scheduler computes the step arithmetic on `Quantity.Value()`, which rounds
every operand up to a whole number (away from zero), and writes the result as a
whole number; `whole_value` is that projection, so fractional requests and
fractional policies round as they do there. A step of 0 (which crashes the real
API server's validation, so is never stored) refuses. Python's integers do not overflow
where Go's int64 would; values that large never fit a device anyway. Summing
allocations against `value` stays with each allocator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import ROUND_UP, Decimal
from typing import Any

from api.quantity import QuantityError, format_quantity_value, parse_quantity

CAPACITY_REFUSED = "CapacityRequestPolicyNotFit"
"""Reason for a device whose requestPolicy refuses a claim's capacity request."""


@dataclass(frozen=True, slots=True)
class CapacityRefusal:
    """Why a device cannot serve a capacity request, in words a claim's author can act on:
    the capacity, the request as written and the policy (or what the device publishes)."""

    capacity: str
    requested: str
    message: str

    def __str__(self) -> str:
        return self.message


def whole_value(amount: Decimal) -> int:
    """`Quantity.Value()`: the amount rounded up to a whole number, away from zero."""
    return int(amount.to_integral_value(rounding=ROUND_UP))


def _quantity(raw: Any) -> Decimal:
    return raw if isinstance(raw, Decimal) else parse_quantity(str(raw))


def consumed_amount(requested: Decimal | None, capacity: Mapping[str, Any]) -> Decimal:
    """What one allocation takes of `capacity` for `requested` (None: not requested).

    Raises QuantityError when the published capacity is not made of quantities.
    """
    policy = capacity.get("requestPolicy")
    if requested is None:
        if policy and policy.get("default") is not None:
            return _quantity(policy["default"])
        return _quantity(capacity["value"])
    if policy is None:
        return requested
    bounds = policy.get("validRange")
    if bounds is not None and bounds.get("min") is not None:
        minimum = _quantity(bounds["min"])
        if requested < minimum:
            return minimum
        if bounds.get("step") is None:
            return requested
        step, low = whole_value(_quantity(bounds["step"])), whole_value(minimum)
        if step <= 0:
            return requested
        steps = -(-(whole_value(requested) - low) // step)
        return Decimal(low + steps * step)
    if policy.get("validValues") is not None:
        valid = (_quantity(v) for v in policy["validValues"])
        return next((value for value in valid if requested <= value), requested)
    return requested


def violates_policy(consumed: Decimal, policy: Mapping[str, Any] | None) -> bool:
    """Whether an amount `consumed_amount` gave is one the policy refuses."""
    if not policy:
        return False
    if policy.get("default") is not None and consumed == _quantity(policy["default"]):
        return False
    bounds = policy.get("validRange")
    if bounds is not None:
        if bounds.get("max") is not None and consumed > _quantity(bounds["max"]):
            return True
        if bounds.get("step") is not None:
            step = whole_value(_quantity(bounds["step"]))
            low = whole_value(_quantity(bounds.get("min", "0")))
            return step <= 0 or (whole_value(consumed) - low) % step != 0
        return False
    valid = policy.get("validValues") or []
    return bool(valid) and all(consumed != _quantity(v) for v in valid)


def describe_policy(policy: Mapping[str, Any] | None) -> str:
    """A requestPolicy for refusal messages, whole binary amounts in binary units ("1Mi",
    not the "1048576" a publisher may write), so they compare at a glance with the request."""
    if not policy:
        return "(none)"
    parts = []
    if policy.get("validRange") is not None:
        bounds = policy["validRange"]
        fields = ", ".join(
            f"{k}: {_readable(bounds[k])}" for k in ("min", "max", "step") if k in bounds
        )
        parts.append(f"validRange {{{fields}}}")
    if policy.get("validValues") is not None:
        parts.append(f"validValues [{', '.join(map(_readable, policy['validValues']))}]")
    if policy.get("default") is not None:
        parts.append(f"default {_readable(policy['default'])}")
    return "{" + "; ".join(parts) + "}"


def take_capacity(
    name: str, requested: Any, capacity: Mapping[str, Any], *, asked: str = "request"
) -> Decimal | CapacityRefusal:
    """What one allocation takes of the capacity `name`, or why its policy refuses.

    `requested` is the claim's quantity (text or Decimal), None when not requested;
    `asked` says in the refusal what that amount is (a claim's request by default).
    """
    amount = None if requested is None else _quantity(requested)
    consumed = consumed_amount(amount, capacity)
    policy = capacity.get("requestPolicy")
    if not violates_policy(consumed, policy):
        return consumed
    shown = "(none)" if amount is None else _shown(requested)
    rounded = "" if consumed == amount else f" (rounded up to {_shown(consumed)})"
    return CapacityRefusal(
        name,
        shown,
        f"capacity {name}: {asked} {shown}{rounded} is outside its requestPolicy "
        f"{describe_policy(policy)}",
    )


def take_device(
    capacities: Mapping[str, Mapping[str, Any]], requests: Mapping[str, Any]
) -> dict[str, Decimal] | CapacityRefusal:
    """Every capacity of a device as one allocation takes it, or the first refusal.

    Names are compared as written, as kube-scheduler v1.36 does. Raises
    QuantityError for a capacity or request that is not a quantity.
    """
    missing = sorted(set(requests) - set(capacities))
    if missing:
        name, shown = missing[0], _shown(requests[missing[0]])
        published = ", ".join(sorted(capacities)) or "none"
        return CapacityRefusal(
            name,
            shown,
            f"capacity {name}: request {shown} names a capacity the device does not "
            f"publish (it publishes: {published})",
        )
    taken: dict[str, Decimal] = {}
    for name in sorted(capacities):
        result = take_capacity(name, requests.get(name), capacities[name])
        if isinstance(result, CapacityRefusal):
            return result
        taken[name] = result
    return taken


def requested_capacity(claim: Mapping[str, Any], request: str) -> Mapping[str, Any]:
    """The capacity requests of an allocation result's request: the claim's `exactly`
    request `request`, or, for a `main/sub` result, its `firstAvailable` entry `sub`."""
    main, _, sub = request.partition("/")
    for entry in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if entry.get("name") != main:
            continue
        options = (entry.get("firstAvailable") or []) if sub else [entry.get("exactly") or {}]
        for option in options:
            if not sub or option.get("name") == sub:
                return (option.get("capacity") or {}).get("requests") or {}
    return {}


def result_refusal(
    claim: Mapping[str, Any], result: Mapping[str, Any], capacities: Mapping[str, Mapping[str, Any]]
) -> CapacityRefusal | None:
    """Why kube-scheduler's rule refuses an allocation result on its device, if it does:
    the claim's capacity requests behind the result, then each `consumedCapacity` amount
    (an allocator may charge more than was asked, never an amount the policy refuses).

    For a check after the fact (prepare): names may carry the result's driver as domain,
    as newer kube-schedulers accept. A consumed amount for a capacity the device does
    not publish is not a policy question and is left to the caller.
    """
    domain = f"{result.get('driver')}/"
    requested = {
        str(name).removeprefix(domain): amount
        for name, amount in requested_capacity(claim, str(result.get("request") or "")).items()
    }
    try:
        taken = take_device(capacities, requested)
        if isinstance(taken, CapacityRefusal):
            return taken
        for name, amount in (result.get("consumedCapacity") or {}).items():
            short = str(name).removeprefix(domain)
            policy = (capacities.get(short) or {}).get("requestPolicy")
            if short in capacities and violates_policy(_quantity(amount), policy):
                return CapacityRefusal(
                    short,
                    str(amount),
                    f"capacity {short}: consumedCapacity {amount} is outside its requestPolicy "
                    f"{describe_policy(policy)}",
                )
    except QuantityError as error:
        return CapacityRefusal("", "", f"an amount is not a quantity: {error}")
    return None


def _readable(raw: Any) -> str:
    try:
        return _shown(_quantity(raw))
    except QuantityError:
        return str(raw)


def _shown(amount: Any) -> str:
    """A request as the claim wrote it; a computed amount as kube-scheduler prints it."""
    if not isinstance(amount, Decimal):
        return str(amount)
    return format_quantity_value(amount, "binary" if abs(amount) >= 1024 else "decimal")
