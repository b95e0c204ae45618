"""A Node object read the way HAMi's scheduler reads it: registered devices and health.

Pure: the node is the dict the API returns. The devices come from
`hami.io/node-nvidia-register` (JSON, or the legacy colon list); a node
without it is unregistered, a node whose annotation cannot be read is
unusable with that reason (and never stops scheduling elsewhere). Health
follows HAMi's CheckHealth: a `Requesting_<time>` handshake older than the
timeout together with zero allocatable GPUs means the device plugin is gone,
so every device is unhealthy; a Requesting value without a readable time does
not count. Reference: hami-protocol.md §5.

A device uuid listed twice in one node's annotation is one card (HAMi's
device plugin finds a GPU by uuid): it counts once. The same uuid on two
nodes is two cards, each node's own (a legacy pod's shares are charged to
its `hami.io/vgpu-node`); `UuidSightings` keeps which nodes register each
uuid so the scheduler can report repeats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
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
from dra_driver.engine.model import HAMI_CORE_MODE, Device, Node, first_of_each_id
from dra_driver.engine.reasons import NODE_UNREGISTERED


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """One node: its engine view, or why it cannot be used (`node` is None then)."""

    name: str
    node: Node | None
    problem: str = ""
    register_value: str | None = None
    allocatable_gpus: int = 0
    registered_ids: tuple[str, ...] = ()
    """Every registered device id of the vendor, repeats included (for reporting them)."""


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
        decoded = decode_node_devices(register)
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
    devices = [
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
        for device in decoded
        if vendor_name.lower() in device.type.lower()
    ]
    cordoned = frozenset(
        item for item in annotations.get(keys.DEVICE_CORDON, "").split(",") if item
    )
    return NodeInventory(
        name,
        Node(name, first_of_each_id(devices), cordoned, scores),
        "",
        register,
        allocatable,
        tuple(device.id for device in devices),
    )


@dataclass(slots=True)
class UuidSightings:
    """Which nodes register each device uuid, kept current per node change (no rescans),
    so a uuid on two devices is reported as soon as it appears."""

    _counts: dict[str, dict[str, int]] = field(default_factory=dict)
    _ids: dict[str, tuple[str, ...]] = field(default_factory=dict)
    _repeated: set[str] = field(default_factory=set)

    def update(self, node: str, ids: Sequence[str]) -> dict[str, tuple[str, ...]]:
        """Record the node's registered ids; returns those of them seen more than once
        in the cluster, with the node of every sighting."""
        self.remove(node)
        self._ids[node] = tuple(ids)
        for device_id in ids:
            counts = self._counts.setdefault(device_id, {})
            counts[node] = counts.get(node, 0) + 1
            if sum(counts.values()) > 1:
                self._repeated.add(device_id)
        return {i: self._places(i) for i in sorted(set(ids)) if i in self._repeated}

    def remove(self, node: str) -> None:
        """Forget the node's ids (deleted, or re-registered by `update`)."""
        for device_id in self._ids.pop(node, ()):
            counts = self._counts[device_id]
            counts[node] -= 1
            if not counts[node]:
                del counts[node]
            if sum(counts.values()) < 2:
                self._repeated.discard(device_id)
            if not counts:
                del self._counts[device_id]

    def duplicates(self) -> dict[str, tuple[str, ...]]:
        """uuid -> the node of every device registering it, for uuids seen more than once."""
        return {device_id: self._places(device_id) for device_id in sorted(self._repeated)}

    def _places(self, device_id: str) -> tuple[str, ...]:
        counts = self._counts[device_id]
        return tuple(node for node in sorted(counts) for _ in range(counts[node]))
