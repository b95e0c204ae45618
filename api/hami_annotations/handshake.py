"""Codec of `hami.io/node-handshake` = `<Phase>_<YYYY-MM-DD hh:mm:ss>`.

HAMi's scheduler writes `Requesting_` and the time whenever it reads a
node's devices; a node whose request has aged past the timeout with no GPU
allocatable is treated as having lost its device plugin. Owns the phases
and the value format in both time layouts HAMi has used; that verdict is
`controller/legacy/inventory.py`'s. Calls `keys` and `go_compat` only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

from api.hami_annotations.go_compat import AnnotationDecodeError, utc_seconds
from api.hami_annotations.keys import NODE_HANDSHAKE


class HandshakePhase(StrEnum):
    """Who wrote the handshake last: the scheduler asks, the device plugin answers.

    HAMi's NVIDIA plugin stopped answering with `Reported_` (PR #1499) and
    current HAMi deletes the annotation instead of writing `Deleted_`; both
    are still read, since older components write them.
    """

    REQUESTING = "Requesting"
    REPORTED = "Reported"
    DELETED = "Deleted"


@dataclass(frozen=True, slots=True)
class Handshake:
    """A handshake value; `at` is aware."""

    phase: HandshakePhase
    at: datetime

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise ValueError("at must be timezone-aware")


_HANDSHAKE_TIME = re.compile(r"(\d{4})([-.])(\d{2})\2(\d{2}) (\d{1,2}):(\d{2}):(\d{2})", re.ASCII)


def encode_handshake(handshake: Handshake) -> str:
    """`<Phase>_` and Go's `time.DateTime` layout, written in UTC.

    HAMi writes and reads this time in its process's local zone; its images
    set none, so that zone is UTC, and UTC is what is written and assumed here.
    """
    return f"{handshake.phase}_{utc_seconds(handshake.at).isoformat(sep=' ')}"


def decode_handshake(value: str) -> Handshake:
    """Inverse of `encode_handshake`; also reads the `2006.01.02 15:04:05` layout of
    HAMi releases before time.DateTime was used."""
    phase_text, separator, stamp = value.partition("_")
    if not separator:
        raise AnnotationDecodeError(NODE_HANDSHAKE, f"{value!r} has no '_' after the phase")
    try:
        phase = HandshakePhase(phase_text)
    except ValueError as error:
        known = ", ".join(p.value for p in HandshakePhase)
        raise AnnotationDecodeError(
            NODE_HANDSHAKE, f"unknown phase {phase_text!r} (expected {known})"
        ) from error
    match = _HANDSHAKE_TIME.fullmatch(stamp)
    if not match:
        raise AnnotationDecodeError(NODE_HANDSHAKE, f"time {stamp!r} is not YYYY-MM-DD hh:mm:ss")
    year, _, month, day, hour, minute, second = match.groups()
    try:
        at = datetime(
            int(year), int(month), int(day), int(hour), int(minute), int(second), tzinfo=UTC
        )
    except ValueError as error:
        raise AnnotationDecodeError(NODE_HANDSHAKE, f"time {stamp!r}: {error}") from error
    return Handshake(phase, at)
