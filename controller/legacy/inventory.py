"""A Node object read the way HAMi's scheduler reads it: registered devices and health.

Pure: the node is the dict the API returns. The devices come from
`hami.io/node-nvidia-register` (JSON, or the legacy colon list); a node
without it is unregistered, a node whose annotation cannot be read is
unusable with that reason (and never stops scheduling elsewhere). Health
follows HAMi's CheckHealth: a `Requesting_<time>` handshake older than the
timeout together with zero allocatable GPUs means the device plugin is gone,
so every device is unhealthy; a Requesting value without a readable time does
not count. Reference: hami-protocol.md §5.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import (
    AnnotationDecodeError,
    Handshake,
    HandshakePhase,
    decode_handshake,
    decode_node_devices,
    decode_pair_scores,
    encode_handshake,
)
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.model import HAMI_CORE_MODE, Device, Node
from dra_driver.engine.reasons import NODE_UNREGISTERED


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """One node: its engine view, or why it cannot be used (`node` is None then)."""

    name: str
    node: Node | None
    problem: str = ""
    register_value: str | None = None
    allocatable_gpus: int = 0


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def allocatable_count(node: Mapping[str, Any], resource: str) -> int:
    """`status.allocatable[resource]` as an integer; absent or unreadable is 0 (Go's zero)."""
    raw = ((node.get("status") or {}).get("allocatable") or {}).get(resource)
    if raw is None:
        return 0
    try:
        return int(parse_quantity(str(raw)))
    except QuantityError:
        return 0


def device_plugin_gone(
    handshake: str | None, allocatable_gpus: int, now: datetime, timeout: timedelta
) -> bool:
    """HAMi's CheckHealth verdict: True when the node's devices are to be treated unhealthy."""
    if not handshake or not handshake.startswith(HandshakePhase.REQUESTING.value):
        return False
    try:
        parsed = decode_handshake(handshake)
    except AnnotationDecodeError:
        return False
    return (
        parsed.phase is HandshakePhase.REQUESTING
        and now - parsed.at > timeout
        and allocatable_gpus == 0
    )


def requesting_handshake(now: datetime) -> str:
    """What the scheduler writes when it (re)reads a node's devices."""
    return encode_handshake(Handshake(HandshakePhase.REQUESTING, now))


def read_node(
    node: Mapping[str, Any],
    count_resource: str,
    vendor_name: str,
    now: datetime,
    handshake_timeout: timedelta,
) -> NodeInventory:
    """The node's registered devices of the vendor, with HAMi's health rules applied."""
    name = node_name(node)
    annotations = annotations_of(node)
    register = annotations.get(keys.NODE_NVIDIA_REGISTER)
    allocatable = allocatable_count(node, count_resource)
    if register is None:
        return NodeInventory(name, None, NODE_UNREGISTERED, None, allocatable)
    try:
        registered = decode_node_devices(register)
        scores = (
            decode_pair_scores(annotations[keys.NODE_NVIDIA_SCORE])
            if annotations.get(keys.NODE_NVIDIA_SCORE)
            else {}
        )
    except AnnotationDecodeError as error:
        return NodeInventory(name, None, f"{NODE_UNREGISTERED}: {error}", register, allocatable)
    gone = device_plugin_gone(
        annotations.get(keys.NODE_HANDSHAKE), allocatable, now, handshake_timeout
    )
    devices = tuple(
        Device(
            id=device.id,
            index=device.index,
            type=device.type,
            count=device.count,
            memory_mib=device.devmem,
            cores=device.devcore,
            numa=device.numa,
            healthy=device.health and not gone,
            mode=device.mode or HAMI_CORE_MODE,
        )
        for device in registered
        if vendor_name.lower() in device.type.lower()
    )
    cordoned = frozenset(
        item for item in annotations.get(keys.DEVICE_CORDON, "").split(",") if item
    )
    return NodeInventory(name, Node(name, devices, cordoned, scores), "", register, allocatable)
