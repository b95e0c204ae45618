"""Codec of `hami.io/node-nvidia-register`: the GPUs a device plugin registers on its node.

Owns the registered-device records (Go `DeviceInfo`, `MigProfile`,
`MigTemplate` placements) and both formats HAMi has written: the JSON of
`MarshalNodeDevices`, byte for byte, and the legacy colon list that HAMi's
Hygon and Iluvatar plugins still write. Calls `keys` and `go_compat` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from api.hami_annotations.go_compat import (
    INT32_BOUNDS,
    INT64_BOUNDS,
    UINT32_BOUNDS,
    UINT64_BOUNDS,
    AnnotationDecodeError,
    check_int,
    check_str,
    go_struct_fields,
    json_array,
    load_json,
    marshal_go_json,
    parse_go_bool,
    parse_go_int,
)
from api.hami_annotations.keys import NODE_NVIDIA_REGISTER, DeviceMode


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """Where a MIG profile may start, in memory slices, and how many slices it spans."""

    start: int = 0
    size: int = 0

    def __post_init__(self) -> None:
        check_int("start", self.start, UINT32_BOUNDS)
        check_int("size", self.size, UINT32_BOUNDS)


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile a GPU can host (Go `MigProfile`)."""

    name: str = ""
    memory_mb: int = 0
    core: int = 0
    slice_count: int = 0
    placements: tuple[MigPlacement, ...] = ()

    def __post_init__(self) -> None:
        check_str("name", self.name)
        check_int("memoryMB", self.memory_mb, INT32_BOUNDS)
        check_int("core", self.core, INT32_BOUNDS)
        check_int("sliceCount", self.slice_count, UINT32_BOUNDS)


