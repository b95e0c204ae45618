"""The two ways CDI input can be wrong, both the caller's to fix and never retried."""

from __future__ import annotations

from dra_driver.errors import InvalidParameterError


class InvalidCdiNameError(InvalidParameterError):
    """A claim UID, device name or share id that must not become part of a CDI name or path."""


class InvalidCdiSpecError(InvalidParameterError):
    """A CDI spec that container runtimes would refuse; `field` is its JSON path."""
