"""HAMi's annotation protocol: the keys, and codecs byte-exact with HAMi's Go code.

HAMi's scheduler, device plugin and monitor coordinate through node and pod
annotations. A component that shares a cluster with them, or stands in for
one of them, must read and write the same bytes, so every codec here follows
HAMi (`pkg/device/devices.go`, `pkg/util/nodelock`, the NVIDIA register and
handshake code) and says where it is deliberately stricter. Pure functions.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import StrEnum
from typing import Any, TypeVar

# Node annotations.
NODE_NVIDIA_REGISTER = "hami.io/node-nvidia-register"
NODE_HANDSHAKE = "hami.io/node-handshake"
NODE_NVIDIA_SCORE = "hami.io/node-nvidia-score"
NODE_LOCK = "hami.io/mutex.lock"
DEVICE_CORDON = "hami.io/device-cordon"

# Pod annotations written by the scheduler extender and the device plugin.
VGPU_DEVICES_TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
VGPU_DEVICES_ALLOCATED = "hami.io/vgpu-devices-allocated"
VGPU_MIG_ALLOCATIONS = "hami.io/vgpu-mig-allocations"
VGPU_NODE = "hami.io/vgpu-node"
VGPU_TIME = "hami.io/vgpu-time"
BIND_PHASE = "hami.io/bind-phase"
BIND_TIME = "hami.io/bind-time"

# Pod annotations a user sets to steer placement.
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
DEVICE_SCORING_WEIGHTS = "hami.io/device-scoring-weights"
USE_GPU_TYPE = "nvidia.com/use-gputype"
NO_USE_GPU_TYPE = "nvidia.com/nouse-gputype"
USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NO_USE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
NUMA_BIND = "nvidia.com/numa-bind"
VGPU_MODE = "nvidia.com/vgpu-mode"

# Labels.
WEBHOOK_LABEL = "hami.io/webhook"
WEBHOOK_LABEL_IGNORE = "ignore"
SCHEDULER_ROLE_LABEL = "hami.io/scheduler-role"

# The device type HAMi's NVIDIA backend writes into pod device lists.
NVIDIA_DEVICE_TYPE = "NVIDIA"


class BindPhase(StrEnum):
    """Values of `hami.io/bind-phase`."""

    ALLOCATING = "allocating"
    SUCCESS = "success"
    FAILED = "failed"


class DeviceMode(StrEnum):
    """Values of a registered device's `mode`."""

    HAMI_CORE = "hami-core"
    MIG = "mig"
    MPS = "mps"


class AnnotationDecodeError(ValueError):
    """An annotation value does not follow HAMi's format; the message names the annotation."""

    def __init__(self, annotation: str, reason: str) -> None:
        super().__init__(f"annotation {annotation}: {reason}")
        self.annotation = annotation
        self.reason = reason


_INT32 = (-(1 << 31), (1 << 31) - 1)
_UINT32 = (0, (1 << 32) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)


def _check_str(name: str, value: object) -> None:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a string, got {type(value).__name__}")


def _check_int(name: str, value: object, bounds: tuple[int, int]) -> None:
    if type(value) is not int:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}")
    if not bounds[0] <= value <= bounds[1]:
        raise ValueError(f"{name} {value} is outside [{bounds[0]}, {bounds[1]}]")


# ---------------------------------------------------------------------------
# Node register: hami.io/node-nvidia-register


