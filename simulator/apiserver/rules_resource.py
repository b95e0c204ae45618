"""resource.k8s.io/v1 rules every kind shares, and the DeviceClass rules (reference §9).

The resource.k8s.io rules of the emulated kube-apiserver v1.36 live in three files:
this one (decoding checks, canonical quantities, driver names and CEL selectors,
which slices, claims and classes all use; and DeviceClass, which is nothing more),
rules_resource_slices.py (ResourceSlice) and rules_resource_claims.py
(ResourceClaim, ResourceClaimTemplate, claim status). Normalizers run on every write
before validation, as decoding and defaulting do in the real server; validators then
refuse what the real server refuses, with its field paths and messages. CEL
selectors are compiled with dra_cel, the evaluator the allocators use. Pure; it may
call api.quantity, dra_driver.objects and the emulator's errors and validation.
"""

from __future__ import annotations

from typing import Any

from api.quantity import QuantityError, canonical_quantity
from dra_driver.objects.dra_cel import CelCompileError, compile_selector

from .errors import FieldError, invalid, required, undecodable, unparsable_quantity
from .validation import dns_subdomain

_JSON_KINDS = {dict: "object", list: "array", str: "string"}


def driver_name_errors(path: str, value: Any) -> list[FieldError]:
    """A driver name is required and a DNS subdomain of at most 63 characters."""
    if not value:
        return [required(path)]
    return dns_subdomain(path, value, max_length=63)


def canonical(kind: str, value: Any) -> str:
    """A quantity as stored; one that does not parse fails decoding (400), as in Go."""
    try:
        return canonical_quantity(str(value))
    except QuantityError as error:
        raise unparsable_quantity(kind) from error


def canonical_map(kind: str, values: Any) -> Any:
    """Every quantity of a name -> quantity map canonical; a non-map is left to validation."""
    if not isinstance(values, dict):
        return values
    return {name: canonical(kind, quantity) for name, quantity in values.items()}


def shaped(kind: str, path: str, value: Any, expected: type) -> Any:
    """The value if it has the JSON type the Go struct needs; otherwise decoding fails (400)."""
    if value is None:
        return expected()
    if not isinstance(value, expected):
        got = _JSON_KINDS.get(type(value), type(value).__name__)
        raise undecodable(
            kind, "v1", f"{path}: cannot unmarshal {got} into a JSON {_JSON_KINDS[expected]}"
        )
    return value


def selector_errors(selectors: Any, path: str) -> list[FieldError]:
    """Each selector needs a CEL expression that compiles, as the server checks on write."""
    errors: list[FieldError] = []
    for index, selector in enumerate(selectors or []):
        spath = f"{path}[{index}].cel.expression"
        expression = (selector.get("cel") or {}).get("expression")
        if not expression:
            errors.append(required(spath))
            continue
        try:
            compile_selector(str(expression))
        except CelCompileError as error:
            errors.append(invalid(spath, expression, error.reason))
    return errors


def validate_device_class(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = obj.get("spec") or {}
    errors = selector_errors(spec.get("selectors"), "spec.selectors")
    for index, config in enumerate(spec.get("config") or []):
        opaque = config.get("opaque") or {}
        errors += driver_name_errors(f"spec.config[{index}].opaque.driver", opaque.get("driver"))
    return errors
