"""Kubernetes quantities: values pinned to apimachinery's own test table, plus properties."""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.quantity import (
    INT64_MAX,
    MIB,
    QuantityError,
    format_quantity,
    parse_quantity,
    to_bytes_ceil,
    to_mib_ceil,
)

KI = 1024


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Cases from apimachinery's TestQuantityParse, values only.
        ("0", 0),
        ("0Ki", 0),
        ("1", 1),
        ("1Ki", KI),
        ("7Mi", 7 * KI**2),
        ("6Gi", 6 * KI**3),
        ("4Pi", 4 * KI**5),
        ("3Ei", 3 * KI**6),
        ("5n", Fraction(5, 10**9)),
        ("4u", Fraction(4, 10**6)),
        ("3m", Fraction(3, 1000)),
        ("8k", 8000),
        ("7M", 7 * 10**6),
        ("5T", 5 * 10**12),
        ("2P", 2 * 10**15),
        ("1E", 10**18),
        ("12E", 12 * 10**18),
        ("1E-3", Fraction(1, 1000)),
        ("1e3", 1000),
        ("1.3E+6", 1_300_000),
        ("12E6", 12_000_000),
        ("100.035k", 100_035),
        ("0.0005k", Fraction(1, 2)),
        ("0.5e-2", Fraction(5, 1000)),
        ("6.987654321G", 6_987_654_321),
        ("1.01E", 101 * 10**16),
        ("3.001n", Fraction(4, 10**9)),
        ("1.1E-9", Fraction(2, 10**9)),
        ("0.0000000001", Fraction(1, 10**9)),
        ("0.9n", Fraction(1, 10**9)),
        ("0.00000012345", Fraction(124, 10**9)),
        ("9Ei", INT64_MAX),
        ("9223372036854775807Ki", INT64_MAX),
        ("100.035Ki", Fraction(10243584, 100)),
        ("0.5Mi", KI**2 // 2),
        ("0.000000000001Ki", Fraction(2, 10**9)),
        (".001", Fraction(1, 1000)),
        ("1.", 1),
        ("1.G", 10**9),
        # Signs; a negative value is rounded away from zero as well.
        ("-1.5", Fraction(-3, 2)),
        ("+1k", 1000),
        ("-8Ei", -INT64_MAX),
        ("-1e-10", Fraction(-1, 10**9)),
        # Decimal exponents beyond int64 keep their value.
        ("18446744073709551616", 2**64),
        ("1e30", 10**30),
    ],
)
def test_parse_matches_apimachinery(text: str, expected: Fraction | int) -> None:
    assert Fraction(parse_quantity(text)) == expected


