"""A stand-in for another vendor's own device plugin, as far as HAMi's scheduler sees it.

In legacy mode only NVIDIA nodes run a device plugin of ours: HAMi serves
every other family through that vendor's plugin (HAMi's forks: Hygon's
dcu-vgpu, Ascend's, Iluvatar's, Kunlun's vXPU, Vastai's, Biren's; or the
vendor's own, which reports plain capacity: Cambricon's dsmlu, Moore
Threads', Metax's, Enflame's, Kunlunxin's, AWS Neuron's). The simulator plays
only the part of that plugin the scheduler relies on, driven by the backend's
data rather than a copy per vendor:

- at start, register the cards: the register annotation in the codec the
  backend reads (JSON, HAMi's MarshalNodeDevices, unless the backend takes
  only the colon list, as Hygon's and Iluvatar's do) with a `Reported_`
  handshake on its key, or, for a vendor read from `status.capacity`, the
  capacity its plugin reports (`CAPACITY_UNITS`); and kubelet's allocatable
  for the count resource. The plan is read back through the backend's own
  GetNodeDevices before it is written, so a plan the scheduler would not read
  fails here, naming the vendor;
- after /bind, what the plugin's Allocate does that the scheduler waits for:
  `hami.io/bind-phase=success` and the release of the node lock the backend's
  LockRule took (the shared owner-aware `hami.io/mutex.lock`, or a lock of the
  vendor's own such as Cambricon's bare-time `cambricon.com/dsmlu.lock`).
What the vendor's plugin hands the container (its env, device nodes) is that
plugin's business and is not played. Enflame DRS (its own capacity JSON) and
Metax sGPU (`metax-tech.com/node-gpu-devices`) have no stand-in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from api.hami_annotations import (
    BIND_PHASE,
    AnnotationDecodeError,
    BindPhase,
    Handshake,
    HandshakePhase,
    RegisteredDevice,
    encode_handshake,
    encode_node_devices,
)
from dra_driver.engine.vendor_backends.base import LockKind, VendorBackend
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, object_path

NODES = "/api/v1/nodes"
HEALTH_WINDOW = timedelta(seconds=60)
"""HAMi's generic CheckHealth window; the plan is read back as of its own time."""


@dataclass(frozen=True, slots=True)
class MockCard:
    """One card of the node, as its vendor's plugin would find it."""

    uuid: str
    index: int
    product: str
    memory_mib: int
    numa: int = 0


@dataclass(frozen=True, slots=True)
class CapacityUnits:
    """How a plugin that registers by capacity reports one card in `status.capacity`.

    `shared`: the count resource carries the split count per card (the card is
    shared), else one unit per card; `cores`: units of the cores resource per
    card (0: not reported); `memory_unit_mib`: MiB per unit of the memory
    resource (0: not reported). The backend's GetNodeDevices reads these back.
    """

    shared: bool = False
    cores: int = 0
    memory_unit_mib: int = 0


CAPACITY_UNITS: Mapping[str, CapacityUnits] = {
    "MLU": CapacityUnits(shared=True, cores=100, memory_unit_mib=256),
    "Mthreads": CapacityUnits(shared=True, cores=16, memory_unit_mib=512),
    "Metax-GPU": CapacityUnits(),
    "GCU": CapacityUnits(),
    "kunlun": CapacityUnits(),
    "AWSNeuron": CapacityUnits(cores=2),
}
"""By HAMi request type: the vendors whose scheduler reads `status.capacity`, with what
their plugins report per card (hami-vendors.md: Cambricon one card per 100 vcore and
256 MiB vmemory units, Mthreads per 16 sgpu-core and 512 MiB units, AWS Neuron two
NeuronCores per device, the others one unit per whole card)."""


@dataclass(frozen=True, slots=True)
class NodeAdvert:
    """What the plugin writes on its node: annotations, and capacity = allocatable."""

    annotations: dict[str, str] = field(default_factory=dict)
    capacity: dict[str, str] = field(default_factory=dict)


class NoStandInError(InvalidParameterError):
    """The vendor registers in a way this stand-in does not play."""


def card_type(backend: VendorBackend, product: str) -> str:
    """HAMi's device type: the product without spaces, with the request type in front
    unless the product names it already (the backend keeps the devices whose type
    contains its name)."""
    name = product.strip().replace(" ", "-")
    if backend.adapter.matches(name):
        return name
    return f"{backend.name}-{name}"


def _registered(
    backend: VendorBackend, cards: Sequence[MockCard], count: int
) -> list[RegisteredDevice]:
    return [
        RegisteredDevice(
            id=card.uuid,
            index=card.index,
            count=count,
            devmem=card.memory_mib,
            devcore=100,
            type=card_type(backend, card.product),
            numa=card.numa,
            mode="hami-core",
            health=True,
        )
        for card in cards
    ]


