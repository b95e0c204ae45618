"""The legacy scheduler's view of one of HAMi's device families: a vendor backend.

HAMi's scheduler drives every vendor through one Go interface (`Devices` in
`pkg/device/devices.go`): the webhook asks each vendor's MutateAdmission,
Filter reads each vendor's node devices and runs its Fit, Bind takes the node
lock each vendor wants, and the pod annotations each vendor's PatchAnnotations
writes tell its device plugin what to hand out. A `VendorBackend` is that
interface here, pure (plain dicts in, records out), so the extender, the
webhook and the tests share it:

- `adapter`: the engine's view (names, keys, request reading, Fit, score);
- `mutate`: MutateAdmission (has the container the resource, what changes);
- `node_devices`: GetNodeDevices plus CheckHealth;
- `lock`, `needs_lock`: LockNode's key and rules, or none;
- `pod_annotations`: PatchAnnotations, over the grants and a `PatchContext`;
- `allocated_devices`: the devices its allocated key says a pod holds.

The defaults are what most of HAMi's vendors do; a vendor overrides only the
few methods where it differs. `docs/vendor-backends.md` says how to add one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from api import hami_annotations as keys
from api.hami_annotations import (
    AnnotationDecodeError,
    ContainerDevice,
    HandshakePhase,
    PodDevices,
    RegisteredDevice,
    decode_handshake,
    decode_node_devices,
    decode_pod_devices,
    encode_pod_devices,
)
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.grants import ContainerGrants, Grant
from dra_driver.engine.model import HAMI_CORE_MODE, Device
from dra_driver.engine.reasons import NODE_UNREGISTERED
from dra_driver.engine.requests import ContainerRequest, PodRequest
from dra_driver.engine.vendors import VendorAdapter


class LockKind(StrEnum):
    """How a vendor serialises binds to a node (HAMi's LockNode)."""

    SHARED = "shared"
    """`hami.io/mutex.lock`, owner-aware (pkg/util/nodelock): one lock per node
    for every vendor that uses it, re-entrant for the same pod."""
    OWN = "own"
    """A vendor key of its own (Cambricon's `cambricon.com/dsmlu.lock`)."""
    NONE = "none"
    """No lock (Metax GPU, Mthreads, Enflame, Kunlun whole cards, AWS Neuron)."""


@dataclass(frozen=True, slots=True)
class LockRule:
    """The node lock a vendor takes in Bind: its key, whether it records the owner
    pod, and after how long another binder may take it over (None: the
    scheduler's `--node-lock-timeout`)."""

    kind: LockKind
    key: str | None = None
    records_owner: bool = True
    expiry: timedelta | None = None


SHARED_LOCK = LockRule(LockKind.SHARED, keys.NODE_LOCK)
NO_LOCK = LockRule(LockKind.NONE)


@dataclass(frozen=True, slots=True)
class ContainerMutation:
    """What a vendor's MutateAdmission says of one container.

    `has_resource`: the container asks for this vendor (the webhook then sets
    the scheduler name). `limits` and `requests` are resource values the
    webhook sets (added, or replacing what is there), `env` variables it
    appends, `pod_annotations` annotations it sets on the pod.
    """

    has_resource: bool
    limits: Mapping[str, str] = field(default_factory=dict)
    requests: Mapping[str, str] = field(default_factory=dict)
    env: tuple[Mapping[str, str], ...] = ()
    pod_annotations: Mapping[str, str] = field(default_factory=dict)


NO_MUTATION = ContainerMutation(False)


@dataclass(frozen=True, slots=True)
class PatchContext:
    """What HAMi's PatchAnnotations may read besides the grants, in one record so a
    vendor that needs more than its grants does not need a hook of its own.

    `pod` is the Pod object (its containers' names and limits), `node` the node
    Filter chose and `devices` that node's devices in the engine's terms;
    `requests` are the pod's requests per container in the grants' order (init
    containers first); `assigned` the annotations already set for the pod
    (HAMi's annoinput: `hami.io/vgpu-node`, `hami.io/vgpu-time` and the vendors
    before this one) over the pod's own; `now_ns` the time of the placement in
    Unix nanoseconds. Most vendors read none of it.
    """

    pod: Mapping[str, Any] = field(default_factory=dict)
    node: str = ""
    devices: tuple[Device, ...] = ()
    requests: tuple[ContainerRequest, ...] = ()
    assigned: Mapping[str, str] = field(default_factory=dict)
    now_ns: int = 0


NO_PATCH_CONTEXT = PatchContext()
"""For callers that have only the grants (usage read-back, the vendors' unit tests)."""


@dataclass(frozen=True, slots=True)
class VendorNodeDevices:
    """One vendor's devices on one node, or why there are none.

    `register_value` is the raw register annotation (None when the node has
    none, or when the vendor reads `status.capacity`); `problem` is empty when
    the devices could be read. `healthy` is CheckHealth's verdict: False when
    the vendor's device plugin is gone, and every device then counts unhealthy.
    """

    vendor: str
    devices: tuple[Device, ...] = ()
    register_value: str | None = None
    problem: str = NODE_UNREGISTERED
    healthy: bool = True

    @property
    def usable(self) -> bool:
        return not self.problem


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def node_quantity(node: Mapping[str, Any], part: str, resource: str) -> int:
    """`status.<part>[resource]` as an integer (quantity's Value(): rounded up);
    absent or unreadable is 0, Go's zero value."""
    raw = ((node.get("status") or {}).get(part) or {}).get(resource)
    if raw is None or not resource:
        return 0
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return 0
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


CardBuilder = Callable[[str, int, int], Device]
"""One capacity-read card: (node name, card index, the resource's capacity) to the device."""


def capacity_cards(
    node: Mapping[str, Any],
    vendor: str,
    resource: str,
    card: CardBuilder,
    *,
    units_per_card: int = 1,
) -> VendorNodeDevices:
    """HAMi's GetNodeDevices for a vendor without a register annotation: one card
    per `units_per_card` units of `status.capacity[resource]` (a last partial one
    too), built by `card`; no capacity is "device not found <resource>"."""
    capacity = node_quantity(node, "capacity", resource)
    if capacity <= 0:
        return VendorNodeDevices(vendor, problem=f"device not found {resource}")
    name = str((node.get("metadata") or {}).get("name") or "")
    cards = -(-capacity // units_per_card)
    return VendorNodeDevices(
        vendor, tuple(card(name, index, capacity) for index in range(cards)), problem=""
    )


def whole_cards(
    node: Mapping[str, Any],
    adapter: VendorAdapter,
    id_word: str,
    *,
    memory_mib: int,
    cores: int,
    custom_info: Mapping[str, str] | None = None,
) -> VendorNodeDevices:
    """GetNodeDevices of a vendor that hands out whole cards (Enflame GCU, Metax GPU):
    one card of one slot per unit of its count's capacity, all the same size."""

    def card(name: str, index: int, _capacity: int) -> Device:
        return Device(
            id=f"{name}-{id_word}-{index}",
            index=index,
            type=adapter.name,
            count=1,
            memory_mib=memory_mib,
            cores=cores,
            custom_info=custom_info or {},
        )

    return capacity_cards(node, adapter.name, adapter.resources.count, card)


def sized_cards(
    node: Mapping[str, Any], adapter: VendorAdapter, id_word: str, cores_per_card: int, shares: int
) -> VendorNodeDevices:
    """GetNodeDevices of a vendor whose capacity counts cores and memory units
    (Cambricon, Mthreads): one card per `cores_per_card` cores, each with `shares`
    slots, those cores and `memory x memory_factor x cores_per_card / cores` MiB."""
    names = adapter.resources
    memory = node_quantity(node, "capacity", names.memory)

    def card(name: str, index: int, cores: int) -> Device:
        return Device(
            id=f"{name}-{id_word}-{index}",
            index=index,
            type=adapter.name,
            count=shares,
            memory_mib=memory * adapter.memory_factor * cores_per_card // cores,
            cores=cores_per_card,
        )

    return capacity_cards(node, adapter.name, names.cores, card, units_per_card=cores_per_card)


def handshake_gone(
    handshake: str | None, allocatable: int, now: datetime, timeout: timedelta
) -> bool:
    """HAMi's generic CheckHealth verdict: True when a `Requesting_` handshake is
    older than the timeout and nothing of the vendor is allocatable (its device
    plugin is gone). A Requesting value without a readable time does not count."""
    if not handshake or not handshake.startswith(HandshakePhase.REQUESTING.value):
        return False
    try:
        parsed = decode_handshake(handshake)
    except AnnotationDecodeError:
        return False
    return (
        parsed.phase is HandshakePhase.REQUESTING and now - parsed.at > timeout and allocatable == 0
    )


def engine_device(device: RegisteredDevice, healthy: bool = True) -> Device:
    """A registered device in the engine's terms (the plugin's health and ours)."""
    return Device(
        id=device.id,
        index=device.index,
        type=device.type,
        count=device.count,
        memory_mib=device.devmem,
        cores=device.devcore,
        numa=device.numa,
        healthy=device.health and healthy,
        mode=device.mode or HAMI_CORE_MODE,
        custom_info=dict(device.custom_info),
        mig_profiles=device.mig_profiles,
    )


class VendorBackend:
    """One vendor's part of the legacy scheduler; the defaults are HAMi's common case.

    Subclasses set the class attributes (or pass them to `__init__`) and
    override only what their vendor does differently.
    """

    empty_register_is_unregistered: bool = True
    """HAMi's GetNodeDevices fails ("no gpu found on node") for a register annotation
    that lists no device, so the vendor contributes nothing to the node."""

    def __init__(
        self,
        adapter: VendorAdapter,
        *,
        register_key: str | None,
        handshake_key: str | None,
        lock: LockRule = SHARED_LOCK,
        to_allocate_key: str | None = None,
        allocated_key: str | None = None,
    ) -> None:
        self.adapter = adapter
        self.register_key = register_key
        """The node annotation the vendor's device plugin registers devices in; None
        when the devices come from `status.capacity`."""
        self.handshake_key = handshake_key
        """The node annotation the scheduler writes `Requesting_<time>` to when it
        reads the devices; None when the vendor has no handshake."""
        self.lock = lock
        self.to_allocate_key = (
            adapter.annotations.devices_to_allocate if to_allocate_key is None else to_allocate_key
        )
        self.allocated_key = allocated_key or adapter.annotations.devices_allocated

    @property
    def name(self) -> str:
        """HAMi's request Type, which is also the key of its PodDevices."""
        return self.adapter.name

    @property
    def count_resource(self) -> str:
        return self.adapter.resources.count

    @property
    def runtime_class_name(self) -> str:
        """The runtimeClassName the webhook sets on a pod of this vendor that names
        none; empty for none."""
        return ""

    # -- webhook

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """MutateAdmission. Default: the count resource in limits, nothing changed.

        Raise InvalidParameterError naming the field for a value the vendor's
        webhook refuses."""
        limits = (container.get("resources") or {}).get("limits") or {}
        return ContainerMutation(bool(self.count_resource) and self.count_resource in limits)

    # -- node devices

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """GetNodeDevices and CheckHealth. Default: the register annotation in either
        of HAMi's formats, the devices whose type names the vendor, unhealthy
        when the generic handshake says the device plugin is gone."""
        if self.register_key is None:
            raise NotImplementedError(f"{self.name}: a capacity-based vendor reads its own devices")
        annotations = annotations_of(node)
        register = annotations.get(self.register_key)
        if register is None:
            return VendorNodeDevices(self.name)
        try:
            decoded = self.decode_register(register)
        except AnnotationDecodeError as error:
            return VendorNodeDevices(self.name, (), register, f"{NODE_UNREGISTERED}: {error}")
        if not decoded and self.empty_register_is_unregistered:
            problem = f"{NODE_UNREGISTERED}: annotation {self.register_key}: no devices registered"
            return VendorNodeDevices(self.name, (), register, problem)
        healthy = not self.plugin_gone(node, now, handshake_timeout)
        devices = tuple(
            engine_device(device, healthy)
            for device in decoded
            if self.adapter.matches(device.type)
        )
        return VendorNodeDevices(self.name, devices, register, "", healthy)

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        """The register annotation's devices; AnnotationDecodeError when unreadable."""
        assert self.register_key is not None
        return decode_node_devices(value, self.register_key)

    def plugin_gone(self, node: Mapping[str, Any], now: datetime, timeout: timedelta) -> bool:
        """CheckHealth: the generic handshake rule on this vendor's key and count."""
        if self.handshake_key is None:
            return False
        handshake = annotations_of(node).get(self.handshake_key)
        allocatable = node_quantity(node, "allocatable", self.count_resource)
        return handshake_gone(handshake, allocatable, now, timeout)

    # -- bind

    def needs_lock(self, request: PodRequest) -> bool:
        """LockNode locks only when an app container (not an init container) asks
        for this vendor, and only for vendors that lock at all."""
        if self.lock.kind is LockKind.NONE:
            return False
        return any(r.vendor == self.name and r.count > 0 for ctr in request.containers for r in ctr)

    # -- pod annotations

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """PatchAnnotations: both keys carry `EncodePodSingleDevice` of the pod's grants
        of this vendor, one entry per container (init first, empties kept), when
        the pod has any. The default reads nothing of `context`."""
        devices = self.container_devices(containers)
        if not any(devices):
            return {}
        encoded = encode_pod_devices(devices)
        result = {self.allocated_key: encoded}
        if self.to_allocate_key:
            result = {self.to_allocate_key: encoded, **result}
        return result

    def container_devices(self, containers: Sequence[ContainerGrants]) -> PodDevices:
        """The grants of this vendor as HAMi's ContainerDevices, per container."""
        return [
            [
                ContainerDevice(
                    grant.uuid, grant.device_type or self.name, grant.memory_mib, grant.cores
                )
                for grant in container
                if grant.vendor == self.name
            ]
            for container in containers
        ]

    def usage_tag(self, annotations: Mapping[str, str], grant: Grant) -> str:
        """The `Grant.tag` of one grant of a pod already holding this vendor's devices,
        from the pod's annotations: what later Fits must know of it. Default: nothing."""
        return ""

    def allocated_devices(self, annotations: Mapping[str, str]) -> PodDevices | None:
        """What the pod holds of this vendor per its allocated key (None: no key).
        AnnotationDecodeError when the value is malformed."""
        value = annotations.get(self.allocated_key)
        if not value:
            return None
        return decode_pod_devices(value, self.allocated_key)


@dataclass(frozen=True, slots=True)
class BackendFamily:
    """One `device-config.yaml` section and the backends it configures.

    `model` validates the section (a pydantic model, or a list of them);
    `build` turns the validated section into backends (one per chip for
    Iluvatar and Ascend); `default` is the section in HAMi's default config
    (None: not in it); `enable_flag` names the scheduler flag without which
    the family stays off; `always` keeps the family on without its section.
    """

    section: str
    model: Any
    build: Callable[[Any], tuple[VendorBackend, ...]]
    default: Any = None
    enable_flag: str | None = None
    always: bool = False
    name: str = ""
    """Tells apart families that share one section (HAMi's `enflame:` configures GCU
    and DRS, `metax:` GPU and sGPU); empty: the section's name."""

    @property
    def key(self) -> str:
        """Where the family's validated section is kept (`read_sections`)."""
        return self.name or self.section
