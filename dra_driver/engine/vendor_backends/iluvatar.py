"""Iluvatar (one backend per `iluvatars[]` chip) and its `--enable-iluvatar` flag.

HAMi's `pkg/device/iluvatar` (reference/hami-vendors.md): per chip with
commonWord `<cw>` (e.g. `MR-V100`, the request Type) the resources
`iluvatar.ai/<cw>-vgpu`, `.vMem` (units of 256 MiB) and `.vCore`; the
register `hami.io/node-<cw>-register` in the legacy colon list only; the
generic handshake on `hami.io/node-handshake-<cw>`; no type filter, the uuid
filter `hami.io/use-<cw>-uuid` / `hami.io/no-use-<cw>-uuid`; the standard
Fit, ScoreNode 0, the shared lock and the pod keys
`hami.io/<cw>-devices-to-allocate` / `-allocated`. It differs from NVIDIA in
defaulting cores to 0 (not exclusive) and in its webhook: a count above 1
sets the core limit to 100 per card, and a named container gets
`SOL_CONTINER_NAME` (HAMi's spelling, kept for its device plugin).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from pydantic import Field

from api.hami_annotations import RegisteredDevice, decode_node_devices_legacy
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.vendor_backends.adapters import (
    ResourceSection,
    chip_keys,
    reading_with,
)
from dra_driver.engine.vendor_backends.base import (
    BackendFamily,
    ContainerMutation,
    VendorBackend,
)
from dra_driver.engine.vendor_backends.reading import read_sized_request
from dra_driver.engine.vendors import VendorAdapter

MEMORY_FACTOR = 256
"""One vMem unit is 256 MiB."""
CONTAINER_NAME_ENV = "SOL_CONTINER_NAME"
ENABLE_FLAG = "enable-iluvatar"
FULL_CARD_CORES = 100


class IluvatarChip(ResourceSection):
    """One `iluvatars:` entry (Go `IluvatarConfig`): its chip's resource names, and
    its common word, the request Type and the `<cw>` of its annotation keys."""

    common_word: str = Field("", alias="commonWord")
    chip_name: str = Field("", alias="chipName")


HAMI_DEFAULT = [
    {
        "chipName": chip,
        "commonWord": chip,
        "resourceCountName": f"iluvatar.ai/{chip}-vgpu",
        "resourceMemoryName": f"iluvatar.ai/{chip}.vMem",
        "resourceCoreName": f"iluvatar.ai/{chip}.vCore",
    }
    for chip in ("MR-V100", "MR-V50", "BI-V150", "BI-V100")
]
"""The `iluvatars:` list of HAMi's built-in default config (InitDefaultDevices)."""


def chip_adapter(chip: IluvatarChip) -> VendorAdapter:
    """The engine's adapter for one chip."""
    word = chip.common_word
    adapter = VendorAdapter(
        name=word,
        common_word=word,
        resources=chip.resources(),
        annotations=chip_keys(word),
        memory_factor=MEMORY_FACTOR,
        default_count=0,
    )
    return reading_with(adapter, partial(read_sized_request, default_cores=0))


def _rounded_up(raw: Any) -> int:
    """Go's `Quantity.Value()`: the value rounded up to a whole number."""
    try:
        value = parse_quantity(str(raw))
    except QuantityError:
        return 0
    return int(value.to_integral_value(rounding="ROUND_CEILING"))


class IluvatarBackend(VendorBackend):
    """One Iluvatar chip's backend."""

    def __init__(self, chip: IluvatarChip) -> None:
        word = chip.common_word
        super().__init__(
            chip_adapter(chip),
            register_key=f"hami.io/node-{word}-register",
            handshake_key=f"hami.io/node-handshake-{word}",
        )

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        """GetNodeDevices: DecodeNodeDevices only."""
        assert self.register_key is not None
        return decode_node_devices_legacy(value, self.register_key)

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """With the count in limits: a count above 1 sets the core limit to 100 per
        card, and a named container without `SOL_CONTINER_NAME` gets it."""
        names = self.adapter.resources
        limits = (container.get("resources") or {}).get("limits") or {}
        if not names.count or names.count not in limits:
            return ContainerMutation(False)
        count = _rounded_up(limits[names.count])
        set_limits = (
            {names.cores: str(FULL_CARD_CORES * count)} if count > 1 and names.cores else {}
        )
        name = container.get("name") or ""
        has_env = any(item.get("name") == CONTAINER_NAME_ENV for item in container.get("env") or [])
        env = ({"name": CONTAINER_NAME_ENV, "value": name},) if name and not has_env else ()
        return ContainerMutation(True, limits=set_limits, env=env)


FAMILY = BackendFamily(
    section="iluvatars",
    model=list[IluvatarChip],
    build=lambda chips: tuple(IluvatarBackend(chip) for chip in chips),
    default=HAMI_DEFAULT,
    enable_flag=ENABLE_FLAG,
)
