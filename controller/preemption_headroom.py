"""What a device can host, for preemption's shortcuts (preemption.py). Pure.

The reprieve loop may skip the engine where the answer is known: a give-back
that leaves some request of every variant too few devices able to host it
(`lacks_headroom`, the engine's own `NodeState.could_fit` pruning test) is
refused whatever else the engine checks; and a give-back onto devices that
cannot host any request of a pod whose devices HAMi's standard Fit judges one
by one (`walked_alone`) leaves the engine's placement as it was.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from controller.requests import PodVariant
from dra_driver.engine.fit import FULL_CARD_CORES
from dra_driver.engine.model import Device, DeviceUsage
from dra_driver.engine.policy import GpuPolicy
from dra_driver.engine.requests import DeviceRequest, PodRequest
from dra_driver.engine.vendors import VendorRegistry

_IDLE = DeviceUsage()


def walked_alone(
    pod: PodRequest, policy: GpuPolicy, vendors: VendorRegistry
) -> tuple[DeviceRequest, ...] | None:
    """The pod's requests when HAMi's standard Fit judges each of their devices by
    its own usage alone, else None (the shortcut does not apply)."""
    requests = tuple(
        request for container in pod.all_containers for request in container if request.count > 0
    )
    for request in requests:
        vendor = vendors.get(request.vendor)
        if request.filters.numa_bind or vendor.fit is not None or vendor.charge_slots:
            return None
        if policy.topology and vendor.topology_aware:
            return None
    return requests


def headroom_needs(
    variant: PodVariant, vendors: VendorRegistry
) -> tuple[DeviceRequest, ...] | None:
    """The requests of `variant` that `NodeState.could_fit` counts devices for (those
    asking for devices, of a vendor without a Fit of its own); None when one names a
    vendor the registry lacks."""
    needs: list[DeviceRequest] = []
    for container in variant.request.all_containers:
        for request in container:
            if request.vendor not in vendors:
                return None
            if request.count > 0 and vendors.get(request.vendor).fit is None:
                needs.append(request)
    return tuple(needs)


def lacks_headroom(
    devices: Iterable[Device],
    usage: Mapping[str, DeviceUsage],
    needs: Iterable[tuple[DeviceRequest, ...] | None],
) -> bool:
    """Whether every variant (its `headroom_needs`) fails the engine's own necessary
    condition for a fit (`NodeState.could_fit`) on a node whose devices are at `usage`
    (a device it leaves out holds nothing): some request finds fewer devices with a
    free slot, its memory and its cores than it asks for. The engine then refuses
    every variant, whatever else it checks."""
    for variant_needs in needs:
        if variant_needs is None:
            return False
        for request in variant_needs:
            wanted = request.count
            for device in devices:
                if could_host(device, usage.get(device.id, _IDLE), request):
                    wanted -= 1
                    if not wanted:
                        break
            if wanted:
                break
        else:
            return False
    return True


def could_host(device: Device, usage: DeviceUsage, request: DeviceRequest) -> bool:
    """The engine's `could_fit` headroom test for one device: a free slot, and the
    memory and cores the request takes there. A device that fails it is skipped by
    HAMi's standard Fit whatever its place in the walk."""
    return (
        device.healthy
        and usage.used < device.count
        and device.cores - usage.cores >= min(request.cores, FULL_CARD_CORES)
        and device.memory_mib - usage.memory_mib >= request.memory_on(device.memory_mib)
    )
