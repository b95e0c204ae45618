"""Kubernetes name and UID shapes, defined once for every component.

Values that end up in paths, file names or URLs (claim UIDs, namespaces,
names, container names) are checked against these before use.
"""

from __future__ import annotations

import re

DNS_LABEL_MAX = 63
DNS_SUBDOMAIN_MAX = 253
UUID_PATTERN = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
"""A lowercase UUID in 8-4-4-4-12 form, as the API server writes `metadata.uid`."""

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_RE = re.compile(_LABEL)
"""The label's shape alone; `is_dns_label` also checks its length."""
DNS_SUBDOMAIN_RE = re.compile(rf"{_LABEL}(\.{_LABEL})*")
UUID_RE = re.compile(UUID_PATTERN)


def is_dns_label(value: object) -> bool:
    """RFC 1123 label: namespaces, container names, device names."""
    return (
        isinstance(value, str)
        and len(value) <= DNS_LABEL_MAX
        and bool(DNS_LABEL_RE.fullmatch(value))
    )


def is_dns_subdomain(value: object) -> bool:
    """RFC 1123 subdomain: most object names."""
    return (
        isinstance(value, str)
        and len(value) <= DNS_SUBDOMAIN_MAX
        and bool(DNS_SUBDOMAIN_RE.fullmatch(value))
    )


def is_uuid(value: object) -> bool:
    return isinstance(value, str) and bool(UUID_RE.fullmatch(value))