@pytest.mark.parametrize("text", ["-", "+", ".", "-.", "Ki", "Ti", "k", "e3", "0e-20"])
def test_digitless_numbers_are_zero_where_go_takes_its_fast_path(text: str) -> None:
    assert parse_quantity(text) == 0


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty string"),
        ("1.1.M", "unexpected character '.' at position 3"),
        ("1+1.0M", "unexpected character '.' at position 3"),
        ("0.1mi", "unknown suffix 'mi'"),
        ("0.1am", "unexpected character 'a' at position 3"),
        ("aoeu", "unexpected character 'a' at position 0"),
        (".5i", "unknown suffix 'i'"),
        ("-3.01e-", "unknown suffix 'e-'"),
        (" 1", "unexpected character ' ' at position 0"),
        ("1 ", "unexpected character ' ' at position 1"),
        ("1K", "unknown suffix 'K'"),
        ("1Ki3", "unknown suffix 'Ki3'"),
        ("--1", "unknown suffix '-1'"),
        ("1e3.5", "unexpected character '.' at position 3"),
        ("1\u0661", "unexpected character"),
        ("Pi", "the number has no digits"),
        (".e-10", "the number has no digits"),
        ("1e2147483648", "exponent 2147483648 is outside the int32 range"),
    ],
)
def test_invalid_quantities_say_what_is_wrong(text: str, reason: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity") as caught:
        parse_quantity(text)
    assert reason in str(caught.value)
    assert caught.value.text == text


def test_huge_exponents_stay_cheap_and_exact() -> None:
    assert parse_quantity("1e2000000000") > INT64_MAX
    assert parse_quantity("1e-2000000000") == Decimal("1E-9")


@pytest.mark.parametrize(
    ("text", "whole_bytes", "mib"),
    [
        ("0", 0, 0),
        ("1", 1, 1),
        ("1.5", 2, 1),
        ("100m", 1, 1),
        ("1Mi", MIB, 1),
        ("1048577", MIB + 1, 2),
        ("10Gi", 10 * KI**3, 10 * KI),
        ("3000M", 3 * 10**9, 2862),
        ("9223372036854775807", INT64_MAX, -(-INT64_MAX // MIB)),
    ],
)
def test_rounding_up_to_bytes_and_mib(text: str, whole_bytes: int, mib: int) -> None:
    assert to_bytes_ceil(text) == whole_bytes
    assert to_bytes_ceil(parse_quantity(text)) == whole_bytes
    assert to_mib_ceil(text) == mib


@pytest.mark.parametrize(
    ("text", "reason"), [("-1", "must not be negative"), ("9.3E", "exceeds"), ("1e19", "exceeds")]
)
def test_byte_counts_must_be_non_negative_and_fit_int64(text: str, reason: str) -> None:
    with pytest.raises(QuantityError, match=reason):
        to_bytes_ceil(text)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        # apimachinery's TestQuantityString / TestNewSet for BinarySI quantities.
        (0, "0"),
        (5, "5"),
        (1000, "1k"),
        (1024, "1Ki"),
        (1025, "1025"),
        (1536, "1536"),
        (6 * KI, "6Ki"),
        (300 * KI**2, "300Mi"),
        (KI**3, "1Gi"),
        (1001 * KI**3, "1001Gi"),
        (KI**4, "1Ti"),
        (10 * KI**3, "10Gi"),
        (INT64_MAX, "9223372036854775807"),
        (-(8 * KI**6), "-8Ei"),
        (-2048, "-2Ki"),
        (-1000, "-1k"),
    ],
)
def test_format_is_apimachinery_canonical_binary_si(value: int, text: str) -> None:
    assert format_quantity(value) == text


@given(st.integers(min_value=-INT64_MAX, max_value=INT64_MAX))
def test_format_then_parse_is_identity(value: int) -> None:
    assert parse_quantity(format_quantity(value)) == value


@pytest.mark.parametrize("value", [INT64_MAX + 1, -(2**63) - 1])
def test_format_takes_int64_like_new_quantity(value: int) -> None:
    with pytest.raises(ValueError, match="int64"):
        format_quantity(value)


_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15}
_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


@st.composite
def _quantities(draw: st.DrawFn) -> tuple[str, Fraction]:
    """A well-formed quantity string and its exact value, computed independently."""
    sign = draw(st.sampled_from(["", "+", "-"]))
    integer = draw(st.text("0123456789", min_size=1, max_size=12))
    fraction = draw(st.one_of(st.none(), st.text("0123456789", max_size=12)))
    kind = draw(st.sampled_from(["decimal", "binary", "exponent"]))
    if kind == "decimal":
        suffix = draw(st.sampled_from(sorted(_DECIMAL_SUFFIXES)))
        scale = Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif kind == "binary":
        suffix = draw(st.sampled_from(sorted(_BINARY_SUFFIXES)))
        scale = Fraction(2) ** _BINARY_SUFFIXES[suffix]
    else:
        exponent = draw(st.integers(min_value=-30, max_value=30))
        suffix = draw(st.sampled_from(["e", "E"])) + (
            f"+{exponent}" if exponent >= 0 else str(exponent)
        )
        scale = Fraction(10) ** exponent
    number = integer if fraction is None else f"{integer}.{fraction}"
    magnitude = Fraction(int(integer + (fraction or "")), 10 ** len(fraction or "")) * scale
    magnitude = Fraction(math.ceil(magnitude * 10**9), 10**9)
    if kind == "binary":
        magnitude = min(magnitude, Fraction(INT64_MAX))
    value = -magnitude if sign == "-" else magnitude
    return f"{sign}{number}{suffix}", value


@given(_quantities())
def test_parse_equals_the_grammar_value_rounded_to_nanos(case: tuple[str, Fraction]) -> None:
    text, value = case
    assert Fraction(parse_quantity(text)) == value


@given(st.text(alphabet="0123456789.+-eEinumkKMGTP ", max_size=8))
def test_parse_either_succeeds_or_raises_quantity_error(text: str) -> None:
    try:
        result = parse_quantity(text)
    except QuantityError as error:
        assert error.text == text
    else:
        assert result.is_finite()
