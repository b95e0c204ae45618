"""The canonical text of quantities, as kube-apiserver stores them (apimachinery String())."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from api.quantity import (
    QuantityError,
    canonical_quantity,
    format_quantity_value,
    parse_quantity,
    quantity_form,
)


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("81920Mi", "80Gi"),
        ("10240Mi", "10Gi"),
        ("1.5Gi", "1536Mi"),
        ("0.5Ki", "512"),
        ("1024", "1024"),
        ("3000", "3k"),
        ("1500", "1500"),
        ("0.5", "500m"),
        ("1000m", "1"),
        ("1E", "1E"),
        ("1e3", "1e3"),
        ("1500e0", "1500"),
        ("1.5e-3", "1500e-6"),
        ("-2048Ki", "-2Mi"),
        ("0", "0"),
        ("0Gi", "0"),
        ("100", "100"),
    ],
)
def test_canonical_text(text: str, canonical: str) -> None:
    assert canonical_quantity(text) == canonical


@pytest.mark.parametrize(
    ("text", "form"), [("1Gi", "binary"), ("1E", "decimal"), ("2e3", "exponent"), ("5", "decimal")]
)
def test_the_suffix_decides_the_format(text: str, form: str) -> None:
    assert quantity_form(text) == form


def test_a_non_quantity_is_refused() -> None:
    with pytest.raises(QuantityError):
        canonical_quantity("ten gigs")


def test_a_computed_fraction_is_written_in_milli_units() -> None:
    assert format_quantity_value(Decimal("0.25")) == "250m"
    assert format_quantity_value(Decimal(10 << 30)) == "10Gi"


_SUFFIXES = st.sampled_from(["", "m", "k", "M", "G", "Ki", "Mi", "Gi", "e3", "e-2"])


@given(st.integers(-(10**6), 10**6), st.integers(0, 999), _SUFFIXES)
def test_canonical_text_keeps_the_value_and_is_stable(
    whole: int, fraction: int, suffix: str
) -> None:
    text = f"{whole}.{fraction:03d}{suffix}"
    canonical = canonical_quantity(text)
    assert parse_quantity(canonical) == parse_quantity(text)
    assert canonical_quantity(canonical) == canonical
