"""The pieces of a `VendorAdapter` that HAMi's non-NVIDIA vendors build alike.

NVIDIA's adapter names a memory-percentage resource, a NUMA-bind key and a
mode key; the other vendors configure none of them (Ascend's mode aside), so
their resource names and annotation keys differ only in the few names each
vendor sets. Their config sections mostly share the three resource-name keys
too, and a vendor reading its own requests needs its adapter handed back to
the reader (for the names, the memory factor and the filter keys). One
builder for each, so a vendor module states only what is its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendors import AnnotationKeys, ResourceNames, VendorAdapter

AdapterReader = Callable[
    [VendorAdapter, Mapping[str, Any], Mapping[str, str], str, list[str] | None],
    DeviceRequest | None,
]
"""A request reading that takes the vendor's adapter first, then `RequestReader`'s arguments."""


def vendor_resources(count: str, memory: str = "", cores: str = "") -> ResourceNames:
    """A vendor's resource names; no vendor but NVIDIA has a memory-percentage resource."""
    return ResourceNames(count=count, memory=memory, memory_percentage="", cores=cores)


def vendor_keys(
    *,
    to_allocate: str,
    allocated: str,
    use_uuids: str = "",
    no_use_uuids: str = "",
    use_types: str = "",
    no_use_types: str = "",
    mode: str | None = None,
) -> AnnotationKeys:
    """A vendor's pod annotation keys (empty: the vendor has none of that kind); no
    vendor but NVIDIA has a NUMA-bind key, and most have neither type filters nor
    a mode key."""
    return AnnotationKeys(
        use_types=use_types,
        no_use_types=no_use_types,
        use_uuids=use_uuids,
        no_use_uuids=no_use_uuids,
        numa_bind=None,
        mode=mode,
        devices_to_allocate=to_allocate,
        devices_allocated=allocated,
    )


def chip_keys(word: str, mode: str | None = None) -> AnnotationKeys:
    """The keys HAMi derives from a chip's common word (Ascend and Iluvatar chips)."""
    return vendor_keys(
        use_uuids=f"hami.io/use-{word}-uuid",
        no_use_uuids=f"hami.io/no-use-{word}-uuid",
        to_allocate=f"hami.io/{word}-devices-to-allocate",
        allocated=f"hami.io/{word}-devices-allocated",
        mode=mode,
    )


def reading_with(adapter: VendorAdapter, reader: AdapterReader) -> VendorAdapter:
    """The adapter whose `read_request` is `reader` over this adapter (as it is
    before the reader is set: the reader needs its names, never itself)."""

    def read(
        container: Mapping[str, Any],
        annotations: Mapping[str, str],
        where: str,
        dropped: list[str] | None,
    ) -> DeviceRequest | None:
        return reader(adapter, container, annotations, where, dropped)

    return replace(adapter, read_request=read)


class ConfigSection(BaseModel):
    """A `device-config.yaml` section (or entry) read as HAMi's Go structs read it:
    keys it does not know are ignored, a key is its camelCase alias (or the field's
    name), and the value is frozen once read."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)


class PinnedSection(ConfigSection):
    """A section whose resource names must be HAMi's defaults, because the backend
    serves only those (AWS Neuron, Enflame DRS, Kunlun): each field is a Literal
    of its default, so a section naming another resource is refused."""


class ResourceSection(ConfigSection):
    """A config section naming a vendor's count, memory and core resources (HAMi's
    `resourceCountName`, `resourceMemoryName`, `resourceCoreName`); a key left out
    is empty, as in Go."""

    resource_count_name: str = Field("", alias="resourceCountName")
    resource_memory_name: str = Field("", alias="resourceMemoryName")
    resource_core_name: str = Field("", alias="resourceCoreName")

    def resources(self) -> ResourceNames:
        """The section's names as the adapter's resources."""
        return vendor_resources(
            self.resource_count_name, self.resource_memory_name, self.resource_core_name
        )
