"""One error hierarchy for the whole driver.

Callers decide what to do by type: an invalid parameter is the user's to fix
(never retried), an allocation failure carries the engine's per-node reasons,
a transient error is retried after a delay.
"""

from __future__ import annotations

from collections.abc import Mapping


class DriverError(Exception):
    """Root of every error the driver raises on purpose."""


class InvalidParameterError(DriverError, ValueError):
    """A user-supplied value is wrong; the message names the field and why."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class AllocationError(DriverError):
    """Nothing fits; `reasons` maps each node to its `k/N Reason` summary."""

    def __init__(self, message: str, reasons: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.reasons: dict[str, str] = dict(reasons or {})


class TransientError(DriverError):
    """Worth retrying after `retry_after` seconds (API hiccup, conflict, timeout)."""

    def __init__(self, message: str, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after
