"""Hand-written exposition text parses back, with prometheus_client's parser, to what went in."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from libvgpu.exposition import format_value, gauge_header, label_set, sample

NAMES = ("zone", "namespace", "pod")


def parse(text: str):
    (family,) = text_string_to_metric_families(text)
    return family


@given(
    values=st.tuples(st.text(), st.text(), st.text()),
    value=st.one_of(st.integers(0, 2**64 - 1), st.floats(allow_nan=False)),
    documentation=st.text(
        st.characters(blacklist_categories=("Cs", "Cc")) | st.sampled_from("\n\\")
    ).map(str.strip),
)
def test_any_label_values_and_help_round_trip(values, value, documentation):
    """Help texts are the driver's own constants, so outer whitespace (which the parser
    strips) and control characters are left out of them."""
    text = gauge_header("hami_x_bytes", documentation) + sample(
        "hami_x_bytes", label_set(NAMES, values), value
    )

    family = parse(text)

    (parsed,) = family.samples
    assert family.type == "gauge"
    assert family.documentation == documentation
    assert parsed.labels == dict(zip(NAMES, values, strict=True))
    # Integers are written exactly (beyond 2**53 too) and the parser reads them back exactly.
    assert parsed.value == value


def test_integers_are_written_exactly():
    assert format_value(2**64 - 1) == "18446744073709551615"
    assert format_value(0) == "0"


@pytest.mark.parametrize(
    ("value", "text"), [(math.inf, "+Inf"), (-math.inf, "-Inf"), (math.nan, "NaN"), (0.5, "0.5")]
)
def test_special_floats_use_prometheus_spelling(value, text):
    assert format_value(value) == text


def test_label_count_mismatch_is_refused():
    with pytest.raises(ValueError, match="3 label names but 2 values"):
        label_set(NAMES, ("a", "b"))


def test_no_labels_is_an_empty_set():
    assert sample("up", label_set((), ()), 1) == "up{} 1\n"
