"""The common DeviceClass selector shapes, answered in Python without cel-python.

Every DeviceClass this driver installs selects with
`device.driver == '<driver>' && device.attributes['<domain>'].<name> == '<value>'`.
cel-python takes most of a millisecond per device for that, so the first pod of a
class at 1,000 nodes x 8 GPUs waited seconds (results are cached per device version,
dra_cel_cache.SelectorCache, so it was the first pod after each start, and every new class).
This module recognises conjunctions of those two comparisons in an expression's
text and answers them from the device's plain values.

It answers only when the answer is certain and the same as cel-python's:
a comparison whose attribute is absent, or holds anything but a string, is left
undecided, and so is a conjunction with an undecided part and no false part (CEL's
`&&` is false as soon as one side is false, whatever the other side does; otherwise
an error on either side is the result). Undecided means the caller evaluates the
expression with cel-python, errors included. Text the shapes do not cover (other
operators, escapes or quotes inside a literal, a triple-quoted or raw string,
comments) is not recognised at all. Pure; the caller has compiled and checked the
expression before asking.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_WHITESPACE = "\t\n\f\r "
"""CEL's whitespace (the expression compiled, so nothing else stands between tokens)."""
_SPACE = f"[{_WHITESPACE}]*"


def _literal_pattern(group: str) -> str:
    """A one-line string literal without escapes, in single or double quotes."""
    return rf"""(?:'(?P<{group}s>[^'\\\r\n]*)'|"(?P<{group}d>[^"\\\r\n]*)")"""


def _tokens(*patterns: str) -> re.Pattern[str]:
    return re.compile(_SPACE.join(patterns))


_DRIVER = _tokens("device", r"\.", "driver", "==", _literal_pattern("value"))
_ATTRIBUTE = _tokens(
    "device",
    r"\.",
    "attributes",
    r"\[",
    _literal_pattern("domain"),
    r"\]",
    r"\.",
    "(?P<name>[A-Za-z_][A-Za-z0-9_]*)",
    "==",
    _literal_pattern("value"),
)
_RESERVED = frozenset(
    {"false", "in", "null", "true", "as", "break", "const", "continue", "else", "for"}
    | {"function", "if", "import", "let", "loop", "package", "namespace", "return"}
    | {"var", "void", "while"}
)
"""CEL's reserved words: never an attribute name the shapes take."""

ShapeAnswer = Callable[[str, Mapping[str, Mapping[str, Any]]], bool | None]
"""(device driver, attributes by domain -> name) -> the result, or None when undecided."""


@dataclass(frozen=True, slots=True)
class _Comparison:
    """`device.driver == value` (domain None) or `device.attributes[domain].name == value`."""

    domain: str | None
    name: str
    value: str

    def answer(self, driver: str, attributes: Mapping[str, Mapping[str, Any]]) -> bool | None:
        if self.domain is None:
            return driver == self.value
        found = attributes.get(self.domain, {}).get(self.name)
        return found == self.value if isinstance(found, str) else None


def _literal_text(match: re.Match[str], group: str) -> str:
    single = match.group(f"{group}s")
    return single if single is not None else match.group(f"{group}d")


def _comparison(text: str, position: int) -> tuple[_Comparison, int] | None:
    """The comparison that starts at `position`, and where it ends."""
    if match := _DRIVER.match(text, position):
        return _Comparison(None, "driver", _literal_text(match, "value")), match.end()
    match = _ATTRIBUTE.match(text, position)
    if match is None or match.group("name") in _RESERVED:
        return None
    found = _Comparison(
        _literal_text(match, "domain"), match.group("name"), _literal_text(match, "value")
    )
    return found, match.end()


def _after_spaces(text: str, position: int) -> int:
    while position < len(text) and text[position] in _WHITESPACE:
        position += 1
    return position


def _conjunction(expression: str) -> list[_Comparison] | None:
    """The comparisons joined by `&&` that make up the whole text, or None."""
    comparisons = []
    position = _after_spaces(expression, 0)
    while True:
        found = _comparison(expression, position)
        if found is None:
            return None
        comparisons.append(found[0])
        position = _after_spaces(expression, found[1])
        if position == len(expression):
            return comparisons
        if not expression.startswith("&&", position):
            return None
        position = _after_spaces(expression, position + 2)


def shape_answer(expression: str) -> ShapeAnswer | None:
    """An answer for a conjunction of the known comparisons, or None for any other text."""
    comparisons = _conjunction(expression)
    if comparisons is None:
        return None

    def answer(driver: str, attributes: Mapping[str, Mapping[str, Any]]) -> bool | None:
        results = [comparison.answer(driver, attributes) for comparison in comparisons]
        if False in results:
            return False
        return None if None in results else True

    return answer


__all__ = ["ShapeAnswer", "shape_answer"]
