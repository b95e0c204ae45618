"""Running a vendor's Fit hook on HAMi's `DeviceUsage` rows, for the vendor tests."""

from __future__ import annotations

from collections.abc import Sequence

from hami_vendor_cases import HamiDevice

from dra_driver.engine.grants import Grant, Slot
from dra_driver.engine.model import Device, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import DEFAULT_WEIGHTS, DeviceRequest
from dra_driver.engine.vendors import FitContext, VendorAdapter, VendorRegistry


def slots_of(devices: Sequence[HamiDevice]) -> list[Slot]:
    """HAMi's DeviceUsage rows as the engine's slots, in the same order."""
    return [
        Slot(
            Device(
                id=d.id,
                index=d.index,
                type=d.type,
                count=d.count,
                memory_mib=d.totalmem,
                cores=d.totalcore,
                numa=d.numa,
                healthy=d.health,
                custom_info=dict(d.custom_info),
            ),
            d.used,
            d.usedmem,
            d.usedcores,
        )
        for d in devices
    ]


def run_fit(
    adapter: VendorAdapter,
    devices: Sequence[HamiDevice],
    request: DeviceRequest,
    policy: str = "spread",
) -> tuple[list[Grant] | None, str]:
    """The adapter's Fit over the rows, under a GPU policy (HAMi's pod annotation)."""
    assert adapter.fit is not None
    slots = slots_of(devices)
    ctx = FitContext(
        Node("node", tuple(s.device for s in slots)),
        "default",
        parse_gpu_policy(policy),
        DEFAULT_WEIGHTS,
        VendorRegistry([adapter]),
        None,
    )
    return adapter.fit(slots, request, ctx, [])
