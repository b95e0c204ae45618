"""The engine's vendors for DRA claims: one adapter per family of `dra_vendors`.

A DRA claim names a DeviceClass, and the class a family; the engine then
needs an adapter whose request type is the family's. Where the legacy
scheduler has a backend of that request type (HAMi's default device config
with every `--enable-*` flag), its adapter is used, so namespace quotas read
the same resource names and memory factor in both modes. Other families
(Ascend and Iluvatar are configured per chip in legacy mode, with per-chip
request types) get an adapter with no resource names: their claims are
fitted and scored the same, they just have no HAMi quota resources.

DRA devices are published alike for every family (memory, cores, shares
capacity, the family's rules as request policies; `kubeletplugin.slices`), so
every family is fitted by HAMi's standard Fit: a legacy backend's own Fit,
score or request reading (topology graphs, bitmasks, customInfo, pod
resources) reads node and pod annotations a DRA device does not have, and
is left to legacy mode. NVIDIA's adapter is the engine's own, unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from dra_driver.engine.vendor_backends.registry import ENABLE_FLAGS, build_backends
from dra_driver.engine.vendors import (
    MOCK,
    NVIDIA,
    AnnotationKeys,
    ResourceNames,
    VendorAdapter,
    VendorRegistry,
)
from dra_driver.objects.dra_vendors import DRA_VENDORS, DraVendor

NO_RESOURCES = ResourceNames(count="", memory="", memory_percentage="", cores="")
NO_ANNOTATIONS = AnnotationKeys(
    use_types="",
    no_use_types="",
    use_uuids="",
    no_use_uuids="",
    numa_bind=None,
    mode=None,
    devices_to_allocate="",
    devices_allocated="",
)


def dra_adapter(vendor: DraVendor, legacy: VendorAdapter | None) -> VendorAdapter:
    """The family's adapter: the legacy one of its request type without its own Fit, score
    and request reading, else one with no resource names."""
    if vendor.request_type == NVIDIA.name:
        return NVIDIA
    if legacy is not None:
        return replace(legacy, read_request=None, fit=None, score=None)
    return VendorAdapter(
        name=vendor.request_type,
        common_word=vendor.request_type,
        resources=NO_RESOURCES,
        annotations=NO_ANNOTATIONS,
    )


@cache
def dra_vendor_registry() -> VendorRegistry:
    """Every family's adapter plus the engine's MOCK test vendor (built once: pure data)."""
    legacy = {adapter.name: adapter for adapter in build_backends(None, ENABLE_FLAGS).vendors()}
    adapters = [dra_adapter(vendor, legacy.get(vendor.request_type)) for vendor in DRA_VENDORS]
    return VendorRegistry([*adapters, MOCK])
