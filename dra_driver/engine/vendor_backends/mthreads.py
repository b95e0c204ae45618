"""Moore Threads (request Type `Mthreads`) and the `mthreads:` section of device-config.yaml.

Where it differs from NVIDIA (reference/hami-vendors.md, HAMi's
`pkg/device/mthreads`): the memory resource counts 512 MiB units, no core
amount means 0, and memory and cores are **divided by the count** (a
container's amounts are for all its cards together); the webhook rewrites
the limits (more than one card: 16 cores and 96 memory units per card and
the pod annotation `mthreads.com/request-gpu-num`; one card without memory:
16 and 96; one card with memory: one of 2, 4, 8, 16, 32, 64, 96); the
devices are sized from `node.status.capacity` (one card per 16 sgpu-core
units), always healthy, no handshake; the uuid pair is under `mthreads.ai/`;
the Fit is the standard one (no quota) plus HAMi's customFilterRule that
keeps a pod on one card; there is no node lock; and the pod annotations are
only the allocated key, `mthreads.com/gpu-index`, `mthreads.com/predicate-time`
and `mthreads.com/predicate-node`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from decimal import ROUND_CEILING
from functools import partial
from typing import Any

from api import hami_annotations as keys
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.fit import fit_request
from dra_driver.engine.grants import ContainerGrants
from dra_driver.engine.model import Device
from dra_driver.engine.requests import DeviceRequest
from dra_driver.engine.vendor_backends.adapters import ResourceSection, reading_with, vendor_keys
from dra_driver.engine.vendor_backends.base import (
    NO_LOCK,
    NO_PATCH_CONTEXT,
    BackendFamily,
    ContainerMutation,
    PatchContext,
    VendorBackend,
    VendorNodeDevices,
    sized_cards,
)
from dra_driver.engine.vendor_backends.reading import (
    INT32_MAX,
    as_int64,
    read_sized_request,
    resource_value,
)
from dra_driver.engine.vendors import VendorAdapter
from dra_driver.errors import InvalidParameterError

MTHREADS = "Mthreads"
MEMORY_FACTOR = 512
"""MiB per `mthreads.com/sgpu-memory` unit."""
CORES_PER_CARD = 16
MEMORY_UNITS_PER_CARD = 96
SHARES_PER_CARD = 100
LEGAL_MEMORY_UNITS = (2, 4, 8, 16, 32, 64, 96)
REQUEST_GPU_NUM = "mthreads.com/request-gpu-num"
GPU_INDEX = "mthreads.com/gpu-index"
PREDICATE_TIME = "mthreads.com/predicate-time"
PREDICATE_NODE = "mthreads.com/predicate-node"


class MthreadsConfig(ResourceSection):
    """The `mthreads:` section (Go `MthreadsConfig`)."""


DEFAULT_SECTION = {
    "resourceCountName": "mthreads.com/vgpu",
    "resourceMemoryName": "mthreads.com/sgpu-memory",
    "resourceCoreName": "mthreads.com/sgpu-core",
}


def one_card_per_pod(device: Device, earlier: Sequence[ContainerGrants]) -> bool:
    """HAMi's customFilterRule (Mthreads, Metax GPU): every device the pod already
    holds of this vendor on the node is this one."""
    return all(
        grant.uuid == device.id
        for container in earlier
        for grant in container
        if grant.vendor == device.type
    )


def adapter(config: MthreadsConfig) -> VendorAdapter:
    """The engine's view: the per-card share reading and the one-card Fit."""
    vendor = VendorAdapter(
        name=MTHREADS,
        common_word=MTHREADS,
        resources=config.resources(),
        annotations=vendor_keys(
            use_uuids="mthreads.ai/use-gpuuuid",
            no_use_uuids="mthreads.ai/nouse-gpuuuid",
            to_allocate="hami.io/mthreads-vgpu-devices-to-allocate",
            allocated="hami.io/mthreads-vgpu-devices-allocated",
        ),
        memory_factor=MEMORY_FACTOR,
        default_count=0,
        fit=partial(fit_request, custom_rule=one_card_per_pod),
    )
    return reading_with(vendor, read_mthreads_request)


