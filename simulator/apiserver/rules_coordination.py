"""coordination.k8s.io/v1 Leases: the rules leader election meets on a real server (§9).

A Lease can only be replaced conditionally (a PUT must carry the resourceVersion
it read), its times are MicroTime (exactly six fractional digits, or the body
does not decode: 400), its duration must be positive and its transition count
not negative.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime
from typing import Any

from .errors import FieldError, invalid, undecodable

MICRO_TIME_LAYOUT = "2006-01-02T15:04:05.000000Z07:00"
_SECONDS = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}")
_FRACTION_AND_ZONE = re.compile(r"\.[0-9]{6}(?:Z|[+-][0-9]{2}:[0-9]{2})")
LEASE_TIMES = ("acquireTime", "renewTime")


def _micro_time(value: str) -> str:
    """The stored form (UTC, six digits) of a MicroTime, or a 400 worded as Go's time.Parse."""
    seconds = _SECONDS.match(value)
    rest = value[seconds.end() :] if seconds else value
    element = ".000000" if seconds else "2006"
    if seconds is None or not _FRACTION_AND_ZONE.fullmatch(rest):
        raise undecodable(
            "Lease",
            "v1",
            f'parsing time "{value}" as "{MICRO_TIME_LAYOUT}": '
            f'cannot parse "{rest}" as "{element}"',
        )
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def normalize_lease(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    spec = obj.get("spec")
    if not isinstance(spec, dict) or not any(spec.get(k) is not None for k in LEASE_TIMES):
        return
    spec = obj["spec"] = copy.deepcopy(spec)
    for key in LEASE_TIMES:
        if spec.get(key) is not None:
            spec[key] = _micro_time(str(spec[key]))


def validate_lease(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    errors: list[FieldError] = []
    if old is not None and not obj["metadata"].get("resourceVersion"):
        errors.append(invalid("metadata.resourceVersion", 0, "must be specified for an update"))
    spec = obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if duration is not None and (not isinstance(duration, int) or duration <= 0):
        errors.append(invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if transitions is not None and (not isinstance(transitions, int) or transitions < 0):
        errors.append(
            invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
        )
    return errors
