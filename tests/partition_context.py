"""The controller's request context over pools with MIG cards (tests/mig_slices.py): the
share and partition DeviceClasses and real CEL through the selector cache, as the
controller's view builds them; and a namespace's HAMi GPU quota."""

from __future__ import annotations

from typing import Any

from controller.inventory import Inventory
from controller.requests import RequestContext
from controller.settings import controller_classes
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.objects.dra_cel import cel_device_from_slice
from dra_driver.objects.dra_cel_cache import SelectorCache
from dra_driver.objects.mig_devices import PARTITION_CLASS
from tests.mig_slices import DRIVER, partition_class

SHARE_CLASS = "nvidia.vgpu.hami.io"
SHARE_SELECTOR = "device.allowMultipleAllocations == true"


def partition_request_context(inventory: Inventory) -> RequestContext:
    cache = SelectorCache()
    classes = {
        PARTITION_CLASS: partition_class(),
        SHARE_CLASS: {"spec": {"selectors": [{"cel": {"expression": SHARE_SELECTOR}}]}},
    }
    return RequestContext(
        driver=DRIVER,
        device_classes=controller_classes(),
        classes=classes,
        inventory=inventory,
        selector_match=lambda expression, device: cache.matches(
            expression, device.cache_key, cel_device_from_slice(DRIVER, device.spec)
        ),
        vendors=VendorRegistry(),
        partition_classes=frozenset({PARTITION_CLASS}),
    )


def gpumem_quota(namespace: str, mib: int, cores: int | None = None) -> dict[str, Any]:
    """A ResourceQuota holding the namespace to `mib` of GPU memory (and `cores`)."""
    hard = {"limits.nvidia.com/gpumem": str(mib)}
    if cores is not None:
        hard["limits.nvidia.com/gpucores"] = str(cores)
    return {"metadata": {"name": "gpu", "namespace": namespace}, "spec": {"hard": hard}}
