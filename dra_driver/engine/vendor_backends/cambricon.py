"""Cambricon MLU (request Type `MLU`) and the `cambricon:` section of device-config.yaml.

Where it differs from NVIDIA (reference/hami-vendors.md, HAMi's
`pkg/device/cambricon`): the memory resource counts 256 MiB units and no
core amount means the whole card (100); the devices are not registered in
an annotation but sized from `node.status.capacity` (one card per 100 vcore
units, the vmemory spread evenly), with no handshake and always healthy;
the only filter is the uuid pair `cambricon.com/use-gpuuuid` /
`cambricon.com/nouse-gpuuuid`; the Fit is the standard one, namespace
ResourceQuota included (memory limit x 256); Bind takes Cambricon's **own**
lock, `cambricon.com/dsmlu.lock`, a bare RFC 3339 time with no owner that
another bind may take over after 2 minutes; and the pod annotations carry,
besides both device keys, `CAMBRICON_DSMLU_ASSIGNED=false` and
`CAMBRICON_DSMLU_PROFILE=<index>_<cores>_<memory/256>` of the first device
of the first container that has one, which Cambricon's device plugin reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from dra_driver.engine.grants import ContainerGrants
from dra_driver.engine.vendor_backends.adapters import ResourceSection, reading_with, vendor_keys
from dra_driver.engine.vendor_backends.base import (
    NO_PATCH_CONTEXT,
    BackendFamily,
    LockKind,
    LockRule,
    PatchContext,
    VendorBackend,
    VendorNodeDevices,
    sized_cards,
)
from dra_driver.engine.vendor_backends.reading import read_sized_request
from dra_driver.engine.vendors import VendorAdapter

MLU = "MLU"
"""HAMi's request Type and common word for Cambricon MLUs."""
MEMORY_FACTOR = 256
"""MiB per `cambricon.com/mlu.smlu.vmemory` unit."""
CORES_PER_CARD = 100
"""vcore units per card, and each card's cores in percent."""
SHARES_PER_CARD = 100
USE_UUID = "cambricon.com/use-gpuuuid"
NO_USE_UUID = "cambricon.com/nouse-gpuuuid"
LOCK_KEY = "cambricon.com/dsmlu.lock"
LOCK_EXPIRY = timedelta(minutes=2)
ASSIGNED = "CAMBRICON_DSMLU_ASSIGNED"
PROFILE = "CAMBRICON_DSMLU_PROFILE"
"""Pod annotations (not env vars, despite their names) Cambricon's device plugin reads."""


class CambriconConfig(ResourceSection):
    """The `cambricon:` section (Go `CambriconConfig`)."""


DEFAULT_SECTION = {
    "resourceCountName": "cambricon.com/vmlu",
    "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
    "resourceCoreName": "cambricon.com/mlu.smlu.vcore",
}
"""HAMi's built-in default config (its flag default for the count is `cambricon.com/mlu`,
but InitDefaultDevices configures `cambricon.com/vmlu`)."""


def adapter(config: CambriconConfig) -> VendorAdapter:
    """The engine's view: standard Fit and score, Cambricon's request reading."""
    vendor = VendorAdapter(
        name=MLU,
        common_word=MLU,
        resources=config.resources(),
        annotations=vendor_keys(
            use_uuids=USE_UUID,
            no_use_uuids=NO_USE_UUID,
            to_allocate="hami.io/cambricon-mlu-devices-to-allocate",
            allocated="hami.io/cambricon-mlu-devices-allocated",
        ),
        memory_factor=MEMORY_FACTOR,
        default_count=0,
        default_cores=CORES_PER_CARD,
    )
    return reading_with(vendor, partial(read_sized_request, default_cores=CORES_PER_CARD))


class CambriconBackend(VendorBackend):
    """HAMi's Cambricon backend with one `cambricon:` section's names."""

    def __init__(self, config: CambriconConfig | None = None) -> None:
        self.config = config or CambriconConfig.model_validate(DEFAULT_SECTION)
        super().__init__(
            adapter(self.config),
            register_key=None,
            handshake_key=None,
            lock=LockRule(LockKind.OWN, LOCK_KEY, records_owner=False, expiry=LOCK_EXPIRY),
        )

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """GetNodeDevices: one card per 100 vcore units of capacity, each with
        `vmemory x 256 x 100 / vcore` MiB; no vcore capacity, no devices."""
        return sized_cards(node, self.adapter, "cambricon-mlu", CORES_PER_CARD, SHARES_PER_CARD)

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """Both device keys plus the dsmlu profile of the first device granted."""
        result = super().pod_annotations(containers)
        if not result:
            return result
        first = next(grant for ctr in containers for grant in ctr if grant.vendor == self.name)
        result[ASSIGNED] = "false"
        result[PROFILE] = f"{first.index}_{first.cores}_{first.memory_mib // MEMORY_FACTOR}"
        return result


FAMILY = BackendFamily(
    section="cambricon",
    model=CambriconConfig,
    build=lambda config: (CambriconBackend(config),),
    default=DEFAULT_SECTION,
)
