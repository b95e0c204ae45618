"""Every vendor backend, and how device-config.yaml and the flags select them.

HAMi's scheduler initialises every vendor of its device config
(`pkg/scheduler/config/config.go`, InitDevicesWithConfig): a section that is
present configures its vendor with the keys given (a key left out is empty,
so that resource is never read); a file without a section leaves the vendor
unconfigured; with no file at all, HAMi's built-in default config is used
(InitDefaultDevices). Some vendors also need a flag (`--enable-iluvatar`,
`--enable-ascend`). NVIDIA is always on, with HAMi's defaults when its
section is missing, as this scheduler has always read it.

To add a vendor, append its family to `FAMILIES`, one line per vendor module.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import TypeAdapter, ValidationError

from dra_driver.engine.vendor_backends import (
    amd,
    ascend,
    aws_neuron,
    biren,
    cambricon,
    enflame_drs,
    enflame_gcu,
    hygon,
    iluvatar,
    kunlun,
    metax_gpu,
    metax_sgpu,
    mthreads,
    nvidia,
    vastai,
)
from dra_driver.engine.vendor_backends.base import BackendFamily, VendorBackend
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError

FAMILIES: tuple[BackendFamily, ...] = (
    nvidia.FAMILY,
    cambricon.FAMILY,
    hygon.FAMILY,
    enflame_gcu.FAMILY,
    enflame_drs.FAMILY,
    mthreads.FAMILY,
    metax_gpu.FAMILY,
    metax_sgpu.FAMILY,
    kunlun.FAMILY,
    aws_neuron.FAMILY,
    amd.FAMILY,
    vastai.FAMILY,
    biren.FAMILY,
    ascend.FAMILY,
    iluvatar.FAMILY,
)
"""Every vendor, in the order HAMi initialises them; one line per vendor module."""

ENABLE_FLAGS: frozenset[str] = frozenset(f.enable_flag for f in FAMILIES if f.enable_flag)


class BackendRegistry:
    """The backends a deployment runs, by HAMi request Type, in registry order."""

    def __init__(self, backends: Iterable[VendorBackend]) -> None:
        self._by_name: dict[str, VendorBackend] = {}
        for backend in backends:
            if backend.name in self._by_name:
                raise InvalidParameterError(
                    "device config", f"two vendor backends use the request type {backend.name!r}"
                )
            self._by_name[backend.name] = backend

    def __iter__(self) -> Iterator[VendorBackend]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def get(self, name: str) -> VendorBackend | None:
        return self._by_name.get(name)

    def vendors(self) -> VendorRegistry:
        """The engine's adapters of these backends."""
        return VendorRegistry(backend.adapter for backend in self)


def read_sections(document: Any, source: str = "device config") -> dict[str, Any] | None:
    """Validate every vendor section of a loaded device-config document.

    None (no file) stays None: HAMi's default config applies. An error names
    `<source>: <section>.<key>` and the reason.
    """
    if document is None:
        return None
    if not isinstance(document, Mapping):
        raise InvalidParameterError(f"{source}: document", "expected a mapping of vendor sections")
    sections: dict[str, Any] = {}
    for family in FAMILIES:
        if family.section in document or family.always:
            sections[family.key] = _validate(family, document.get(family.section), source)
    return sections


def _validate(family: BackendFamily, section: Any, source: str) -> Any:
    try:
        return TypeAdapter(family.model).validate_python({} if section is None else section)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join([family.section, *(str(part) for part in first["loc"])])
        raise InvalidParameterError(f"{source}: {where}", first["msg"]) from None


def build_backends(
    sections: Mapping[str, Any] | None, enabled_flags: frozenset[str] = frozenset()
) -> BackendRegistry:
    """The backends of validated sections (None: HAMi's default config) and flags.

    An unknown flag is an error naming it, so a misspelt `--enable-*` is not silently
    ignored."""
    unknown = enabled_flags - ENABLE_FLAGS
    if unknown:
        raise InvalidParameterError(
            "enabled vendor flags",
            f"unknown {', '.join(sorted(unknown))}; known: {', '.join(sorted(ENABLE_FLAGS))}",
        )
    backends: list[VendorBackend] = []
    for family in FAMILIES:
        if family.enable_flag and family.enable_flag not in enabled_flags:
            continue
        if sections is None:
            if family.default is None and not family.always:
                continue
            config = _validate(family, family.default, "HAMi's default device config")
        elif family.key in sections:
            config = sections[family.key]
        else:
            continue
        backends.extend(family.build(config))
    return BackendRegistry(backends)
