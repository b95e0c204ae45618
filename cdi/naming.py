"""Every name the driver gives CDI: kind, device names, qualified ids and file names.

Names are derived from the claim UID, so two claims never share a CDI name
(runtimes cache specs by name), and the UID is checked to be a lowercase UUID
before it goes into any name or path: a UID is the only outside input that
ends up in a file name under the CDI directory.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NewType

from cdi.errors import InvalidCdiNameError
from dra_driver.objects.names import UUID_PATTERN, is_dns_label, is_uuid

CDI_VENDOR = "k8s.vgpu.hami.io"
"""`k8s.<driver>`, the per-claim convention of dra-example-driver and the NVIDIA/HAMi drivers."""

CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"

DEFAULT_CDI_DIR = Path("/var/run/cdi")
"""The dynamic spec directory, which wins over the static `/etc/cdi` on conflicts."""

SPEC_FILE_EXTENSION = ".json"
TEMP_FILE_SUFFIX = ".tmp"
"""Runtimes load only `*.json` and `*.yaml`, so a half-written temp file is never parsed."""

ClaimUID = NewType("ClaimUID", str)

_UUID = UUID_PATTERN
_SPEC_FILE_PREFIX = f"{CDI_VENDOR}-{CDI_CLASS}_"
_SPEC_FILE_PATTERN = re.compile(
    re.escape(_SPEC_FILE_PREFIX) + f"({_UUID})" + re.escape(SPEC_FILE_EXTENSION)
)
_TEMP_FILE_PATTERN = re.compile(
    r"\."
    + re.escape(_SPEC_FILE_PREFIX)
    + _UUID
    + re.escape(SPEC_FILE_EXTENSION)
    + r"\.[0-9a-f]+"
    + re.escape(TEMP_FILE_SUFFIX)
)

# The CDI grammar (container-device-interface pkg/parser): ASCII only.
_CDI_DEVICE_NAME_PATTERN = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_CDI_VENDOR_OR_CLASS_PATTERN = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
MAX_CDI_VENDOR_LENGTH = 253
MAX_CDI_CLASS_LENGTH = 63


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def validate_claim_uid(value: object) -> ClaimUID:
    """The UID as Kubernetes writes it (lowercase 8-4-4-4-12), or `InvalidCdiNameError`."""
    if not is_uuid(value):
        raise InvalidCdiNameError("claimUID", f"{_shown(value)} is not a lowercase UUID")
    return ClaimUID(value)


def validate_device_name(value: object) -> str:
    """A ResourceSlice device name: a DNS label, so it never holds `_`, `.` or `/`."""
    if not is_dns_label(value):
        raise InvalidCdiNameError("device", f"{_shown(value)} is not a DNS label")
    return value


def validate_share_id(value: object) -> str:
    """An allocation result's shareID, which Kubernetes requires to be a lowercase UUID."""
    if not is_uuid(value):
        raise InvalidCdiNameError("shareID", f"{_shown(value)} is not a lowercase UUID")
    return value


def cdi_device_name(claim_uid: str, device: str, share_id: str | None = None) -> str:
    """`<claimUID>-<device>`, or `<claimUID>-<device>-<shareID>` for one of several shares."""
    parts = [validate_claim_uid(claim_uid), validate_device_name(device)]
    if share_id is not None:
        parts.append(validate_share_id(share_id))
    return "-".join(parts)


def qualified_device_id(device_name: str) -> str:
    """`vendor/class=name`, what kubelet hands the runtime in `CDIDevices`."""
    if not is_cdi_device_name(device_name):
        raise InvalidCdiNameError("device", f"{_shown(device_name)} is not a CDI device name")
    return f"{CDI_KIND}={device_name}"


def spec_file_name(claim_uid: str) -> str:
    """`GenerateTransientSpecName(vendor, class, uid)` plus `.json`."""
    return f"{_SPEC_FILE_PREFIX}{validate_claim_uid(claim_uid)}{SPEC_FILE_EXTENSION}"


def temp_file_prefix(claim_uid: str) -> str:
    """Hidden, and followed by a random part and `TEMP_FILE_SUFFIX` by the writer."""
    return f".{spec_file_name(claim_uid)}."


def claim_uid_of_spec_file(file_name: str) -> ClaimUID | None:
    """The claim whose spec this file is, or None for any file the driver did not name."""
    match = _SPEC_FILE_PATTERN.fullmatch(file_name)
    return ClaimUID(match.group(1)) if match else None


def is_temp_file_name(file_name: str) -> bool:
    """A temp file of this driver's writer; other programs' files never match."""
    return _TEMP_FILE_PATTERN.fullmatch(file_name) is not None


def is_cdi_device_name(value: object) -> bool:
    return isinstance(value, str) and _CDI_DEVICE_NAME_PATTERN.fullmatch(value) is not None


def is_cdi_vendor(value: str) -> bool:
    return (
        len(value) <= MAX_CDI_VENDOR_LENGTH
        and _CDI_VENDOR_OR_CLASS_PATTERN.fullmatch(value) is not None
    )


def is_cdi_class(value: str) -> bool:
    return (
        len(value) <= MAX_CDI_CLASS_LENGTH
        and _CDI_VENDOR_OR_CLASS_PATTERN.fullmatch(value) is not None
    )
