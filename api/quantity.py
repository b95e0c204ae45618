"""Kubernetes resource quantities, valued exactly as apimachinery's ParseQuantity values them.

Capacities in ResourceSlices, capacity requests in ResourceClaims and the
`memory` of a VGPUConfig all arrive as quantity strings. The allocator must
agree with kube-apiserver and kube-scheduler on what they mean to the byte, so
values are exact `Decimal`s and never pass through floats.

apimachinery's behaviour is kept, quirks included:
- a value finer than 1n is rounded away from zero to a whole number of nanos
  ("0.9n" is 1n, "1e-10" is 1n);
- a binary-SI value is capped, silently, at 2^63-1 ("8Ei" is 2^63-1);
- a number with no digits ("-", ".", "Ki", "e3") is zero whenever Go's
  int64 fast path handles it, and is rejected otherwise (".e-10", "Pi").
One deliberate difference: Go truncates a decimal exponent to int32 and so
reads "1e4294967296" as 1; here an exponent outside int32 is an error.
"""

from __future__ import annotations

import math
import re
from decimal import MAX_EMAX, MIN_EMIN, ROUND_UP, Context, Decimal, Inexact, localcontext
from functools import lru_cache

MIB = 1 << 20
INT64_MAX = (1 << 63) - 1
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_NANO_SCALE = -9
_NANO = Decimal(1).scaleb(_NANO_SCALE)

_DIGITS = frozenset("0123456789")
_SUFFIX_LETTERS = frozenset("eEinumkKMGTP")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_GO_INT = re.compile(r"[+-]?[0-9]+")


class QuantityError(ValueError):
    """A string is not a Kubernetes quantity, or its value does not fit the use asked of it."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"invalid quantity {text!r}: {reason}")
        self.text = text
        self.reason = reason


@lru_cache(maxsize=8192)
def parse_quantity(text: str) -> Decimal:
    """Return the exact value of a quantity string, or raise QuantityError saying why not.

    Cached per text (a Decimal is immutable; errors are not cached): a cluster's slices,
    claims and shares repeat the same few amounts (`80Gi`, `30`) thousands of times, and
    the controller's usage rebuild, its metrics, CEL and `dra-driver status` read them all.
    """
    if not text:
        raise QuantityError(text, "empty string")
    negative, integer, fraction, has_digits, suffix = _scan(text)
    exponent, binary = _interpret_suffix(text, suffix)
    if not has_digits:
        if _go_fast_path_takes_digitless(exponent, binary):
            return Decimal(0)
        raise QuantityError(text, "the number has no digits")
    digits = (integer or "0") + fraction
    precision = len(text) + 40
    if binary:
        exact = Context(prec=precision, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[Inexact])
        value = exact.multiply(Decimal(f"{digits}E-{len(fraction)}"), Decimal(1 << exponent))
    else:
        value = Decimal(f"{digits}E{exponent - len(fraction)}")
    scale = value.as_tuple().exponent
    if value and isinstance(scale, int) and scale < _NANO_SCALE:
        rounding = Context(prec=precision, Emax=MAX_EMAX, Emin=MIN_EMIN, rounding=ROUND_UP)
        value = value.quantize(_NANO, context=rounding)
    if binary and value > INT64_MAX:
        value = Decimal(INT64_MAX)
    if not value:
        return Decimal(0)
    return value.copy_negate() if negative else value


def _scan(text: str) -> tuple[bool, str, str, bool, str]:
    """Split text as Go's parseQuantityString does: sign, integer, fraction, suffix."""
    end = len(text)
    pos = 0
    negative = False
    if text[0] in "+-":
        negative = text[0] == "-"
        pos = 1
    leading_zeros = pos
    while pos < end and text[pos] == "0":
        pos += 1
    has_digits = pos > leading_zeros
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    integer = text[start:pos]
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    has_digits = has_digits or bool(integer or fraction)
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_LETTERS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(text, f"unexpected character {text[pos]!r} at position {pos}")
    return negative, integer, fraction, has_digits, text[suffix_start:]


