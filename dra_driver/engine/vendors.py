"""Vendor adapters: what differs between HAMi's device families.

The fit and score rules are shared; an adapter names the vendor's request type,
its Kubernetes resource names and annotation keys, and how a registered device
type is recognised. Adding one of HAMi's other vendors is one more instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from api import hami_annotations as keys
from dra_driver.errors import InvalidParameterError


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
    """One device family. `name` is HAMi's request Type (e.g. `NVIDIA`)."""

    name: str
    common_word: str
    resources: ResourceNames
    annotations: AnnotationKeys
    memory_factor: int = 1
    default_count: int = 1
    default_memory_mib: int = 0
    default_cores: int = 0

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
)


class VendorRegistry:
    """The vendors a deployment enables, looked up by request type."""

    def __init__(self, vendors: Iterable[VendorAdapter] = (NVIDIA, MOCK)) -> None:
        self._by_name: Mapping[str, VendorAdapter] = {vendor.name: vendor for vendor in vendors}

    def __iter__(self):
        return iter(self._by_name.values())

    def get(self, name: str) -> VendorAdapter:
        try:
            return self._by_name[name]
        except KeyError:
            raise InvalidParameterError(
                "vendor", f"unknown vendor {name!r}; known: {', '.join(sorted(self._by_name))}"
            ) from None
