"""API versions served from one store: core/v1 and events.k8s.io/v1 Events.

The real server keeps one internal Event and converts it for each API, so each
API lists the objects written through the other. The emulator stores an object
in the form it was written and converts on the way out; conversion is pure and
a no-op for an object already in the requested form.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Converter = Callable[[dict[str, Any]], dict[str, Any]]

CORE_EVENTS = ("", "v1", "events")
EVENTS_V1 = ("events.k8s.io", "v1", "events")
SHARED_STORES: dict[tuple[str, str, str], tuple[str, str, str]] = {EVENTS_V1: CORE_EVENTS}
"""A resource (key) whose objects live in another resource's store (value)."""

# (core/v1 field, events.k8s.io/v1 field) for the fields that only change name.
_RENAMED = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
)
_CORE_TO_V1 = dict(_RENAMED)
_V1_TO_CORE = {new: old for old, new in _RENAMED}


def _renamed(obj: dict[str, Any], names: dict[str, str], api_version: str) -> dict[str, Any]:
    out = {names.get(key, key): value for key, value in obj.items()}
    out["apiVersion"] = api_version
    return out


def to_events_v1(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("apiVersion") == "events.k8s.io/v1":
        return obj
    out = _renamed(obj, _CORE_TO_V1, "events.k8s.io/v1")
    out.setdefault("eventTime", None)
    if not out.get("deprecatedSource"):
        out.pop("deprecatedSource", None)
    return out


def to_core_v1(obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("apiVersion") == "v1":
        return obj
    return _renamed(obj, _V1_TO_CORE, "v1")


PRESENTERS: dict[tuple[str, str, str], Converter] = {
    EVENTS_V1: to_events_v1,
    CORE_EVENTS: to_core_v1,
}
"""How a resource of a shared store shows any stored object."""
