"""The checks a container runtime makes when it loads a spec, made before we write one.

A spec the runtime refuses breaks every container of the claim at start, far
from the cause; so the writer refuses it instead. The checks follow the CDI
schema and the Go loader (`pkg/cdi`, `specs-go/version.go`) for the fields
this driver writes; fields it never writes (annotations, hooks, intelRdt,
additionalGids, netDevices, device node types and numbers, mount types) are
refused as unsupported, which keeps the version rule below complete.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cdi.errors import InvalidCdiSpecError
from cdi.naming import CDI_KIND, is_cdi_class, is_cdi_device_name, is_cdi_vendor
from cdi.spec import CdiSpec

KNOWN_CDI_VERSIONS = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
EARLIEST_LOADABLE_CDI_VERSION = "0.3.0"
"""Runtimes load older declared versions as errors: the required version never drops below this."""

_SPEC_FIELDS = frozenset({"cdiVersion", "kind", "devices", "containerEdits"})
_DEVICE_FIELDS = frozenset({"name", "containerEdits"})
_EDITS_FIELDS = frozenset({"env", "deviceNodes", "mounts"})
_DEVICE_NODE_FIELDS = frozenset({"path", "hostPath"})
_MOUNT_FIELDS = frozenset({"hostPath", "containerPath", "options"})


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def _object(value: object, path: str, allowed: frozenset[str], required: tuple[str, ...]) -> Any:
    if not isinstance(value, Mapping):
        raise InvalidCdiSpecError(path, "must be an object")
    for key in value:
        if key not in allowed:
            raise InvalidCdiSpecError(f"{path}.{key}", "unknown or unsupported field")
    for key in required:
        if key not in value:
            raise InvalidCdiSpecError(f"{path}.{key}", "is required")
    return value


def _array(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidCdiSpecError(path, "must be an array")
    return value


def _string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise InvalidCdiSpecError(path, "must be a string")
    if "\0" in value:
        raise InvalidCdiSpecError(path, "must not contain NUL")
    return value


def _absolute_path(value: object, path: str) -> str:
    text = _string(value, path)
    if not text.startswith("/"):
        raise InvalidCdiSpecError(path, f"{text!r} is not an absolute path")
    return text


def _validate_kind(value: object) -> None:
    kind = _string(value, "kind")
    vendor, slash, class_name = kind.partition("/")
    if not slash or not is_cdi_vendor(vendor) or not is_cdi_class(class_name):
        raise InvalidCdiSpecError("kind", f"{kind!r} is not vendor/class")


def _validate_edits(value: object, path: str) -> bool:
    """Checks one containerEdits object; True when it injects something."""
    edits = _object(value, path, _EDITS_FIELDS, ())
    for index, entry in enumerate(_array(edits.get("env", []), f"{path}.env")):
        text = _string(entry, f"{path}.env[{index}]")
        if text.find("=") <= 0:
            raise InvalidCdiSpecError(f"{path}.env[{index}]", f"{text!r} is not NAME=value")
    for index, entry in enumerate(_array(edits.get("deviceNodes", []), f"{path}.deviceNodes")):
        node_path = f"{path}.deviceNodes[{index}]"
        node = _object(entry, node_path, _DEVICE_NODE_FIELDS, ("path",))
        _absolute_path(node["path"], f"{node_path}.path")
        if "hostPath" in node:
            _absolute_path(node["hostPath"], f"{node_path}.hostPath")
    for index, entry in enumerate(_array(edits.get("mounts", []), f"{path}.mounts")):
        mount_path = f"{path}.mounts[{index}]"
        mount = _object(entry, mount_path, _MOUNT_FIELDS, ("hostPath", "containerPath"))
        _absolute_path(mount["hostPath"], f"{mount_path}.hostPath")
        _absolute_path(mount["containerPath"], f"{mount_path}.containerPath")
        for option_index, option in enumerate(
            _array(mount.get("options", []), f"{mount_path}.options")
        ):
            _string(option, f"{mount_path}.options[{option_index}]")
    return any(edits.get(field) for field in _EDITS_FIELDS)


def minimum_cdi_version(document: Mapping[str, Any]) -> str:
    """The lowest cdiVersion a runtime accepts for this (structurally valid) document."""
    required = EARLIEST_LOADABLE_CDI_VERSION
    if "." in document["kind"].partition("/")[2]:
        required = "0.6.0"
    edits = [device["containerEdits"] for device in document["devices"]]
    edits.append(document.get("containerEdits", {}))
    starts_with_digit = any(not device["name"][0].isalpha() for device in document["devices"])
    has_host_path = any(
        node.get("hostPath") for edit in edits for node in edit.get("deviceNodes", [])
    )
    if (starts_with_digit or has_host_path) and _version_key(required) < _version_key("0.5.0"):
        required = "0.5.0"
    return required


def validate_spec_document(document: object) -> None:
    """Raises `InvalidCdiSpecError` naming the first field a runtime would refuse."""
    spec = _object(document, "spec", _SPEC_FIELDS, ("cdiVersion", "kind", "devices"))
    version = _string(spec["cdiVersion"], "cdiVersion")
    if version not in KNOWN_CDI_VERSIONS:
        raise InvalidCdiSpecError("cdiVersion", f"{version!r} is not a CDI version")
    _validate_kind(spec["kind"])
    devices = _array(spec["devices"], "devices")
    if not devices:
        raise InvalidCdiSpecError("devices", "a spec needs at least one device")
    names: set[str] = set()
    for index, entry in enumerate(devices):
        path = f"devices[{index}]"
        device = _object(entry, path, _DEVICE_FIELDS, ("name", "containerEdits"))
        name = _string(device["name"], f"{path}.name")
        if not is_cdi_device_name(name):
            raise InvalidCdiSpecError(f"{path}.name", f"{name!r} is not a CDI device name")
        if name in names:
            raise InvalidCdiSpecError(f"{path}.name", f"{name!r} names two devices")
        names.add(name)
        if not _validate_edits(device["containerEdits"], f"{path}.containerEdits"):
            raise InvalidCdiSpecError(f"{path}.containerEdits", "a device must inject something")
    if "containerEdits" in spec:
        _validate_edits(spec["containerEdits"], "containerEdits")
    required = minimum_cdi_version(spec)
    if _version_key(version) < _version_key(required):
        raise InvalidCdiSpecError("cdiVersion", f"{version} is below {required}, which it needs")


def validate_claim_spec(spec: CdiSpec) -> None:
    """A claim's spec as the writer accepts it: loadable, our kind, every name the claim's."""
    validate_spec_document(spec.to_document())
    if spec.kind != CDI_KIND:
        raise InvalidCdiSpecError("kind", f"{spec.kind!r} is not {CDI_KIND}")
    prefix = f"{spec.claim_uid}-"
    for index, device in enumerate(spec.devices):
        if not device.name.startswith(prefix):
            raise InvalidCdiSpecError(
                f"devices[{index}].name", f"{device.name!r} does not start with {prefix!r}"
            )
