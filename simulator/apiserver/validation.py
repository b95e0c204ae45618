"""Object-meta checks the real server applies to every type, with its messages."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from dra_driver.objects.names import DNS_LABEL_RE, DNS_SUBDOMAIN_RE

from .errors import FieldError, duplicate, forbidden, invalid, required

_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    "regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)

NameRule = Callable[[str, str], list[FieldError]]


def dns_subdomain(path: str, value: str, max_length: int = 253) -> list[FieldError]:
    errors = []
    if len(value) > max_length:
        errors.append(invalid(path, value, f"must be no more than {max_length} bytes"))
    if not DNS_SUBDOMAIN_RE.fullmatch(value):
        errors.append(invalid(path, value, SUBDOMAIN_MESSAGE))
    return errors


def dns_label(path: str, value: str) -> list[FieldError]:
    errors = []
    if len(value) > 63:
        errors.append(invalid(path, value, "must be no more than 63 bytes"))
    if not DNS_LABEL_RE.fullmatch(value):
        errors.append(invalid(path, value, LABEL_MESSAGE))
    return errors


def entry_name(
    path: str, name: Any, seen: set[str], duplicate_at: str | None = None
) -> list[FieldError]:
    """The `name` of entry `path` of a list keyed by name: required, a DNS label, unique.

    `seen` collects the names so far; a repeat is reported at `duplicate_at` (the real
    server names `<entry>.name` for most lists, the entry itself for slice devices).
    """
    if not name:
        return [required(f"{path}.name")]
    errors = dns_label(f"{path}.name", name)
    if name in seen:
        errors.append(duplicate(duplicate_at or f"{path}.name", name))
    seen.add(name)
    return errors


def _qualified_name(path: str, key: str) -> list[FieldError]:
    prefix, _, name = key.rpartition("/")
    errors = []
    if prefix:
        errors += dns_subdomain(path, prefix)
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        errors.append(
            invalid(
                path,
                key,
                "name part must consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character",
            )
        )
    return errors


def validate_metadata(
    obj: dict[str, Any], name_rule: NameRule, old: dict[str, Any] | None
) -> list[FieldError]:
    meta = obj.get("metadata") or {}
    errors: list[FieldError] = []
    name = meta.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(invalid("metadata.name", name, "must be a string"))
    else:
        errors += name_rule("metadata.name", name)
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [*errors, invalid("metadata.labels", labels, "must be a map")]
    for key, value in labels.items():
        errors += _qualified_name("metadata.labels", key)
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                invalid(
                    "metadata.labels",
                    value,
                    "a valid label must be an empty string or consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with an "
                    "alphanumeric character",
                )
            )
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(v, str) for v in annotations.values()
    ):
        errors.append(invalid("metadata.annotations", annotations, "must be a map of strings"))
    for index, ref in enumerate(meta.get("ownerReferences") or []):
        path = f"metadata.ownerReferences[{index}]"
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                errors.append(required(f"{path}.{key}"))
    if sum(1 for ref in meta.get("ownerReferences") or [] if ref.get("controller")) > 1:
        errors.append(
            invalid(
                "metadata.ownerReferences",
                None,
                "Only one reference can have Controller set to true",
            )
        )
    if old is not None and old["metadata"].get("deletionTimestamp"):
        before = set(old["metadata"].get("finalizers") or [])
        added = [f for f in meta.get("finalizers") or [] if f not in before]
        if added:
            errors.append(
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {added}",
                )
            )
    return errors
