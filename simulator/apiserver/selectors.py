"""Label and field selectors in the syntax the real server parses.

Selectors are parsed once per request into small matcher objects; matching is
pure and cheap because watch fan-out evaluates it for every event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class SelectorError(ValueError):
    """The selector text does not parse, or names a field the resource cannot select on."""


_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET_TERM = re.compile(r"^(?P<key>[^\s!=<>(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.op
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        value = labels.get(self.key)
        if op in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values


def _split_terms(text: str) -> list[str]:
    terms, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return [t.strip() for t in terms]


def _checked(key: str, values: list[str], text: str) -> tuple[str, list[str]]:
    if not _KEY.match(key):
        raise SelectorError(f"unable to parse requirement: invalid label key {key!r} in {text!r}")
    for value in values:
        if len(value) > 63 or not _VALUE.match(value):
            raise SelectorError(
                f"unable to parse requirement: invalid label value {value!r} in {text!r}"
            )
    return key, values


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    """Equality (`=`, `==`, `!=`) and set-based (`in`, `notin`, `key`, `!key`) terms."""
    if not text.strip():
        return ()
    out = []
    for term in _split_terms(text):
        if not term:
            raise SelectorError(f"unable to parse requirement: empty term in {text!r}")
        if match := _SET_TERM.match(term):
            values = [v.strip() for v in match["values"].split(",") if v.strip()]
            key, values = _checked(match["key"], values, text)
            if not values:
                raise SelectorError(
                    f"for 'in', 'notin' operators, values set can't be empty: {text!r}"
                )
            out.append(Requirement(key, match["op"], frozenset(values)))
            continue
        for op, stored in (("!=", "!="), ("==", "="), ("=", "=")):
            if op in term:
                key, _, value = term.partition(op)
                key, [value] = _checked(key.strip(), [value.strip()], text)
                out.append(Requirement(key, stored, frozenset([value])))
                break
        else:
            if term.startswith("!"):
                key, _ = _checked(term[1:].strip(), [], text)
                out.append(Requirement(key, "!", frozenset()))
            else:
                key, _ = _checked(term, [], text)
                out.append(Requirement(key, "exists", frozenset()))
    return tuple(out)


def labels_match(requirements: tuple[Requirement, ...], obj: Mapping[str, Any]) -> bool:
    if not requirements:
        return True
    labels = obj.get("metadata", {}).get("labels") or {}
    return all(r.matches(labels) for r in requirements)


FieldGetter = Callable[[Mapping[str, Any]], str]


def field_getter(path: str) -> FieldGetter:
    """Reads a dotted path as the string the real server compares (`""` when absent)."""
    parts = path.split(".")

    def get(obj: Mapping[str, Any]) -> str:
        value: Any = obj
        for part in parts:
            if not isinstance(value, Mapping):
                return ""
            value = value.get(part)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


@dataclass(frozen=True, slots=True)
class FieldTerm:
    path: str
    equal: bool
    value: str
    get: FieldGetter


def parse_field_selector(
    text: str, supported: frozenset[str], subject: str = ""
) -> tuple[FieldTerm, ...]:
    """`path=value`, `path==value`, `path!=value` terms over the paths a resource supports;
    `subject` (` for <group/version>, Kind=<kind>`) names the type as the real server does."""
    if not text.strip():
        return ()
    out = []
    for raw in text.split(","):
        term = raw.strip()
        op = next((op for op in ("!=", "==", "=") if op in term), None)
        if op is None:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        path, _, value = term.partition(op)
        equal = op != "!="
        path = path.strip()
        if path not in supported:
            raise SelectorError(f"field label not supported{subject}: {path}")
        out.append(FieldTerm(path, equal, value.strip(), field_getter(path)))
    return tuple(out)


def fields_match(terms: tuple[FieldTerm, ...], obj: Mapping[str, Any]) -> bool:
    return all((t.get(obj) == t.value) == t.equal for t in terms)