@dataclass(frozen=True, slots=True)
class MigPlacement:
    """Where a MIG profile may start, in memory slices, and how many slices it spans."""

    start: int = 0
    size: int = 0

    def __post_init__(self) -> None:
        _check_int("start", self.start, _UINT32)
        _check_int("size", self.size, _UINT32)


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A MIG profile a GPU can host (Go `MigProfile`)."""

    name: str = ""
    memory_mb: int = 0
    core: int = 0
    slice_count: int = 0
    placements: tuple[MigPlacement, ...] = ()

    def __post_init__(self) -> None:
        _check_str("name", self.name)
        _check_int("memoryMB", self.memory_mb, _INT32)
        _check_int("core", self.core, _INT32)
        _check_int("sliceCount", self.slice_count, _UINT32)


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

    def __post_init__(self) -> None:
        for name in ("id", "type", "mode"):
            _check_str(name, getattr(self, name))
        _check_int("index", self.index, _UINT64)
        _check_int("count", self.count, _INT32)
        _check_int("devmem", self.devmem, _INT32)
        _check_int("devcore", self.devcore, _INT32)
        _check_int("numa", self.numa, _INT64)
        if type(self.health) is not bool:
            raise ValueError("health must be a bool")


def encode_node_devices(devices: Iterable[RegisteredDevice]) -> str:
    """The JSON HAMi's device plugin writes (`MarshalNodeDevices`), byte for byte.

    Keys come in Go's struct order (id, index, count, devmem, devcore, type,
    numa, mode, migProfiles, health), zero values are left out.
    """
    return _go_json([_device_to_go(device) for device in devices])


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
    document = _load_json(value, annotation)
    if document is None:
        return []
    if not isinstance(document, list):
        raise AnnotationDecodeError(annotation, "expected a JSON array of devices")
    devices = []
    for position, item in enumerate(document):
        where = f"device {position}"
        values = {"id": "", **_go_fields(item, _DEVICE_FIELDS, annotation, where)}
        profiles = _go_list(values.pop("mig_profiles", []), annotation, f"{where} migProfiles")
        values["mig_profiles"] = tuple(
            _decode_mig_profile(profile, annotation, f"{where} migProfiles[{index}]")
            for index, profile in enumerate(profiles)
        )
        devices.append(_build(RegisteredDevice, values, annotation, where))
    return devices


def _decode_mig_profile(item: object, annotation: str, where: str) -> MigProfile:
    values = _go_fields(item, _MIG_PROFILE_FIELDS, annotation, where)
    placements = _go_list(values.pop("placements", []), annotation, f"{where} placements")
    values["placements"] = tuple(
        _build(
            MigPlacement,
            _go_fields(placement, _MIG_PLACEMENT_FIELDS, annotation, f"{where} placements"),
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
        index = _go_atoi(items[7], _INT64, annotation, f"{where} index") if len(items) == 9 else 0
        if index < 0:
            raise AnnotationDecodeError(annotation, f"{where} index must not be negative")
        values = {
            "id": items[0],
            "count": _go_atoi(items[1], _INT32, annotation, f"{where} count"),
            "devmem": _go_atoi(items[2], _INT32, annotation, f"{where} memory"),
            "devcore": _go_atoi(items[3], _INT32, annotation, f"{where} cores"),
            "type": items[4],
            "numa": _go_atoi(items[5], _INT64, annotation, f"{where} numa"),
            "health": _go_parse_bool(items[6], annotation, f"{where} health"),
            "index": index,
            "mode": items[8] if len(items) == 9 else DeviceMode.HAMI_CORE.value,
        }
        devices.append(_build(RegisteredDevice, values, annotation, where))
    return devices


# ---------------------------------------------------------------------------
# Pod device lists: hami.io/vgpu-devices-to-allocate and -allocated


_POD_SEPARATORS = frozenset(",:;")


@dataclass(frozen=True, slots=True)
class ContainerDevice:
    """One device a container was given: `usedmem` in MiB, `usedcores` in percent.

    Anything HAMi's encoder can write is accepted, so every value its
    `ContainerDevice` (int32 amounts, possibly empty strings) holds round-trips;
    only a separator inside a string is refused, since no decoder could split it back.
    """

    uuid: str
    type: str
    usedmem: int
    usedcores: int

    def __post_init__(self) -> None:
        for name in ("uuid", "type"):
            text = getattr(self, name)
            if not isinstance(text, str) or _POD_SEPARATORS & set(text):
                raise ValueError(f"{name} must be a string without ',', ':' or ';'")
        _check_int("usedmem", self.usedmem, _INT32)
        _check_int("usedcores", self.usedcores, _INT32)


# One list per container, init containers first; a container without devices is empty.
PodDevices = list[list[ContainerDevice]]


def encode_pod_devices(pod_devices: Sequence[Sequence[ContainerDevice]]) -> str:
    """`UUID,Type,mem,cores:` per device and `;` after every container (`EncodePodSingleDevice`)."""
    return "".join(
        "".join(f"{d.uuid},{d.type},{d.usedmem},{d.usedcores}:" for d in container) + ";"
        for container in pod_devices
    )


def decode_pod_devices(value: str, annotation: str = VGPU_DEVICES_TO_ALLOCATE) -> PodDevices:
    """Inverse of `encode_pod_devices`: one entry per container the encoder wrote.

    Go's `DecodePodDevices` splits on `;` and so also returns an empty entry
    after the final terminator; here the terminator ends the last container
    and yields nothing. A last container written without its `;` is still
    read. Like Go, a device may carry fields after the fourth; they are ignored,
    and an empty uuid or type is kept. Stricter than Go: a segment with fewer
    than four fields is an error (Go skips one without a comma), and numbers
    must be int32 written as Go's ParseInt reads them.
    """
    if not value:
        return []
    containers = value.split(";")
    if containers[-1] == "":
        containers.pop()
    return [_decode_container_devices(text, annotation) for text in containers]


def _decode_container_devices(value: str, annotation: str) -> list[ContainerDevice]:
    devices = []
    for segment in value.split(":"):
        if not segment:
            continue
        items = segment.split(",")
        if len(items) < 4:
            raise AnnotationDecodeError(annotation, f"device {segment!r} has fewer than 4 fields")
        where = f"device {items[0]!r}"
        usedmem = _go_atoi(items[2], _INT32, annotation, f"{where} memory")
        usedcores = _go_atoi(items[3], _INT32, annotation, f"{where} cores")
        devices.append(ContainerDevice(items[0], items[1], usedmem, usedcores))
    return devices


# ---------------------------------------------------------------------------
# Node lock: hami.io/mutex.lock = "<RFC3339>,<namespace>,<pod>"


@dataclass(frozen=True, slots=True)
class NodeLock:
    """Who locked a node for binding, and when; HAMi also writes a bare time (no pod)."""

    locked_at: datetime
    namespace: str = ""
    pod: str = ""

    def __post_init__(self) -> None:
        if self.locked_at.tzinfo is None:
            raise ValueError("locked_at must be timezone-aware")
        if "," in self.namespace or "," in self.pod:
            raise ValueError("namespace and pod must not contain ','")
        if bool(self.namespace) != bool(self.pod):
            raise ValueError("namespace and pod are set together or not at all")


def encode_node_lock(lock: NodeLock) -> str:
    """Go's `time.RFC3339` in UTC (seconds, `Z`), then `,namespace,pod` when a pod holds it."""
    stamp = _utc_seconds(lock.locked_at).isoformat() + "Z"
    return f"{stamp},{lock.namespace},{lock.pod}" if lock.pod else stamp


