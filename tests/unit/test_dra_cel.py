"""The shared DRA CEL evaluator: the Kubernetes device environment over cel-python."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.quantity import format_quantity
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_cel import (
    CelCompileError,
    CelDevice,
    CelEvaluationError,
    Quantity,
    Semver,
    cel_device_from_slice,
    compile_selector,
)
from dra_driver.objects.dra_cel_cache import SelectorCache

DRIVER = "gpushare.example.com"
SLICE_DEVICE = {
    "name": "gpu-0",
    "allowMultipleAllocations": True,
    "attributes": {
        "index": {"int": 0},
        "uuid": {"string": "GPU-5B1C"},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        "driverVersion": {"version": "550.54.15"},
        "gpu.nvidia.com/mig": {"bool": False},
    },
    "capacity": {
        "memory": {"value": "80Gi"},
        "cores": {"value": "100"},
        "example.org/bandwidth": {"value": "1500m"},
    },
}


@pytest.fixture(scope="module")
def device() -> CelDevice:
    return cel_device_from_slice(DRIVER, SLICE_DEVICE)


def test_slice_device_names_split_by_domain(device: CelDevice) -> None:
    assert device.driver == DRIVER
    assert device.allow_multiple_allocations is True
    assert device.attributes[DRIVER]["index"] == 0
    assert device.attributes["gpu.nvidia.com"] == {"mig": False}
    assert device.attributes[DRIVER]["driverVersion"] == Semver(550, 54, 15)
    assert device.capacity[DRIVER]["memory"] == Quantity(Decimal(80 << 30))
    assert device.capacity["example.org"]["bandwidth"] == Quantity(Decimal("1.5"))


def test_slice_device_with_a_bad_version_names_the_attribute() -> None:
    bad = {"name": "gpu-1", "attributes": {"driverVersion": {"version": "550.54"}}}
    with pytest.raises(InvalidParameterError, match=r"attributes\['driverVersion'\]\.version"):
        cel_device_from_slice(DRIVER, bad)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        (f"device.driver == '{DRIVER}'", True),
        ("device.driver == 'other.example.com'", False),
        ("device.allowMultipleAllocations", True),
        (f'device.attributes["{DRIVER}"].index == 0', True),
        (f'device.attributes["{DRIVER}"]["uuid"] == "GPU-5B1C"', True),
        ('device.attributes["gpu.nvidia.com"].mig == false', True),
        (f'device.attributes["{DRIVER}"].productName.startsWith("NVIDIA")', True),
        (f'device.attributes["{DRIVER}"].productName.endsWith("80GB")', True),
        (f'device.attributes["{DRIVER}"].productName.contains("A100")', True),
        (f'device.attributes["{DRIVER}"].productName.matches("A[0-9]+-")', True),
        (f'device.attributes["{DRIVER}"].uuid.lowerAscii() == "gpu-5b1c"', True),
        (f'device.attributes["{DRIVER}"].uuid.upperAscii() == "GPU-5B1C"', True),
        (f'device.attributes["{DRIVER}"].driverVersion.major() == 550', True),
        (f'device.attributes["{DRIVER}"].driverVersion.minor() == 54', True),
        (f'device.attributes["{DRIVER}"].driverVersion.patch() == 15', True),
        (f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("550.9.0"))', True),
        (f'device.attributes["{DRIVER}"].driverVersion.isLessThan(semver("550.54.15"))', False),
        (f'device.attributes["{DRIVER}"].driverVersion == semver("550.54.15")', True),
        (f'device.attributes["{DRIVER}"].driverVersion.compareTo(semver("551.0.0")) == -1', True),
        ('semver("v1.2", true) == semver("1.2.0")', True),
        ('isSemver("1.2.3") && !isSemver("1.2")', True),
        (f'device.capacity["{DRIVER}"].memory == quantity("81920Mi")', True),
        (f'device.capacity["{DRIVER}"].memory.isGreaterThan(quantity("10Gi"))', True),
        (f'device.capacity["{DRIVER}"].memory.isLessThan(quantity("80Gi"))', False),
        (f'device.capacity["{DRIVER}"].memory.compareTo(quantity("80Gi")) == 0', True),
        (f'device.capacity["{DRIVER}"].cores.asInteger() == 100', True),
        ('device.capacity["example.org"].bandwidth.asApproximateFloat() == 1.5', True),
        ('device.capacity["example.org"].bandwidth.isInteger()', False),
        ('quantity("-1").sign() == -1 && quantity("0").sign() == 0', True),
        ('quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")', True),
        ('quantity("1Gi").sub(1) == quantity("1073741823")', True),
        ('isQuantity("10Gi") && !isQuantity("ten")', True),
        ('has(device.attributes["nothere.example.com"].x)', False),
        (f'has(device.attributes["{DRIVER}"].index)', True),
        ("[1, 2, 3].exists(n, n == 2)", True),
    ],
)
def test_selector_results(device: CelDevice, expression: str, expected: bool) -> None:
    assert compile_selector(expression).matches(device) is expected


@pytest.mark.parametrize(
    ("expression", "stable"),
    [
        ("device.driver == ", "Syntax error: mismatched input '<EOF>'"),
        ("device.driver == 'a' &&& true", "Syntax error: token recognition error at: '&'"),
        ("device.nosuchfield == 'a'", "<input>:1:7: undefined field 'nosuchfield'"),
        ("gpu.driver == 'a'", "undeclared reference to 'gpu'"),
        ("device.driver.shout() == 'A'", "undeclared reference to 'shout'"),
    ],
)
def test_compile_errors_read_like_the_api_server(expression: str, stable: str) -> None:
    with pytest.raises(CelCompileError) as caught:
        compile_selector(expression)
    assert caught.value.reason.startswith("compilation failed: ERROR: <input>:1:")
    assert stable in caught.value.reason
    assert caught.value.expression == expression


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ('device.attributes["nothere.example.com"].x == 1', "no such member"),
        (f'device.attributes["{DRIVER}"].missing == 1', "no such member"),
        (f'device.attributes["{DRIVER}"].index == "0"', "no matching overload"),
        ('quantity("ten") == quantity("10")', "invalid quantity 'ten'"),
        ('semver("1.2") == semver("1.2.0")', "not a semantic version"),
        ('quantity("1.5").asInteger() == 1', "cannot convert value to integer"),
        (f'device.attributes["{DRIVER}"].index.major() == 0', "no matching overload for 'major'"),
        ("device.driver", "not a bool"),
    ],
)
def test_evaluation_errors_raise_and_never_match(
    device: CelDevice, expression: str, reason: str
) -> None:
    with pytest.raises(CelEvaluationError) as caught:
        compile_selector(expression).matches(device)
    assert reason in caught.value.reason
    assert repr(expression) in str(caught.value)


def test_compilation_is_cached_by_text() -> None:
    assert compile_selector("device.driver == 'x'") is compile_selector("device.driver == 'x'")


def test_selector_cache_memoises_per_device_key(device: CelDevice) -> None:
    cache = SelectorCache(max_entries=2)
    expression = f"device.driver == '{DRIVER}'"
    other = CelDevice("other.example.com", {}, {}, allow_multiple_allocations=False)
    assert cache.matches(expression, ("uid-1", 1, "gpu-0"), device) is True
    # Same key: the memoised result stands even though this device would not match.
    assert cache.matches(expression, ("uid-1", 1, "gpu-0"), other) is True
    assert cache.matches(expression, ("uid-1", 2, "gpu-0"), other) is False
    cache.forget(lambda key: isinstance(key, tuple) and key[1] == 1)
    assert len(cache) == 1
    assert cache.matches(expression, ("uid-1", 1, "gpu-0"), other) is False
    cache.matches(expression, ("uid-2", 1, "gpu-0"), other)
    assert len(cache) == 2


def test_selector_cache_bound_drops_the_least_recent_expressions_oldest_result(
    device: CelDevice,
) -> None:
    cache = SelectorCache(max_entries=2)
    first = f"device.driver == '{DRIVER}'"
    second = f"device.driver != 'other.example.com' && device.driver == '{DRIVER}'"
    other = CelDevice("other.example.com", {}, {}, allow_multiple_allocations=False)
    assert cache.matches(first, "gpu-0", device) is True
    assert cache.matches(second, "gpu-0", device) is True
    assert cache.matches(first, "gpu-0", other) is True  # memoised, and now the most recent
    assert cache.matches(second, "gpu-1", other) is False
    assert len(cache) == 2
    # `second` was used last, so `first` gave up its only result and is evaluated afresh.
    assert cache.matches(first, "gpu-0", other) is False
    assert cache.matches(second, "gpu-1", device) is False


def test_selector_cache_shares_the_callers_key(device: CelDevice) -> None:
    cache = SelectorCache()
    key = ("uid-1", 1, "gpu-0")
    cache.matches(f"device.driver == '{DRIVER}'", key, device)
    cache.matches(f"device.driver == '{DRIVER}'", ("uid-1", 1, "gpu-0"), device)
    cache.forget(lambda held: held is not key)
    assert len(cache) == 1


def test_selector_cache_does_not_cache_errors(device: CelDevice) -> None:
    cache = SelectorCache()
    with pytest.raises(CelEvaluationError):
        cache.matches("device.attributes['x.example.com'].y", "k", device)
    assert len(cache) == 0


_SEMVERS = st.builds(
    Semver,
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 20),
    st.lists(st.sampled_from(["alpha", "beta", "1", "2", "rc"]), max_size=2).map(tuple),
)


@given(_SEMVERS, _SEMVERS)
def test_semver_order_matches_python_ordering_of_cel_results(left: Semver, right: Semver) -> None:
    order = left.compare(right)
    assert order == -right.compare(left)
    assert Semver.parse(str(left)) == left
    expression = f'semver("{left}").compareTo(semver("{right}")) == {order}'
    assert compile_selector(expression).matches(CelDevice("d", {}, {}, False))


@given(st.integers(-(1 << 40), 1 << 40), st.integers(-(1 << 40), 1 << 40))
def test_quantity_comparisons_are_by_value(left: int, right: int) -> None:
    text = format_quantity(left)
    greater = str(left > right).lower()
    expression = (
        f'quantity("{text}").isGreaterThan(quantity("{right}")) == {greater}'
        f' && quantity("{text}") == quantity("{left}")'
    )
    assert compile_selector(expression).matches(CelDevice("d", {}, {}, False))
