"""Codec of `hami.io/mutex.lock` = `<RFC3339>,<namespace>,<pod>`: who locked a node to bind.

Owns `NodeLock` and the value format of HAMi's `pkg/util/nodelock`,
including the bare time HAMi also writes and any RFC 3339 offset or
fraction Go's parser accepts. Taking, expiring and releasing the lock is
not here (see `dra_driver/objects/node_lock.py`). Calls `keys` and
`go_compat` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from api.hami_annotations.go_compat import AnnotationDecodeError, utc_seconds
from api.hami_annotations.keys import NODE_LOCK


@dataclass(frozen=True, slots=True)
class NodeLock:
    """Who locked a node for binding, and when; HAMi also writes a bare time (no pod)."""

    locked_at: datetime
    namespace: str = ""
    pod: str = ""

    def __post_init__(self) -> None:
        if self.locked_at.tzinfo is None:
            raise ValueError("locked_at must be timezone-aware")
        if "," in self.namespace or "," in self.pod:
            raise ValueError("namespace and pod must not contain ','")
        if bool(self.namespace) != bool(self.pod):
            raise ValueError("namespace and pod are set together or not at all")


def encode_node_lock(lock: NodeLock) -> str:
    """Go's `time.RFC3339` in UTC (seconds, `Z`), then `,namespace,pod` when a pod holds it."""
    stamp = utc_seconds(lock.locked_at).isoformat() + "Z"
    return f"{stamp},{lock.namespace},{lock.pod}" if lock.pod else stamp


def decode_node_lock(value: str) -> NodeLock:
    """Inverse of `encode_node_lock`, accepting any offset and fraction Go's RFC3339 parse does."""
    if "," not in value:
        return NodeLock(_parse_rfc3339(value))
    parts = value.split(",")
    if len(parts) != 3:
        raise AnnotationDecodeError(NODE_LOCK, f"expected time,namespace,pod; got {value!r}")
    locked_at = _parse_rfc3339(parts[0])
    try:
        return NodeLock(locked_at, parts[1], parts[2])
    except ValueError as error:
        raise AnnotationDecodeError(NODE_LOCK, str(error)) from error


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def _parse_rfc3339(text: str) -> datetime:
    match = _RFC3339.fullmatch(text)
    if not match:
        raise AnnotationDecodeError(NODE_LOCK, f"time {text!r} is not RFC 3339")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    offset = timedelta(0)
    if not zulu:
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1)
    try:
        stamp = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
    except ValueError as error:
        raise AnnotationDecodeError(NODE_LOCK, f"time {text!r}: {error}") from error
    return stamp.astimezone(UTC)