def decode_node_lock(value: str) -> NodeLock:
    """Inverse of `encode_node_lock`, accepting any offset and fraction Go's RFC3339 parse does."""
    if "," not in value:
        return NodeLock(_parse_rfc3339(value))
    parts = value.split(",")
    if len(parts) != 3:
        raise AnnotationDecodeError(NODE_LOCK, f"expected time,namespace,pod; got {value!r}")
    locked_at = _parse_rfc3339(parts[0])
    try:
        return NodeLock(locked_at, parts[1], parts[2])
    except ValueError as error:
        raise AnnotationDecodeError(NODE_LOCK, str(error)) from error


_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(?:(Z)|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def _parse_rfc3339(text: str) -> datetime:
    match = _RFC3339.fullmatch(text)
    if not match:
        raise AnnotationDecodeError(NODE_LOCK, f"time {text!r} is not RFC 3339")
    year, month, day, hour, minute, second, fraction, zulu, sign, off_h, off_m = match.groups()
    offset = timedelta(0)
    if not zulu:
        offset = timedelta(hours=int(off_h), minutes=int(off_m)) * (-1 if sign == "-" else 1)
    try:
        stamp = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "0")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
    except ValueError as error:
        raise AnnotationDecodeError(NODE_LOCK, f"time {text!r}: {error}") from error
    return stamp.astimezone(UTC)


# ---------------------------------------------------------------------------
# Handshake: hami.io/node-handshake = "Requesting_<YYYY-MM-DD hh:mm:ss>"


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
    return f"{handshake.phase}_{_utc_seconds(handshake.at).isoformat(sep=' ')}"


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


# ---------------------------------------------------------------------------
# Topology scores: hami.io/node-nvidia-score = [{"uuid":..,"score":{uuid:int}}]


def encode_pair_scores(scores: Mapping[str, Mapping[str, int]]) -> str:
    """The JSON HAMi's device plugin writes: devices in the given order, peers sorted
    (Go sorts map keys), both fields always there (`DeviceScore` has no `omitempty`,
    so a GPU without peers is `"score":{}`)."""
    entries = []
    for uuid, peers in scores.items():
        for peer, score in peers.items():
            _check_int(f"score {uuid}->{peer}", score, _INT64)
        entries.append({"uuid": uuid, "score": dict(sorted(peers.items()))})
    return _go_json(entries)


