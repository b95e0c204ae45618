"""A Node object read the way HAMi's scheduler reads it: every vendor's devices and health.

Pure: the node is the dict the API returns. Each enabled vendor backend reads
its own devices (`VendorBackend.node_devices`: NVIDIA from
`hami.io/node-nvidia-register`, JSON or the legacy colon list; Hygon from
`hami.io/node-dcu-register`; ...) and applies HAMi's CheckHealth: a
`Requesting_<time>` handshake on the vendor's key older than the timeout
together with nothing of the vendor allocatable means its device plugin is
gone, so every device of that vendor is unhealthy. The node's devices are the
union of what every vendor could read; a vendor whose annotation cannot be
read contributes nothing (and never stops the others or scheduling
elsewhere), and a node where no vendor has devices is unusable with the first
vendor's reason. Cordons (`hami.io/device-cordon`) and pair scores are
NVIDIA's, as only NVIDIA's Fit reads them. Reference: hami-protocol.md §5,
hami-vendors.md.

A device uuid listed twice in one node's annotation is one card (HAMi's
device plugin finds a GPU by uuid): it counts once. The same uuid on two
nodes is two cards, each node's own (a legacy pod's shares are charged to
its `hami.io/vgpu-node`); `UuidSightings` keeps which nodes register each
uuid so the scheduler can report repeats.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import (
    AnnotationDecodeError,
    Handshake,
    HandshakePhase,
    decode_pair_scores,
    encode_handshake,
)
from dra_driver.engine.model import Node, first_of_each_id
from dra_driver.engine.reasons import NODE_UNREGISTERED
from dra_driver.engine.vendor_backends.base import (
    VendorBackend,
    VendorNodeDevices,
    annotations_of,
    handshake_gone,
    node_quantity,
)
from dra_driver.engine.vendor_backends.nvidia import NvidiaBackend, NvidiaConfig


@dataclass(frozen=True, slots=True)
class NodeInventory:
    """One node: its engine view, or why it cannot be used (`node` is None then)."""

    name: str
    node: Node | None
    problem: str = ""
    register_value: str | None = None
    """The first vendor register annotation the node carries (None: none at all)."""
    allocatable_gpus: int = 0
    """NVIDIA's `status.allocatable` count (the first vendor's)."""
    registered_ids: tuple[str, ...] = ()
    """Every registered device id of every vendor, repeats included (for reporting them)."""
    vendors: tuple[VendorNodeDevices, ...] = ()
    """What each vendor read, in registry order."""


def node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


def allocatable_count(node: Mapping[str, Any], resource: str) -> int:
    """`status.allocatable[resource]` as an integer; absent or unreadable is 0 (Go's zero)."""
    return node_quantity(node, "allocatable", resource)


def device_plugin_gone(
    handshake: str | None, allocatable_gpus: int, now: datetime, timeout: timedelta
) -> bool:
    """HAMi's CheckHealth verdict: True when the node's devices are to be treated unhealthy."""
    return handshake_gone(handshake, allocatable_gpus, now, timeout)


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
    """The node's registered NVIDIA devices, with HAMi's health rules applied
    (`read_node_devices` with the NVIDIA backend counting `count_resource`)."""
    backend = NvidiaBackend(NvidiaConfig(resourceCountName=count_resource))
    if backend.name != vendor_name:
        raise ValueError(f"read_node reads {backend.name} devices, not {vendor_name}")
    return read_node_devices(node, (backend,), now, handshake_timeout)


def read_node_devices(
    node: Mapping[str, Any],
    backends: Iterable[VendorBackend],
    now: datetime,
    handshake_timeout: timedelta,
) -> NodeInventory:
    """The node's devices of every vendor, with each vendor's health rules applied."""
    name = node_name(node)
    annotations = annotations_of(node)
    backends = tuple(backends)
    read = tuple(backend.node_devices(node, now, handshake_timeout) for backend in backends)
    register = next((v.register_value for v in read if v.register_value is not None), None)
    allocatable = allocatable_count(node, backends[0].count_resource) if backends else 0
    usable = [vendor for vendor in read if vendor.usable]
    if not usable:
        tried = [vendor.problem for vendor in read if vendor.register_value is not None]
        problem = tried[0] if tried else NODE_UNREGISTERED
        return NodeInventory(name, None, problem, register, allocatable, vendors=read)
    try:
        scores = (
            decode_pair_scores(annotations[keys.NODE_NVIDIA_SCORE])
            if annotations.get(keys.NODE_NVIDIA_SCORE)
            else {}
        )
    except AnnotationDecodeError as error:
        return NodeInventory(
            name, None, f"{NODE_UNREGISTERED}: {error}", register, allocatable, vendors=read
        )
    devices = [device for vendor in usable for device in vendor.devices]
    nvidia_ids = {
        device.id
        for vendor in usable
        if vendor.vendor == keys.NVIDIA_DEVICE_TYPE
        for device in vendor.devices
    }
    cordoned = frozenset(
        item
        for item in annotations.get(keys.DEVICE_CORDON, "").split(",")
        if item and item in nvidia_ids
    )
    return NodeInventory(
        name,
        Node(name, first_of_each_id(devices), cordoned, scores),
        "",
        register,
        allocatable,
        tuple(device.id for device in devices),
        read,
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