def _interpret_suffix(text: str, suffix: str) -> tuple[int, bool]:
    """Return (exponent, is_binary): 10**exponent for decimal suffixes, 2**exponent for binary."""
    if suffix in _DECIMAL_SI:
        return _DECIMAL_SI[suffix], False
    if suffix in _BINARY_SI:
        return _BINARY_SI[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE" and _GO_INT.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if not _INT32_MIN <= exponent <= _INT32_MAX:
            raise QuantityError(text, f"exponent {exponent} is outside the int32 range")
        return exponent, False
    raise QuantityError(
        text,
        f"unknown suffix {suffix!r} (expected n, u, m, k, M, G, T, P, E, Ki..Ei or e<int>)",
    )


def _go_fast_path_takes_digitless(exponent: int, binary: bool) -> bool:
    """Whether Go's int64 fast path (which reads a digitless number as 0) handles this suffix.

    Go uses the fast path when its precision estimate is non-negative and the
    scale is at least nano; only then does a digitless number parse (as 0).
    """
    if binary:
        return 15 - 1 - (exponent * 3 // 10) - 1 >= 0
    return exponent >= -9


def _as_value(quantity: Decimal | str) -> tuple[str, Decimal]:
    if isinstance(quantity, str):
        return quantity, parse_quantity(quantity)
    return str(quantity), quantity


def to_bytes_ceil(quantity: Decimal | str) -> int:
    """Whole bytes, rounded up; negative values and values beyond int64 are errors."""
    text, value = _as_value(quantity)
    if value < 0:
        raise QuantityError(text, "must not be negative")
    if value > INT64_MAX:
        raise QuantityError(text, f"exceeds {INT64_MAX} bytes")
    return math.ceil(value)


def to_mib_ceil(quantity: Decimal | str) -> int:
    """Whole MiB (2^20 bytes), rounded up: the unit of HAMi's memory fields."""
    return -(-to_bytes_ceil(quantity) // MIB)


def format_quantity(value: int) -> str:
    """Canonical text of an integer byte count, as `resource.NewQuantity(value, BinarySI).String()`.

    The largest binary suffix that divides the value exactly ("10Gi"); a value
    that no power of 1024 divides is written plainly ("1536"). Magnitudes
    below 1024 are canonicalised as DecimalSI by apimachinery, which writes
    1000 as "1k". Like NewQuantity, it takes an int64.
    """
    if not -(1 << 63) <= value <= INT64_MAX:
        raise ValueError(f"{value} is outside the int64 range of a Kubernetes quantity")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    if magnitude < 1024:
        return f"{sign}1k" if magnitude == 1000 else f"{sign}{magnitude}"
    power = 0
    while power < len(_BINARY_SUFFIXES) - 1 and magnitude % 1024 == 0:
        magnitude //= 1024
        power += 1
    return f"{sign}{magnitude}{_BINARY_SUFFIXES[power]}"


_DECIMAL_BY_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SI.items()}


def quantity_form(text: str) -> str:
    """The format apimachinery remembers from the suffix: "binary", "decimal" or "exponent"."""
    suffix = _scan(text)[4]
    if suffix in _BINARY_SI:
        return "binary"
    return "decimal" if suffix in _DECIMAL_SI else "exponent"


def format_quantity_value(value: Decimal, form: str = "binary") -> str:
    """The text `Quantity.String()` gives for a value held in that format.

    A binary value that is a whole number of at least 1024 in magnitude takes the
    largest power-of-1024 suffix dividing it; anything else is written as
    mantissa x 10^(3k) with the SI suffix (or `e<k>` for the exponent format),
    the mantissa as small as whole numbers allow ("1500", "1k", "500m").
    """
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    with localcontext() as context:
        context.prec = 80
        magnitude = abs(value)
        if form == "binary" and magnitude >= 1024 and magnitude == magnitude.to_integral_value():
            return f"{sign}{format_quantity(int(magnitude))}"
        mantissa = int(magnitude.scaleb(-_NANO_SCALE).to_integral_value(rounding=ROUND_UP))
    exponent = _NANO_SCALE
    while exponent < 18 and mantissa % 1000 == 0:
        mantissa, exponent = mantissa // 1000, exponent + 3
    if form == "exponent":
        return f"{sign}{mantissa}e{exponent}" if exponent else f"{sign}{mantissa}"
    return f"{sign}{mantissa}{_DECIMAL_BY_EXPONENT[exponent]}"


def canonical_quantity(text: str) -> str:
    """A quantity string as kube-apiserver stores it (`81920Mi` -> `80Gi`, `3000` -> `3k`)."""
    return format_quantity_value(parse_quantity(text), quantity_form(text))