@dataclass(frozen=True, slots=True)
class RegisteredDevice:
    """One GPU as the device plugin registers it on its node (Go `DeviceInfo`).

    Units: `devmem` MiB already multiplied by deviceMemoryScaling; `devcore`
    percent times deviceCoreScaling (100 for a whole card); `count` the
    number of tasks that may share the card. Every field is `omitempty` in Go,
    so a zero value is absent from the JSON and decodes back to zero; for
    `health` that means an unhealthy card carries no `health` key at all.
    """

    id: str
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    mode: str = ""
    health: bool = False
    mig_profiles: tuple[MigProfile, ...] = ()
    custom_info: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Go's `custominfo`: vendor facts (e.g. Ascend's NetworkID) that some vendors'
    plugins register; read, never written (MarshalNodeDevices leaves it out)."""

    def __post_init__(self) -> None:
        for name in ("id", "type", "mode"):
            check_str(name, getattr(self, name))
        check_int("index", self.index, UINT64_BOUNDS)
        check_int("count", self.count, INT32_BOUNDS)
        check_int("devmem", self.devmem, INT32_BOUNDS)
        check_int("devcore", self.devcore, INT32_BOUNDS)
        check_int("numa", self.numa, INT64_BOUNDS)
        if type(self.health) is not bool:
            raise ValueError("health must be a bool")


def encode_node_devices(devices: Iterable[RegisteredDevice]) -> str:
    """The JSON HAMi's device plugin writes (`MarshalNodeDevices`), byte for byte.

    Keys come in Go's struct order (id, index, count, devmem, devcore, type,
    numa, mode, migProfiles, health), zero values are left out.
    """
    return marshal_go_json([_device_to_go(device) for device in devices])


def _device_to_go(device: RegisteredDevice) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "id": device.id,
        "index": device.index,
        "count": device.count,
        "devmem": device.devmem,
        "devcore": device.devcore,
        "type": device.type,
        "numa": device.numa,
        "mode": device.mode,
        "migProfiles": [
            {
                "name": profile.name,
                "memoryMB": profile.memory_mb,
                "core": profile.core,
                "sliceCount": profile.slice_count,
                "placements": [{"start": p.start, "size": p.size} for p in profile.placements],
            }
            for profile in device.mig_profiles
        ],
        "health": device.health,
    }
    return {key: value for key, value in entry.items() if value}


def decode_node_devices(
    value: str, annotation: str = NODE_NVIDIA_REGISTER
) -> list[RegisteredDevice]:
    """Read a node register annotation in either format HAMi has used.

    A value that starts with `[` or `{` (or is `null`) is JSON; anything
    else is the legacy `UUID,count,mem,core,type,numa,health[,index,mode]:`
    list still written by HAMi's Hygon and Iluvatar plugins.
    """
    stripped = value.strip()
    if stripped.startswith(("[", "{")) or stripped == "null":
        return _decode_node_devices_json(stripped, annotation)
    return _decode_node_devices_legacy(value, annotation)


def decode_node_devices_json(value: str, annotation: str) -> list[RegisteredDevice]:
    """Only the JSON format (Go's `UnMarshalNodeDevices`), for a vendor whose
    scheduler side reads nothing else (AMD, Ascend, Kunlun vXPU, ...)."""
    return _decode_node_devices_json(value.strip(), annotation)


def decode_node_devices_legacy(value: str, annotation: str) -> list[RegisteredDevice]:
    """Only the colon list (Go's `DecodeNodeDevices`), for Hygon and Iluvatar."""
    return _decode_node_devices_legacy(value, annotation)


_DEVICE_FIELDS = {
    "id": "id",
    "index": "index",
    "count": "count",
    "devmem": "devmem",
    "devcore": "devcore",
    "type": "type",
    "numa": "numa",
    "mode": "mode",
    "health": "health",
    "migprofiles": "mig_profiles",
    "custominfo": "custom_info",
}
_MIG_PROFILE_FIELDS = {
    "name": "name",
    "memorymb": "memory_mb",
    "core": "core",
    "slicecount": "slice_count",
    "placements": "placements",
}
_MIG_PLACEMENT_FIELDS = {"start": "start", "size": "size"}


def _decode_node_devices_json(value: str, annotation: str) -> list[RegisteredDevice]:
    document = load_json(value, annotation)
    if document is None:
        return []
    if not isinstance(document, list):
        raise AnnotationDecodeError(annotation, "expected a JSON array of devices")
    devices = []
    for position, item in enumerate(document):
        where = f"device {position}"
        values = {"id": "", **go_struct_fields(item, _DEVICE_FIELDS, annotation, where)}
        custom = values.get("custom_info", {})
        if not isinstance(custom, dict):
            raise AnnotationDecodeError(annotation, f"{where} custominfo must be a JSON object")
        profiles = json_array(values.pop("mig_profiles", []), annotation, f"{where} migProfiles")
        values["mig_profiles"] = tuple(
            _decode_mig_profile(profile, annotation, f"{where} migProfiles[{index}]")
            for index, profile in enumerate(profiles)
        )
        devices.append(_build(RegisteredDevice, values, annotation, where))
    return devices


def _decode_mig_profile(item: object, annotation: str, where: str) -> MigProfile:
    values = go_struct_fields(item, _MIG_PROFILE_FIELDS, annotation, where)
    placements = json_array(values.pop("placements", []), annotation, f"{where} placements")
    values["placements"] = tuple(
        _build(
            MigPlacement,
            go_struct_fields(placement, _MIG_PLACEMENT_FIELDS, annotation, f"{where} placements"),
            annotation,
            f"{where} placements[{index}]",
        )
        for index, placement in enumerate(placements)
    )
    return _build(MigProfile, values, annotation, where)


def _decode_node_devices_legacy(value: str, annotation: str) -> list[RegisteredDevice]:
    """Decode like Go's `DecodeNodeDevices`, with Go's strconv rules for each number."""
    if ":" not in value:
        raise AnnotationDecodeError(annotation, "missing device separator ':'")
    devices: list[RegisteredDevice] = []
    for segment in value.split(":"):
        if not segment:
            continue
        items = segment.split(",")
        if len(items) not in (7, 9):
            raise AnnotationDecodeError(
                annotation, f"device {segment!r} has {len(items)} fields, expected 7 or 9"
            )
        where = f"device {items[0]!r}"
        index = (
            parse_go_int(items[7], INT64_BOUNDS, annotation, f"{where} index")
            if len(items) == 9
            else 0
        )
        if index < 0:
            raise AnnotationDecodeError(annotation, f"{where} index must not be negative")
        values = {
            "id": items[0],
            "count": parse_go_int(items[1], INT32_BOUNDS, annotation, f"{where} count"),
            "devmem": parse_go_int(items[2], INT32_BOUNDS, annotation, f"{where} memory"),
            "devcore": parse_go_int(items[3], INT32_BOUNDS, annotation, f"{where} cores"),
            "type": items[4],
            "numa": parse_go_int(items[5], INT64_BOUNDS, annotation, f"{where} numa"),
            "health": parse_go_bool(items[6], annotation, f"{where} health"),
            "index": index,
            "mode": items[8] if len(items) == 9 else DeviceMode.HAMI_CORE.value,
        }
        devices.append(_build(RegisteredDevice, values, annotation, where))
    return devices


_Record = TypeVar("_Record", RegisteredDevice, MigProfile, MigPlacement)


def _build(cls: type[_Record], values: dict[str, Any], annotation: str, where: str) -> _Record:
    """Construct a record, turning a field that fails its checks into a decode error."""
    try:
        return cls(**values)
    except ValueError as error:
        raise AnnotationDecodeError(annotation, f"{where}: {error}") from error
