"""API errors shaped as the real server's `Status` objects.

Clients branch on `code` and `reason` (and read `details.causes` for Invalid),
so every refusal the emulator makes goes through one exception type that
renders exactly that shape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

REASONS: dict[int, str] = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}

CAUSE_REASONS: dict[str, str] = {
    "Required value": "FieldValueRequired",
    "Invalid value": "FieldValueInvalid",
    "Forbidden": "FieldValueForbidden",
    "Too many": "FieldValueTooMany",
    "Too long": "FieldValueTooLong",
    "Duplicate value": "FieldValueDuplicate",
    "Unsupported value": "FieldValueNotSupported",
}


@dataclass(frozen=True, slots=True)
class FieldError:
    """One field-level validation failure, printed like k8s.io/apimachinery's field.Error."""

    kind: str
    path: str
    detail: str = ""
    value: Any = None
    show_value: bool = False

    def body(self) -> str:
        text = self.kind
        if self.show_value:
            text += f": {json.dumps(self.value)}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def __str__(self) -> str:
        return f"{self.path}: {self.body()}"

    def cause(self) -> dict[str, str]:
        return {"reason": CAUSE_REASONS[self.kind], "message": self.body(), "field": self.path}


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("Required value", path, detail)


def invalid(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid value", path, detail, value, show_value=True)


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("Forbidden", path, detail)


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError("Too many", path, f"must have at most {limit} items", count, show_value=True)


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("Duplicate value", path, "", value, show_value=True)


def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    allowed = ", ".join(json.dumps(s) for s in supported)
    return FieldError(
        "Unsupported value", path, f"supported values: {allowed}", value, show_value=True
    )


class ApiError(Exception):
    """A refusal rendered as a `Status` object with the matching HTTP code."""

    def __init__(
        self,
        code: int,
        message: str,
        *,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or REASONS.get(code, "Unknown")
        self.details = details
        self.retry_after = retry_after
        self.warnings: list[str] = []
        """`Warning` headers of the refused request (admission policies' Warn actions)."""

    def status(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


@dataclass(frozen=True, slots=True)
class Target:
    """What an error is about: used for `details` and the qualified name in messages."""

    group: str
    plural: str
    kind: str
    name: str = ""

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind

    def details(self, kind: str) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": kind}
        if self.group:
            out["group"] = self.group
        return out


def not_found(target: Target) -> ApiError:
    return ApiError(
        404,
        f'{target.qualified} "{target.name}" not found',
        details=target.details(target.plural),
    )


def already_exists(target: Target) -> ApiError:
    return ApiError(
        409,
        f'{target.qualified} "{target.name}" already exists',
        reason="AlreadyExists",
        details=target.details(target.plural),
    )


def conflict(target: Target, why: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {target.qualified} "{target.name}": {why}',
        details=target.details(target.plural),
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def invalid_object(target: Target, errors: list[FieldError]) -> ApiError:
    text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details = target.details(target.kind)
    details["causes"] = [e.cause() for e in errors]
    return ApiError(
        422, f'{target.qualified_kind} "{target.name}" is invalid: {text}', details=details
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, message)


QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


def undecodable(kind: str, version: str, reason: str) -> ApiError:
    """The body does not decode into the type (a field of the wrong form): 400, not 422."""
    return ApiError(400, f'{kind} in version "{version}" cannot be handled as a {kind}: {reason}')


def unparsable_quantity(kind: str, version: str = "v1") -> ApiError:
    return undecodable(
        kind, version, f"quantities must match the regular expression '{QUANTITY_PATTERN}'"
    )


def gone(message: str) -> ApiError:
    return ApiError(410, message)


def method_not_allowed(method: str) -> ApiError:
    return ApiError(
        405, f"the server does not allow this method on the requested resource ({method})"
    )