def decode_pair_scores(value: str) -> dict[str, dict[str, int]]:
    """Map each GPU UUID to its peers' link scores (NVLink 100 per link, PCIe 10..60)."""
    annotation = NODE_NVIDIA_SCORE
    document = _load_json(value, annotation)
    if document is None:
        return {}
    scores: dict[str, dict[str, int]] = {}
    for position, item in enumerate(_go_list(document, annotation, "value")):
        where = f"entry {position}"
        entry = _go_fields(item, {"uuid": "uuid", "score": "score"}, annotation, where)
        uuid = entry.get("uuid", "")
        if not isinstance(uuid, str):
            raise AnnotationDecodeError(annotation, f"{where} uuid must be a string")
        if uuid in scores:
            raise AnnotationDecodeError(annotation, f"device {uuid!r} is listed twice")
        peers = _go_object(entry.get("score", {}), annotation, f"{where} score")
        for peer, score in peers.items():
            if type(score) is not int or not _INT64[0] <= score <= _INT64[1]:
                raise AnnotationDecodeError(
                    annotation, f"score {uuid}->{peer} must be an integer, got {score!r}"
                )
        scores[uuid] = dict(peers)
    return scores


# ---------------------------------------------------------------------------
# Go compatibility helpers


_GO_INT_TEXT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def _utc_seconds(moment: datetime) -> datetime:
    """The naive UTC wall time to the second, which isoformat writes with a 4-digit year."""
    return moment.astimezone(UTC).replace(microsecond=0, tzinfo=None)


def _go_atoi(text: str, bounds: tuple[int, int], annotation: str, what: str) -> int:
    """strconv.ParseInt(text, 10, bits): an optional sign and ASCII digits, nothing else."""
    if not _GO_INT_TEXT.fullmatch(text):
        raise AnnotationDecodeError(annotation, f"{what} {text!r} is not an integer")
    number = int(text)
    if not bounds[0] <= number <= bounds[1]:
        raise AnnotationDecodeError(annotation, f"{what} {text} is out of range")
    return number


def annotation_is_true(value: str | None) -> bool:
    """HAMi's reading of a boolean annotation (e.g. numa-bind): Go's ParseBool says true."""
    return value in _GO_TRUE


def _go_parse_bool(text: str, annotation: str, what: str) -> bool:
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise AnnotationDecodeError(annotation, f"{what} {text!r} is not a boolean")


def _go_json(document: object) -> str:
    """json.Marshal's bytes: compact, UTF-8 kept, and `<`, `>`, `&`, U+2028, U+2029 escaped."""
    text = json.dumps(document, ensure_ascii=False, separators=(",", ":"))
    for raw, escaped in (
        ("<", "\\u003c"),
        (">", "\\u003e"),
        ("&", "\\u0026"),
        ("\u2028", "\\u2028"),
        ("\u2029", "\\u2029"),
    ):
        text = text.replace(raw, escaped)
    return text


def _load_json(value: str, annotation: str) -> object:
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise AnnotationDecodeError(annotation, f"not valid JSON: {error}") from error


def _go_object(item: object, annotation: str, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise AnnotationDecodeError(annotation, f"{where} must be a JSON object")
    return item


def _go_fields(
    item: object, names: Mapping[str, str], annotation: str, where: str
) -> dict[str, Any]:
    """An object's members by field name, matched as encoding/json matches them:
    keys case-insensitively; unknown keys and null values ignored."""
    return {
        names[key.lower()]: raw
        for key, raw in _go_object(item, annotation, where).items()
        if key.lower() in names and raw is not None
    }


def _go_list(item: object, annotation: str, where: str) -> list[Any]:
    if not isinstance(item, list):
        raise AnnotationDecodeError(annotation, f"{where} must be a JSON array")
    return item


_Record = TypeVar("_Record", RegisteredDevice, MigProfile, MigPlacement)


def _build(cls: type[_Record], values: dict[str, Any], annotation: str, where: str) -> _Record:
    """Construct a record, turning a field that fails its checks into a decode error."""
    try:
        return cls(**values)
    except ValueError as error:
        raise AnnotationDecodeError(annotation, f"{where}: {error}") from error
