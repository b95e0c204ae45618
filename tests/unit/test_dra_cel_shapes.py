"""The selector shapes answered without cel-python agree with cel-python, or stay out of it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.objects.dra_cel import (
    CelDevice,
    CelEvaluationError,
    Semver,
    compile_selector,
)
from dra_driver.objects.dra_cel_shapes import shape_answer

DRIVERS = ["vgpu.hami.io", "gpu.example.com", ""]
DOMAINS = ["vgpu.hami.io", "gpu.example.com", "other.io"]
NAMES = ["vendor", "type", "numa", "healthy"]
STRINGS = ["NVIDIA", "MLU", "", "a && b", "Ä", "x y"]
SPACES = st.sampled_from(["", " ", "  ", "\n", "\t", "\r\n "])


def _outcome(match, device: CelDevice) -> bool | str:
    """The result, or the kind of failure (both paths must fail alike)."""
    try:
        return match(device)
    except CelEvaluationError:
        return "evaluation error"


attribute_values = st.one_of(
    st.sampled_from(STRINGS),
    st.integers(-2, 2),
    st.booleans(),
    st.just(Semver(1, 2, 3)),
)
devices = st.builds(
    CelDevice,
    driver=st.sampled_from(DRIVERS),
    attributes=st.dictionaries(
        st.sampled_from(DOMAINS),
        st.dictionaries(st.sampled_from(NAMES), attribute_values, max_size=3),
        max_size=3,
    ),
    capacity=st.just({}),
    allow_multiple_allocations=st.booleans(),
)


@st.composite
def literals(draw: st.DrawFn, values: list[str]) -> str:
    value = draw(st.sampled_from(values))
    quote = draw(st.sampled_from(["'", '"']))
    return f"{quote}{value}{quote}"


@st.composite
def comparisons(draw: st.DrawFn) -> str:
    space = draw(SPACES)
    if draw(st.booleans()):
        return f"device{space}.driver{space}=={draw(SPACES)}{draw(literals(DRIVERS))}"
    domain = draw(literals(DOMAINS))
    name = draw(st.sampled_from(NAMES))
    return (
        f"device.attributes[{space}{domain}{space}]{space}.{name}"
        f"{draw(SPACES)}=={space}{draw(literals(STRINGS))}"
    )


@st.composite
def conjunctions(draw: st.DrawFn) -> str:
    parts = draw(st.lists(comparisons(), min_size=1, max_size=3))
    joined = "".join(
        (f"{draw(SPACES)}&&{draw(SPACES)}" if index else "") + part
        for index, part in enumerate(parts)
    )
    return f"{draw(SPACES)}{joined}{draw(SPACES)}"


@given(conjunctions(), devices)
def test_a_recognised_conjunction_agrees_with_cel_python(expression: str, device: CelDevice):
    selector = compile_selector(expression)
    assert selector.shape is not None, expression
    assert _outcome(selector.matches, device) == _outcome(selector.cel_matches, device)


@given(conjunctions(), devices)
def test_the_shape_answers_only_what_cel_python_answers_the_same(
    expression: str, device: CelDevice
):
    answer = shape_answer(expression)
    assert answer is not None
    known = answer(device.driver, device.attributes)
    if known is not None:
        assert compile_selector(expression).cel_matches(device) is known


def test_a_literal_holding_the_operator_is_one_comparison():
    answer = shape_answer("device.driver == 'a && device.driver == b'")
    assert answer is not None
    assert answer("a && device.driver == b", {}) is True
    assert answer("a", {}) is False


def test_the_installed_device_classes_take_the_shape():
    expression = (
        "device.driver == 'vgpu.hami.io' &&\n device.attributes['vgpu.hami.io'].vendor == 'NVIDIA'"
    )
    answer = shape_answer(expression)
    assert answer is not None
    assert answer("vgpu.hami.io", {"vgpu.hami.io": {"vendor": "NVIDIA"}}) is True
    assert answer("vgpu.hami.io", {"vgpu.hami.io": {"vendor": "MLU"}}) is False
    assert answer("other", {}) is False


@pytest.mark.parametrize(
    "device",
    [
        CelDevice("vgpu.hami.io", {}, {}, True),
        CelDevice("vgpu.hami.io", {"vgpu.hami.io": {"vendor": 3}}, {}, True),
        CelDevice("vgpu.hami.io", {"vgpu.hami.io": {"type": "x"}}, {}, True),
    ],
)
def test_an_attribute_that_is_absent_or_no_string_is_left_to_cel_python(device: CelDevice):
    expression = "device.attributes['vgpu.hami.io'].vendor == 'NVIDIA'"
    answer = shape_answer(expression)
    assert answer is not None
    assert answer(device.driver, device.attributes) is None
    selector = compile_selector(expression)
    assert _outcome(selector.matches, device) == _outcome(selector.cel_matches, device)


@pytest.mark.parametrize(
    "expression",
    [
        "device.driver != 'vgpu.hami.io'",
        "(device.driver == 'vgpu.hami.io')",
        "device.driver == 'a' || device.driver == 'b'",
        "device.driver == 'a\\'b'",
        "device.driver == '''a'''",
        "device.driver == r'a'",
        "device.driver == 'a' // a comment",
        "'a' == device.driver",
        "device.attributes['vgpu.hami.io'].vendor == 1",
        "device.attributes['vgpu.hami.io'].vendor.startsWith('N')",
        "device.capacity['vgpu.hami.io'].memory == quantity('1Gi')",
    ],
)
def test_other_text_is_not_recognised_and_still_evaluates(expression: str):
    assert shape_answer(expression) is None
    selector = compile_selector(expression)
    assert selector.shape is None
    device = CelDevice("a", {"vgpu.hami.io": {"vendor": "NVIDIA"}}, {}, True)
    assert _outcome(selector.matches, device) == _outcome(selector.cel_matches, device)
