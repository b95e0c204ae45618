"""kube-scheduler's consumable-capacity rule (v1.36): rounding, defaults and refusals.

The table cases are kube-scheduler's own (k8s.io/dynamic-resource-allocation v0.36.2,
`consumable_capacity_test.go`); the properties restate the API's documented rule
(validRange: min + ceil((r - min) / step) * step, above max refused; validValues: the
next value, above the last refused) independently of the code under test.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.quantity import MIB, parse_quantity
from dra_driver.objects.capacity_policy import (
    CapacityRefusal,
    consumed_amount,
    take_capacity,
    take_device,
    violates_policy,
)


def taken(requested: str | None, capacity: dict[str, Any]) -> Decimal | None:
    result = take_capacity("c", requested, capacity)
    return None if isinstance(result, CapacityRefusal) else result


def ranged(value: str, default: str, **bounds: str) -> dict[str, Any]:
    return {"value": value, "requestPolicy": {"default": default, "validRange": bounds}}


def valued(value: str, default: str, *valid: str) -> dict[str, Any]:
    return {"value": value, "requestPolicy": {"default": default, "validValues": list(valid)}}


@pytest.mark.parametrize(
    ("requested", "capacity", "expected"),
    [
        (None, {"value": "1", "requestPolicy": {}}, "1"),
        (None, ranged("2", "1", min="1"), "1"),
        (None, valued("2", "1", "1"), "1"),
        ("2", ranged("2", "1", min="1"), "2"),
        ("1", ranged("2", "1", min="2"), "2"),
        ("2", ranged("3", "1", min="1", step="2"), "3"),
        ("2", ranged("2", "1", min="1", step="1"), "2"),
        ("2", valued("3", "1", "1", "2", "3"), "2"),
        ("2", valued("3", "1", "1", "3"), "3"),
    ],
    ids=[
        "empty",
        "min in range",
        "default in set",
        "more than min in range",
        "less than min in range",
        "with step (round up)",
        "with step (no remaining)",
        "valid value in set",
        "set (round up)",
    ],
)
def test_kube_schedulers_own_cases(
    requested: str | None, capacity: dict[str, Any], expected: str
) -> None:
    assert consumed_amount(
        None if requested is None else parse_quantity(requested), capacity
    ) == parse_quantity(expected)


@pytest.mark.parametrize(
    ("consumed", "policy", "refused"),
    [
        ("1", None, False),
        ("1", {"default": "1", "validRange": {"min": "1", "max": "2"}}, False),
        ("2", {"default": "1", "validRange": {"min": "1", "max": "1"}}, True),
        ("1", {"default": "1", "validValues": ["1"]}, False),
        ("2", {"default": "1", "validValues": ["1"]}, True),
    ],
    ids=["no constraint", "less than maximum", "more than maximum", "in set", "not in set"],
)
def test_kube_schedulers_own_violations(
    consumed: str, policy: dict[str, Any] | None, refused: bool
) -> None:
    assert violates_policy(parse_quantity(consumed), policy) is refused


CORES = ranged("100", "0", min="0", max="100", step="1")


@pytest.mark.parametrize(
    ("requested", "capacity", "expected"),
    [
        ("101", CORES, None),
        ("100", CORES, "100"),
        ("0", CORES, "0"),
        (None, CORES, "0"),
        ("99500m", CORES, "100"),
        ("100500m", CORES, None),
        ("1537Ki", ranged("80Gi", "80Gi", min="1Mi", max="80Gi", step="1Mi"), "2Mi"),
        ("0", ranged("80Gi", "80Gi", min="1Mi", max="80Gi", step="1Mi"), "1Mi"),
        ("81Gi", ranged("80Gi", "80Gi", min="1Mi", max="80Gi", step="1Mi"), None),
        ("30Gi", valued("96Gi", "96Gi", "24Gi", "48Gi", "96Gi"), "48Gi"),
        ("97Gi", valued("96Gi", "96Gi", "24Gi", "48Gi", "96Gi"), None),
        (None, {"value": "10Gi"}, "10Gi"),
        ("12Gi", {"value": "10Gi"}, "12Gi"),
        ("1500m", ranged("4", "0", min="0"), "1500m"),
        ("1500m", ranged("4", "0", min="0", step="1"), "2"),
        ("1200m", ranged("2", "500m", min="500m", max="2", step="500m"), "2"),
        ("500m", ranged("2", "500m", min="500m", max="2", step="500m"), "1"),
        ("2", valued("4", "4", "1", "4"), "4"),
    ],
)
def test_requests_round_and_refuse_as_kube_scheduler(
    requested: str | None, capacity: dict[str, Any], expected: str | None
) -> None:
    """The last fractional cases follow kube-scheduler's whole-number step arithmetic
    (Quantity.Value() rounds 1.2 up to 2 and min 500m up to 1), not exact decimals."""
    assert taken(requested, capacity) == (None if expected is None else parse_quantity(expected))


def test_a_refusal_names_the_capacity_the_request_and_the_policy() -> None:
    refusal = take_capacity("cores", "101", CORES)

    assert isinstance(refusal, CapacityRefusal)
    assert (refusal.capacity, refusal.requested) == ("cores", "101")
    assert str(refusal) == (
        "capacity cores: request 101 is outside its requestPolicy "
        "{validRange {min: 0, max: 100, step: 1}; default 0}"
    )
    rounded = take_capacity("memory", "97Gi", valued("96Gi", "96Gi", "24Gi", "96Gi"))
    assert str(rounded) == (
        "capacity memory: request 97Gi is outside its requestPolicy "
        "{validValues [24Gi, 96Gi]; default 96Gi}"
    )
    assert "request 100500m (rounded up to 101) is outside" in str(
        take_capacity("cores", "100500m", CORES)
    )


def test_a_request_for_a_capacity_the_device_lacks_refuses_the_device() -> None:
    refusal = take_device({"cores": CORES}, {"cores": "1", "bandwidth": "1"})

    assert isinstance(refusal, CapacityRefusal) and refusal.capacity == "bandwidth"
    assert "does not publish (it publishes: cores)" in str(refusal)


def test_every_capacity_is_taken_requested_or_not() -> None:
    capacities = {
        "cores": CORES,
        "memory": ranged("80Gi", "80Gi", min="1Mi", max="80Gi", step="1Mi"),
        "bandwidth": {"value": "100"},
    }

    assert take_device(capacities, {"cores": "30"}) == {
        "bandwidth": Decimal(100),
        "cores": Decimal(30),
        "memory": Decimal(80 << 30),
    }


def _first_step_at_or_above(requested: int, minimum: int, step: int) -> int:
    value = minimum
    while value < requested:
        value += step
    return value


@given(
    requested=st.integers(0, 10_000),
    minimum=st.integers(0, 500),
    step=st.integers(1, 300),
    steps_to_max=st.none() | st.integers(0, 60),
)
def test_a_range_takes_the_first_step_at_or_above_the_request(
    requested: int, minimum: int, step: int, steps_to_max: int | None
) -> None:
    bounds = {"min": str(minimum), "step": str(step)}
    maximum = None if steps_to_max is None else minimum + steps_to_max * step
    if maximum is not None:
        bounds["max"] = str(maximum)
    capacity = ranged(str(maximum or 20_000), str(minimum), **bounds)

    expected = _first_step_at_or_above(requested, minimum, step)
    refused = maximum is not None and expected > maximum
    assert taken(str(requested), capacity) == (None if refused else Decimal(expected))


@given(
    mebibytes=st.integers(0, 4096),
    extra_kibibytes=st.integers(0, 1023),
    card_gibibytes=st.integers(1, 4),
)
def test_binary_quantities_round_up_to_the_mebibyte_step(
    mebibytes: int, extra_kibibytes: int, card_gibibytes: int
) -> None:
    card = f"{card_gibibytes}Gi"
    memory = ranged(card, card, min="1Mi", max=card, step="1Mi")
    requested = f"{mebibytes * 1024 + extra_kibibytes}Ki"

    wanted = mebibytes * MIB + extra_kibibytes * 1024
    expected = max(1, -(-wanted // MIB)) * MIB
    refused = expected > card_gibibytes << 30
    assert taken(requested, memory) == (None if refused else Decimal(expected))


@given(
    valid=st.lists(st.integers(0, 1000), min_size=1, max_size=10, unique=True).map(sorted),
    requested=st.integers(0, 1100),
)
def test_valid_values_take_the_next_value_and_refuse_above_the_last(
    valid: list[int], requested: int
) -> None:
    capacity = valued(str(valid[-1]), str(valid[0]), *map(str, valid))

    above = [v for v in valid if v >= requested]
    assert taken(str(requested), capacity) == (Decimal(above[0]) if above else None)


@given(
    whole=st.integers(0, 200),
    thousandths=st.integers(1, 999),
    minimum=st.integers(0, 50),
    step=st.integers(1, 20),
)
def test_a_fractional_request_rounds_as_its_whole_number_above(
    whole: int, thousandths: int, minimum: int, step: int
) -> None:
    """kube-scheduler reads the request with Quantity.Value(): 7.001 steps as 8 does."""
    capacity = ranged("1000", str(minimum), min=str(minimum), step=str(step), max="1000")
    fractional = f"{whole * 1000 + thousandths}m"

    if whole + 1 > minimum:
        assert taken(fractional, capacity) == taken(str(whole + 1), capacity)
    else:
        assert taken(fractional, capacity) == Decimal(minimum)


@given(
    default=st.integers(0, 100),
    value=st.integers(100, 200),
    policy_kind=st.sampled_from(["range", "values", "none"]),
)
def test_an_unrequested_capacity_takes_the_default_else_everything(
    default: int, value: int, policy_kind: str
) -> None:
    if policy_kind == "range":
        capacity = ranged(str(value), str(default), min="0", max=str(value), step="1")
    elif policy_kind == "values":
        capacity = valued(str(value), str(default), str(default), str(value))
    else:
        capacity = {"value": str(value)}

    expected = value if policy_kind == "none" else default
    assert taken(None, capacity) == Decimal(expected)
