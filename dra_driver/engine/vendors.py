"""Vendor adapters: what differs between HAMi's device families, as the engine sees it.

An adapter names the vendor's request type, its Kubernetes resource names and
annotation keys, and how a registered device type is recognised. Most of
HAMi's vendors share NVIDIA's request reading and its "standard Fit"; the few
that differ plug in a hook (`read_request`, `fit`, `charge_slots`, `score`)
instead of a copy of the NVIDIA path. The legacy scheduler's side of a vendor
(node and pod annotations, webhook, lock) is its backend in
`dra_driver.engine.vendor_backends`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from api import hami_annotations as keys
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Node
from dra_driver.engine.policy import GpuPolicy
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.requests import ContainerRequest, DeviceRequest, ScoringWeights
from dra_driver.errors import InvalidParameterError


class RequestReader(Protocol):
    """A vendor's GenerateResourceRequests: one container's request of this vendor.

    `container` is the container object as the API returns it, `annotations`
    the pod's; `where` is the container's field path for error messages. Returns
    None when the container asks for nothing of this vendor, or when HAMi drops
    the request (then the reason, prefixed with the field, goes to `dropped`).
    A value HAMi's webhook refuses raises InvalidParameterError naming the field.
    """

    def __call__(
        self,
        container: Mapping[str, Any],
        annotations: Mapping[str, str],
        where: str,
        dropped: list[str] | None,
    ) -> DeviceRequest | None: ...


class DeviceFit(Protocol):
    """A vendor's Fit over its devices on one node, sorted by policy (Fit walks the
    tail first): the grants, or None and HAMi's `k/N Reason` string. It reads
    the slots and must not change them; the caller charges the grants."""

    def __call__(
        self,
        slots: Sequence[Slot],
        request: DeviceRequest,
        ctx: FitContext,
        earlier: Sequence[ContainerGrants],
    ) -> tuple[list[Grant] | None, str]: ...


class SlotCharge(Protocol):
    """A vendor's AddResourceUsage where a grant takes more than HAMi's one slot
    (`Used++`): the card's `used` after one grant of `request`, Fit having seen
    `slots`. Memory and cores are charged as for every vendor."""

    def __call__(self, used: int, slots: Sequence[Slot], request: DeviceRequest) -> int: ...


class NodeScorer(Protocol):
    """A vendor's ScoreNode: added to the node's score once the pod fits there.

    `grants` are the pod's grants of this vendor per container (init first),
    `container_requests` the pod's requests in the same order, `node_policy`
    `binpack` or `spread`. HAMi's default (and NVIDIA's) is 0.
    """

    def __call__(
        self,
        node: Node,
        grants: Sequence[ContainerGrants],
        container_requests: Sequence[ContainerRequest],
        node_policy: str,
    ) -> float: ...


class UsageScorer(Protocol):
    """A ScoreNode that also reads the node's devices with their usage before the pod
    (`slots`: who is on each card, which cards are free), e.g. Metax sGPU's
    online load and MetaLink zones. Otherwise as `NodeScorer`."""

    def __call__(
        self,
        slots: Sequence[Slot],
        grants: Sequence[ContainerGrants],
        container_requests: Sequence[ContainerRequest],
        node_policy: str,
    ) -> float: ...


@dataclass(frozen=True, slots=True)
class ResourceNames:
    """Extended-resource names a pod uses for this vendor (HAMi's NvidiaConfig).

    An empty name means the deployment leaves that resource unconfigured, as
    HAMi's config allows; requests then never read it.
    """

    count: str
    memory: str
    memory_percentage: str
    cores: str
    priority: str | None = None


@dataclass(frozen=True, slots=True)
class AnnotationKeys:
    """Pod annotations that filter this vendor's devices, and where results go."""

    use_types: str
    no_use_types: str
    use_uuids: str
    no_use_uuids: str
    numa_bind: str | None
    mode: str | None
    devices_to_allocate: str
    devices_allocated: str


@dataclass(frozen=True, slots=True)
class VendorAdapter:
    """One device family. `name` is HAMi's request Type (e.g. `NVIDIA`).

    `default_count`, `default_memory_mib` and `default_cores` are what NVIDIA's
    request reading and webhook fill in; a vendor with its own `read_request`
    applies its own defaults there. `topology_aware`: the `topology-aware` GPU
    policy applies (NVIDIA's Fit honours it; the other vendors' Fits ignore it).
    """

    name: str
    common_word: str
    resources: ResourceNames
    annotations: AnnotationKeys
    memory_factor: int = 1
    default_count: int = 1
    default_memory_mib: int = 0
    default_cores: int = 0
    topology_aware: bool = False
    read_request: RequestReader | None = None
    """None: NVIDIA's reading (`dra_driver.objects.pod_workloads`), webhook defaults included."""
    fit: DeviceFit | None = None
    """None: HAMi's standard Fit (`dra_driver.engine.fit.fit_request`)."""
    score: NodeScorer | None = None
    """None: ScoreNode is 0, as for NVIDIA."""
    usage_score: UsageScorer | None = None
    """None: no ScoreNode over the usage before the pod."""
    charge_slots: SlotCharge | None = None
    """None: each grant takes one of its card's slots while the pod is fitted."""

    def matches(self, device_type: str) -> bool:
        """HAMi's getNodeResources: the device type contains the vendor name."""
        return self.name.lower() in device_type.lower()


NVIDIA = VendorAdapter(
    name=keys.NVIDIA_DEVICE_TYPE,
    common_word="GPU",
    resources=ResourceNames(
        count="nvidia.com/gpu",
        memory="nvidia.com/gpumem",
        memory_percentage="nvidia.com/gpumem-percentage",
        cores="nvidia.com/gpucores",
        priority="nvidia.com/priority",
    ),
    annotations=AnnotationKeys(
        use_types=keys.USE_GPU_TYPE,
        no_use_types=keys.NO_USE_GPU_TYPE,
        use_uuids=keys.USE_GPU_UUID,
        no_use_uuids=keys.NO_USE_GPU_UUID,
        numa_bind=keys.NUMA_BIND,
        mode=keys.VGPU_MODE,
        devices_to_allocate=keys.VGPU_DEVICES_TO_ALLOCATE,
        devices_allocated=keys.VGPU_DEVICES_ALLOCATED,
    ),
    topology_aware=True,
)

MOCK = VendorAdapter(
    name="MOCK",
    common_word="MOCK",
    resources=ResourceNames(
        count="mock.hami.io/gpu",
        memory="mock.hami.io/gpumem",
        memory_percentage="mock.hami.io/gpumem-percentage",
        cores="mock.hami.io/gpucores",
    ),
    annotations=AnnotationKeys(
        use_types="mock.hami.io/use-gputype",
        no_use_types="mock.hami.io/nouse-gputype",
        use_uuids="mock.hami.io/use-gpuuuid",
        no_use_uuids="mock.hami.io/nouse-gpuuuid",
        numa_bind="mock.hami.io/numa-bind",
        mode=None,
        devices_to_allocate="hami.io/mock-devices-to-allocate",
        devices_allocated="hami.io/mock-devices-allocated",
    ),
    topology_aware=True,
)


class VendorRegistry:
    """The vendors a deployment enables, looked up by request type."""

    def __init__(self, vendors: Iterable[VendorAdapter] = (NVIDIA, MOCK)) -> None:
        self._by_name: Mapping[str, VendorAdapter] = {vendor.name: vendor for vendor in vendors}

    def __iter__(self):
        return iter(self._by_name.values())

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def get(self, name: str) -> VendorAdapter:
        try:
            return self._by_name[name]
        except KeyError:
            raise InvalidParameterError(
                "vendor", f"unknown vendor {name!r}; known: {', '.join(sorted(self._by_name))}"
            ) from None


@dataclass(frozen=True, slots=True)
class FitContext:
    """What stays fixed while one pod is fitted onto one node. It lives beside the
    adapters because it carries their registry and every vendor's Fit hook takes it."""

    node: Node
    namespace: str
    policy: GpuPolicy
    weights: ScoringWeights
    vendors: VendorRegistry
    quota: QuotaLedger | None
