"""Enflame whole GCUs (request Type `GCU`) from the `enflame:` section of device-config.yaml.

Where it differs from NVIDIA (reference/hami-vendors.md, HAMi's
`pkg/device/enflame/gcu.go`): a pod asks for a count of whole cards, read
as `{count, memory 100, 100 %, 100 cores}`; the devices are one per unit of
`node.status.capacity` (id `<node>-GCU-<i>`, 100 "MiB", 100 cores, one
share), healthy while that capacity is above 0, with no handshake; the Fit
is exclusive (health, type, then any use of the card refuses it:
`ExclusiveDeviceAllocateConflict`) with no uuid or type filter; no lock.
The DRS backend of the same section (`Enflame`) is a vendor of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from pydantic import Field

from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends.adapters import ConfigSection, vendor_keys, vendor_resources
from dra_driver.engine.vendor_backends.base import (
    NO_LOCK,
    BackendFamily,
    VendorBackend,
    VendorNodeDevices,
    whole_cards,
)
from dra_driver.engine.vendors import FitContext, VendorAdapter

GCU = "GCU"
CARD_SIZE = 100
"""The card's memory and cores as registered, and what one grant takes of each."""


class EnflameGcuConfig(ConfigSection):
    """The whole-card key of the `enflame:` section (Go `EnflameConfig.ResourceNameGCU`)."""

    resource_name_gcu: str = Field("", alias="resourceNameGCU")


def fit_exclusive(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
) -> tuple[list[Grant] | None, str]:
    """HAMi's GCU Fit: healthy, the GCU type, and unused; the grant takes the request's
    memory and cores (100 each)."""
    failed: Counter[str] = Counter()
    picks: list[Grant] = []
    for slot in reversed(slots):
        device = slot.device
        if not device.healthy:
            failed[reasons.CARD_NOT_HEALTH] += 1
        elif request.vendor != GCU:
            failed[reasons.CARD_TYPE_MISMATCH] += 1
        elif slot.used > 0:
            failed[reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
        else:
            grant = Grant(device.id, GCU, request.memory_mib, request.cores, device.index)
            picks.append(grant)
            if len(picks) == request.count:
                return picks, ""
    if picks:
        failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picks)
    return None, reasons.format_reason(failed, len(slots))


def adapter(config: EnflameGcuConfig) -> VendorAdapter:
    """The engine's view: NVIDIA's reading with a fixed 100 memory and cores, exclusive Fit."""
    return VendorAdapter(
        name=GCU,
        common_word=GCU,
        resources=vendor_resources(config.resource_name_gcu),
        annotations=vendor_keys(
            to_allocate="hami.io/enflame-gcu-devices-to-allocate",
            allocated="hami.io/enflame-gcu-devices-allocated",
        ),
        default_count=0,
        default_memory_mib=CARD_SIZE,
        default_cores=CARD_SIZE,
        fit=fit_exclusive,
    )


class EnflameGcuBackend(VendorBackend):
    """HAMi's Enflame GCU backend with one `enflame:` section's GCU name."""

    def __init__(self, config: EnflameGcuConfig) -> None:
        self.config = config
        super().__init__(adapter(config), register_key=None, handshake_key=None, lock=NO_LOCK)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """GetNodeDevices and CheckHealth: one whole card per unit of capacity."""
        return whole_cards(node, self.adapter, GCU, memory_mib=CARD_SIZE, cores=CARD_SIZE)


FAMILY = BackendFamily(
    section="enflame",
    model=EnflameGcuConfig,
    build=lambda config: (EnflameGcuBackend(config),),
    name="enflame-gcu",
)
