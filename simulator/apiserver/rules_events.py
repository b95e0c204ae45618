"""Events, core/v1 and events.k8s.io/v1: the validation of pkg/apis/core/validation/events.go.

Both APIs are checked by the same rules on the internal type; events.k8s.io/v1
adds the strict ones (an eventTime, a type of Normal or Warning). Field paths
use each API's own names so the message points at what the client sent.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, invalid, required

NOTE_LENGTH_LIMIT = 1024
REPORTING_INSTANCE_LIMIT = 128
ACTION_LENGTH_LIMIT = 128
REASON_LENGTH_LIMIT = 128
EVENT_TYPES = ("Normal", "Warning")
_UNNAMESPACED_OK = ("", "default")
_SYSTEM_OK = ("default", "kube-system")


def _common(
    event: dict[str, Any],
    regarding: str,
    message: str,
    reporting_controller: str,
    event_time: Any,
) -> list[FieldError]:
    """legacyValidateEvent: the namespace agreement, and for events with an eventTime the
    reporting fields they must carry."""
    namespace = event["metadata"].get("namespace", "")
    reference = event.get(regarding)
    involved = (reference.get("namespace") if isinstance(reference, dict) else "") or ""
    path = f"{regarding}.namespace"
    mismatch = invalid(path, involved, "does not match event.namespace")
    errors: list[FieldError] = []
    if not event_time:
        if (not involved and namespace not in _UNNAMESPACED_OK) or (
            involved and involved != namespace
        ):
            errors.append(mismatch)
        return errors
    if not involved and namespace not in _SYSTEM_OK:
        errors.append(mismatch)
    limits = (
        (reporting_controller, None),
        ("reportingInstance", REPORTING_INSTANCE_LIMIT),
        ("action", ACTION_LENGTH_LIMIT),
        ("reason", REASON_LENGTH_LIMIT),
        (message, NOTE_LENGTH_LIMIT),
    )
    for key, limit in limits:
        value = str(event.get(key) or "")
        if not value and key != message:
            errors.append(required(key))
        elif limit is not None and len(value) > limit:
            errors.append(invalid(key, "", f"can have at most {limit} characters"))
    return errors


def validate_core_event(event: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    return _common(event, "involvedObject", "message", "reportingComponent", event.get("eventTime"))


def validate_event_v1(event: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    event_time = event.get("eventTime")
    errors = _common(event, "regarding", "note", "reportingController", event_time)
    if not event_time:
        errors.append(required("eventTime"))
    if event.get("type") not in EVENT_TYPES:
        errors.append(invalid("type", "", f"has invalid value: {event.get('type') or ''}"))
    return errors