def read_mthreads_request(
    vendor: VendorAdapter,
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    where: str,
    dropped: list[str] | None,
) -> DeviceRequest | None:
    """The sized reading, the memory and cores then split evenly over the count
    (HAMi asks each card for its share); a count beyond int32 asks nothing."""
    request = read_sized_request(vendor, container, annotations, where, dropped, default_cores=0)
    if request is None or request.count > INT32_MAX:
        return None
    return replace(
        request,
        memory_mib=request.memory_mib // request.count,
        cores=int(request.cores / request.count),
    )


def _value(raw: Any) -> int:
    """Go's `Quantity.Value()`: the value rounded up to a whole number (0 when unreadable)."""
    try:
        return int(parse_quantity(str(raw)).to_integral_value(rounding=ROUND_CEILING))
    except QuantityError:
        return 0


class MthreadsBackend(VendorBackend):
    """HAMi's Mthreads backend with one `mthreads:` section's names."""

    def __init__(self, config: MthreadsConfig | None = None) -> None:
        self.config = config or MthreadsConfig.model_validate(DEFAULT_SECTION)
        super().__init__(
            adapter(self.config),
            register_key=None,
            handshake_key=None,
            lock=NO_LOCK,
            to_allocate_key="",
        )

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """MutateAdmission: validate the count and set the per-card core and memory limits."""
        names = self.adapter.resources
        raw = resource_value(container, names.count)
        if raw is None:
            return ContainerMutation(False)
        count = _value(raw)
        if count <= 0:
            raise InvalidParameterError(
                f"{where}.resources.limits.{names.count}", f"{names.count} must be greater than 0"
            )
        per_card = {
            names.cores: str(count * CORES_PER_CARD),
            names.memory: str(count * MEMORY_UNITS_PER_CARD),
        }
        if count > 1:
            return ContainerMutation(
                True, limits=per_card, pod_annotations={REQUEST_GPU_NUM: str(count)}
            )
        limits = (container.get("resources") or {}).get("limits") or {}
        if names.memory not in limits:
            return ContainerMutation(True, limits=per_card)
        if as_int64(limits[names.memory]) not in LEGAL_MEMORY_UNITS:
            raise InvalidParameterError(
                f"{where}.resources.limits.{names.memory}",
                "sGPU memory request value is invalid, valid values are "
                f"[{', '.join(map(str, LEGAL_MEMORY_UNITS))}]",
            )
        return ContainerMutation(True)

    def node_devices(
        self, node: Mapping[str, Any], now: datetime, handshake_timeout: timedelta
    ) -> VendorNodeDevices:
        """GetNodeDevices: one card per 16 sgpu-core units of capacity, each with
        `memory x 512 x 16 / cores` MiB and 16 cores."""
        return sized_cards(node, self.adapter, "mthreads", CORES_PER_CARD, SHARES_PER_CARD)

    def pod_annotations(
        self, containers: Sequence[ContainerGrants], context: PatchContext = NO_PATCH_CONTEXT
    ) -> dict[str, str]:
        """The allocated key, the device indexes of the last container with devices,
        and when (the nanoseconds of `hami.io/vgpu-time`) and where it was placed."""
        result = super().pod_annotations(containers)
        if not result:
            return result
        assigned = context.assigned
        last = [g for g in containers if any(x.vendor == self.name for x in g)][-1]
        result[GPU_INDEX] = ",".join(str(g.index) for g in last if g.vendor == self.name)
        seconds = as_int64(assigned.get(keys.VGPU_TIME)) or 0
        result[PREDICATE_TIME] = str(seconds * 1_000_000_000)
        result[PREDICATE_NODE] = assigned.get(keys.VGPU_NODE, "")
        return result


FAMILY = BackendFamily(
    section="mthreads",
    model=MthreadsConfig,
    build=lambda config: (MthreadsBackend(config),),
    default=DEFAULT_SECTION,
)
