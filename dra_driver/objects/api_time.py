"""Timestamps in the forms the API server stores: Time (whole seconds) and MicroTime."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


def api_time(offset_s: float = 0) -> str:
    """Now (plus `offset_s`) as a metav1.Time: RFC 3339, whole seconds, `Z`."""
    return (datetime.now(UTC) + timedelta(seconds=offset_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time() -> str:
    """Now as a metav1.MicroTime: exactly six fractional digits, which Leases require."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def api_seconds(text: str) -> float | None:
    """A metav1.Time or MicroTime as seconds since the epoch; None if it is not one."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None
