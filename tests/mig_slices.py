"""A node pool's ResourceSlices with MIG cards, built by the kubelet plugin's own
`build_resource_slices` (the contract in dra_driver/objects/mig_devices.py): the
controller's tests need no running plugin or publisher, and cannot drift from what
the plugin publishes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.objects.mig_devices import PARTITION_CLASS, PARTITION_KIND
from dra_driver.objects.mig_profiles import GIB, H100_80GB, MigCard
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.mig_state import MigState
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices

DRIVER = "vgpu.hami.io"
ALLOCATION_TAINT = {"key": f"{DRIVER}/allocation", "value": "controller", "effect": "NoSchedule"}
PARTITION_SELECTOR = (
    f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].kind == '{PARTITION_KIND}'"
)


def card_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def card(node: str, index: int, mig: MigCard | None) -> GpuInfo:
    """An H100 80GB of the node: in MIG mode with `mig`'s profiles (no instance yet), or
    a card offered whole as HAMi-core shares (`mig` None)."""
    state = (
        MigState()
        if mig is None
        else MigState(capable=True, enabled=True, pending_enabled=True, profiles=mig.profiles)
    )
    return GpuInfo(
        uuid=card_uuid(node, index),
        index=index,
        minor=index,
        product_name="NVIDIA H100 80GB HBM3",
        memory_bytes=80 * GIB,
        mig=state,
    )


def pool_slices(
    node: str,
    mig_cards: Sequence[int] = (0,),
    shared_cards: Sequence[int] = (),
    mig: MigCard = H100_80GB,
    generation: int = 1,
) -> list[dict[str, Any]]:
    """The node's pool exactly as the kubelet plugin builds it (`build_resource_slices`),
    in the controller-allocated mode; each slice given a uid as the API server would."""
    gpus = [card(node, i, mig) for i in mig_cards] + [card(node, i, None) for i in shared_cards]
    taint = Taint(ALLOCATION_TAINT["key"], ALLOCATION_TAINT["value"])
    settings = SliceSettings(driver=DRIVER, allocation_taint=taint)
    slices = build_resource_slices(node, f"{node}-uid", gpus, settings, generation)
    for position, item in enumerate(slices):
        item["metadata"]["uid"] = f"{node}-{position}"
    return slices


def partition_class(expression: str = PARTITION_SELECTOR) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": PARTITION_CLASS},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def profile_selector(profile: str) -> dict[str, Any]:
    return {"cel": {"expression": f"device.attributes['{DRIVER}'].profile == '{profile}'"}}


def partition_request(name: str = "mig", *selectors: dict[str, Any], **exactly: Any) -> dict:
    return {
        "name": name,
        "exactly": {
            "deviceClassName": PARTITION_CLASS,
            **({"selectors": list(selectors)} if selectors else {}),
            **exactly,
        },
    }
