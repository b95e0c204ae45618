"""Codec of a pod's device lists: `hami.io/vgpu-devices-to-allocate` and `-allocated`.

Owns `ContainerDevice` and the `UUID,Type,mem,cores:` / `;` text HAMi's
scheduler writes for the device plugin to hand out (Go
`EncodePodSingleDevice`, `DecodePodDevices`). Calls `keys` and
`go_compat` only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from api.hami_annotations.go_compat import (
    INT32_BOUNDS,
    AnnotationDecodeError,
    check_int,
    parse_go_int,
)
from api.hami_annotations.keys import VGPU_DEVICES_TO_ALLOCATE

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
        check_int("usedmem", self.usedmem, INT32_BOUNDS)
        check_int("usedcores", self.usedcores, INT32_BOUNDS)


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
        usedmem = parse_go_int(items[2], INT32_BOUNDS, annotation, f"{where} memory")
        usedcores = parse_go_int(items[3], INT32_BOUNDS, annotation, f"{where} cores")
        devices.append(ContainerDevice(items[0], items[1], usedmem, usedcores))
    return devices
