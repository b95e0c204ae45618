"""The parts of Go's behaviour the annotation codecs must reproduce, and the error they raise.

HAMi writes its annotations with Go's `encoding/json` and reads them with
`encoding/json` and `strconv`, so a codec that is to be byte-exact needs
Go's integer ranges, ParseInt and ParseBool rules, json.Marshal's escaping
and encoding/json's case-insensitive field matching. Each of those lives
here once, shared by every codec in this package. Owns
`AnnotationDecodeError`; calls only the standard library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


class AnnotationDecodeError(ValueError):
    """An annotation value does not follow HAMi's format; the message names the annotation."""

    def __init__(self, annotation: str, reason: str) -> None:
        super().__init__(f"annotation {annotation}: {reason}")
        self.annotation = annotation
        self.reason = reason


# Inclusive (lowest, highest) of the Go integer types HAMi's structs use.
INT32_BOUNDS = (-(1 << 31), (1 << 31) - 1)
UINT32_BOUNDS = (0, (1 << 32) - 1)
INT64_BOUNDS = (-(1 << 63), (1 << 63) - 1)
UINT64_BOUNDS = (0, (1 << 64) - 1)

_GO_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def check_str(name: str, value: object) -> None:
    """Refuse a record field that Go would hold as a string but is not one."""
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")


def check_int(name: str, value: object, bounds: tuple[int, int]) -> None:
    """Refuse a record field that would not fit the Go integer type HAMi declares for it."""
    if type(value) is not int:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} {value} is outside [{bounds[0]}, {bounds[1]}]")


def utc_seconds(moment: datetime) -> datetime:
    """The naive UTC wall time to the second, which isoformat writes with a 4-digit year."""
    return moment.astimezone(UTC).replace(microsecond=0, tzinfo=None)


def parse_go_int(text: str, bounds: tuple[int, int], annotation: str, what: str) -> int:
    """strconv.ParseInt(text, 10, bits): an optional sign and ASCII digits, nothing else."""
    if not _GO_INT_TEXT.fullmatch(text):
        raise AnnotationDecodeError(annotation, f"{what} {text!r} is not an integer")
    number = int(text)
    if not bounds[0] <= number <= bounds[1]:
        raise AnnotationDecodeError(annotation, f"{what} {text} is out of range")
    return number


def annotation_is_true(value: str | None) -> bool:
    """HAMi's reading of a boolean annotation (e.g. numa-bind): Go's ParseBool says true."""
    return value in _GO_TRUE


def parse_go_bool(text: str, annotation: str, what: str) -> bool:
    """strconv.ParseBool(text), where anything it refuses is a decode error."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise AnnotationDecodeError(annotation, f"{what} {text!r} is not a boolean")


def marshal_go_json(document: object) -> str:
    """json.Marshal's bytes: compact, UTF-8 kept, and `<`, `>`, `&`, U+2028, U+2029 escaped."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def load_json(value: str, annotation: str) -> object:
    """Parse an annotation's JSON, naming the annotation when it is not JSON."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise AnnotationDecodeError(annotation, f"not valid JSON: {error}") from error


def json_object(item: object, annotation: str, where: str) -> dict[str, Any]:
    """`item` as a JSON object, or a decode error saying where one was expected."""
    if not isinstance(item, dict):
        raise AnnotationDecodeError(annotation, f"{where} must be a JSON object")
    return item


def go_struct_fields(
    item: object, names: Mapping[str, str], annotation: str, where: str
) -> dict[str, Any]:
    """An object's members by field name, matched as encoding/json matches them:
    keys case-insensitively; unknown keys and null values ignored."""
    return {
        names[key.lower()]: raw
        for key, raw in json_object(item, annotation, where).items()
        if key.lower() in names and raw is not None
    }


def json_array(item: object, annotation: str, where: str) -> list[Any]:
    """`item` as a JSON array, or a decode error saying where one was expected."""
    if not isinstance(item, list):
        raise AnnotationDecodeError(annotation, f"{where} must be a JSON array")
    return item
