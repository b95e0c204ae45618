"""A node pool's ResourceSlices with MIG cards in the contract's shape
(dra_driver/objects/mig_devices.py): one counters-only slice holding a counter set per
card, then device slices with one partition device per profile placement (consuming
its placement's counters) and, for shared cards, the kubelet plugin's share devices.
Built here because the controller's tests must not wait for the plugin's publisher."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dra_driver.objects.mig_devices import (
    PARTITION_CLASS,
    PARTITION_KIND,
    card_counters,
    counter_set_name,
    partition_consumption,
    partition_device_name,
)
from dra_driver.objects.mig_profiles import GIB, H100_80GB, MigCard
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, Taint, build_device

DRIVER = "vgpu.hami.io"
ALLOCATION_TAINT = {"key": f"{DRIVER}/allocation", "value": "controller", "effect": "NoSchedule"}
PARTITION_SELECTOR = (
    f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].kind == '{PARTITION_KIND}'"
)
PER_SLICE = 64
"""Devices per slice once they are tainted or consume counters (the v1.36 limit)."""


def card_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def partition_devices(node: str, index: int, card: MigCard = H100_80GB) -> list[dict[str, Any]]:
    """Every profile placement of one MIG-mode card, as partition devices."""
    devices = []
    for profile in card.profiles:
        for placement in profile.placements:
            consumed = partition_consumption(profile, placement)
            devices.append(
                {
                    "name": partition_device_name(index, profile.name, placement.start),
                    "attributes": {
                        "kind": {"string": PARTITION_KIND},
                        "profile": {"string": profile.name},
                        "parentUUID": {"string": card_uuid(node, index)},
                        "parentIndex": {"int": index},
                        "placementStart": {"int": placement.start},
                        "placementSize": {"int": placement.size},
                        "computeSlices": {"int": profile.compute_slices},
                        "memorySlices": {"int": profile.memory_slices},
                        "multiprocessors": {"int": profile.multiprocessors},
                    },
                    "capacity": {"memory": {"value": str(profile.memory_bytes)}},
                    "consumesCounters": [
                        {
                            "counterSet": counter_set_name(index),
                            "counters": {k: {"value": str(v)} for k, v in consumed.items()},
                        }
                    ],
                    "taints": [dict(ALLOCATION_TAINT)],
                }
            )
    return devices


def shared_device(node: str, index: int) -> dict[str, Any]:
    """A whole card offered as HAMi-core shares, as the kubelet plugin publishes it."""
    gpu = GpuInfo(
        uuid=card_uuid(node, index),
        index=index,
        minor=index,
        product_name="NVIDIA H100 80GB HBM3",
        memory_bytes=80 * GIB,
        numa_node=0,
    )
    taint = Taint(ALLOCATION_TAINT["key"], ALLOCATION_TAINT["value"])
    return build_device(gpu, SliceSettings(driver=DRIVER, allocation_taint=taint))


def pool_slices(
    node: str,
    mig_cards: Sequence[int] = (0,),
    shared_cards: Sequence[int] = (),
    card: MigCard = H100_80GB,
    generation: int = 1,
) -> list[dict[str, Any]]:
    """The node's pool: the counters slice first, then the device slices."""
    counters = [
        {
            "name": counter_set_name(index),
            "counters": {k: {"value": str(v)} for k, v in card_counters(card).items()},
        }
        for index in mig_cards
    ]
    devices = [shared_device(node, index) for index in shared_cards]
    for index in mig_cards:
        devices.extend(partition_devices(node, index, card))
    chunks = [devices[i : i + PER_SLICE] for i in range(0, len(devices), PER_SLICE)]
    bodies: list[dict[str, Any]] = [{"sharedCounters": counters}] if counters else []
    bodies.extend({"devices": chunk} for chunk in chunks)
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}-{position}", "uid": f"{node}-{position}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": generation, "resourceSliceCount": len(bodies)},
                **body,
            },
        }
        for position, body in enumerate(bodies)
    ]


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