def colon_register(devices: Sequence[RegisteredDevice]) -> str:
    """The colon list (`device.DecodeNodeDevices`' 9-field form) that Hygon's and
    Iluvatar's plugins write."""
    return "".join(
        f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},"
        f"{str(d.health).lower()},{d.index},{d.mode}:"
        for d in devices
    )


def register_value(backend: VendorBackend, devices: Sequence[RegisteredDevice]) -> str:
    """The register in the codec the backend reads: JSON unless its decoder takes only
    the colon list."""
    encoded = encode_node_devices(devices)
    try:
        backend.decode_register(encoded)
    except AnnotationDecodeError:
        return colon_register(devices)
    return encoded


def plan_advert(
    backend: VendorBackend, cards: Sequence[MockCard], split_count: int, now: datetime
) -> NodeAdvert:
    """What the vendor's plugin reports for these cards (pure)."""
    if not cards:
        raise InvalidParameterError(f"{backend.name} node", "has no cards to register")
    count_resource = backend.count_resource
    if backend.register_key is not None:
        # A vendor without a memory resource hands out whole devices (Vastai, Biren).
        count = split_count if backend.adapter.resources.memory else 1
        annotations = {
            backend.register_key: register_value(backend, _registered(backend, cards, count))
        }
        if backend.handshake_key is not None:
            reported = Handshake(HandshakePhase.REPORTED, now)
            annotations[backend.handshake_key] = encode_handshake(reported)
        return NodeAdvert(annotations, {count_resource: str(count * len(cards))})
    units = CAPACITY_UNITS.get(backend.name)
    if units is None:
        raise NoStandInError(
            f"{backend.name} node", "its plugin registers in a way the simulator does not play"
        )
    resources = backend.adapter.resources
    capacity = {count_resource: str(len(cards) * (split_count if units.shared else 1))}
    if units.cores and resources.cores:
        capacity[resources.cores] = str(units.cores * len(cards))
    if units.memory_unit_mib and resources.memory:
        capacity[resources.memory] = str(
            sum(card.memory_mib // units.memory_unit_mib for card in cards)
        )
    return NodeAdvert({}, capacity)


def check_advert(
    backend: VendorBackend, node: str, advert: NodeAdvert, cards: int, now: datetime
) -> None:
    """Read the plan back through the backend's GetNodeDevices: every card, healthy."""
    view = {
        "metadata": {"name": node, "annotations": advert.annotations},
        "status": {"capacity": advert.capacity, "allocatable": advert.capacity},
    }
    found = backend.node_devices(view, now, HEALTH_WINDOW)
    healthy = [device for device in found.devices if device.healthy]
    if found.problem or len(healthy) != cards:
        raise NoStandInError(
            f"{backend.name} node {node}",
            f"the scheduler would read {len(healthy)} of {cards} cards"
            + (f" ({found.problem})" if found.problem else ""),
        )


class VendorDevicePlugin:
    """The stand-in on one node, writing as the node's device plugin identity."""

    def __init__(
        self, client: KubeClient, node: str, backend: VendorBackend, cards: Sequence[MockCard]
    ) -> None:
        self.client = client
        self.node = node
        self.backend = backend
        self.cards = tuple(cards)

    async def register(self, split_count: int) -> NodeAdvert:
        """Write the register (or capacity) and kubelet's allocatable; what was written."""
        now = datetime.now(UTC)
        advert = plan_advert(self.backend, self.cards, split_count, now)
        check_advert(self.backend, self.node, advert, len(self.cards), now)
        path = object_path(NODES, self.node)
        if advert.annotations:
            await self.client.patch(path, {"metadata": {"annotations": advert.annotations}})
        capacity = {"capacity": advert.capacity, "allocatable": advert.capacity}
        await self.client.patch(f"{path}/status", {"status": capacity})
        return advert

    async def allocate(self, namespace: str, name: str) -> None:
        """After /bind: bind-phase success, and the node lock the backend took released."""
        pods = f"/api/v1/namespaces/{namespace}/pods"
        phase = {"metadata": {"annotations": {BIND_PHASE: BindPhase.SUCCESS.value}}}
        await self.client.patch(object_path(pods, name), phase)
        rule = self.backend.lock
        if rule.kind is LockKind.NONE or rule.key is None:
            return
        locker = NodeLocker(self.client, key=rule.key, records_owner=rule.records_owner)
        await locker.release(self.node, namespace, name)


def container_names(pod: Mapping[str, Any]) -> list[str]:
    """Containers in HAMi's PodDevices order: init containers first."""
    spec = pod.get("spec") or {}
    return [c["name"] for c in (spec.get("initContainers") or []) + (spec.get("containers") or [])]
