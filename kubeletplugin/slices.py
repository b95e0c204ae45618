"""The node's ResourceSlices, built as plain resource.k8s.io/v1 dicts.

One pool per node (pool name = node name), one device per GPU named
`gpu-<index>`, multi-allocatable, with consumable capacity:

- `memory`: GPU memory x memory scaling, in bytes (whole MiB); by default an
  allocation takes all of it; requests range 1Mi..value in steps of 1Mi.
- `cores`: 100 x core scaling (percent of the SMs); default 0 (no core
  reservation); requests range 0..value in steps of 1.
- `shares`: the split count (concurrent shares per GPU); every allocation
  takes exactly 1.

The defaults are what an allocation consumes when its claim does not ask:
a claim without a memory request gets the whole card's memory, the same as a
count-only HAMi request, so the controller and kube-scheduler agree.

Every family of `dra_driver.objects.dra_vendors` is published the same way,
with its HAMi request type as the `vendor` attribute (what its DeviceClass
selects), its device `type`, `coreUnit` (what `cores` is a percentage of), and
its rules as request policies: an exclusive family's cards are one share that
takes all memory and cores; a family with memory tiers or core steps lists
them as `validValues`, so every allocator rounds a request up to one.

An Ascend NPU of a chip HAMi has templates for is offered as its chip config
says (`dra_vendors.ascend_offer`): `memory` is the chip's `memoryCapacity`,
its valid values every vNPU template and the whole chip (the default, as a
count-only HAMi request takes the whole chip), and `cores` only 0, since the
template fixes the AI Cores (HAMi refuses a `-core` request on the hard split).
Memory scaling does not apply: a template's size is the chip's, not ours.

Every device says what it is in its `kind` attribute: `share` for a card shared
through HAMi-core, `mig` for a hardware partition. A MIG-mode card is published
as partitions only (`kubeletplugin.mig_slices`): its counter set in a slice that
holds only counters (8 sets a slice), its partition devices in slices of their
own (64 a slice, as they consume counters), after the shared cards' slices, so a
node without MIG cards publishes exactly what it did before. A card whose MIG
mode waits for a reset is not published at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from api.quantity import MIB
from dra_driver.engine.vendor_backends.ascend_chips import DraOffer
from dra_driver.objects.dra_vendors import NVIDIA, DraVendor, ascend_offer, dra_vendor
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.mig_slices import (
    MAX_COUNTER_SETS_PER_SLICE,
    counter_set,
    is_partitioned,
    is_shared,
    pack,
    partition_devices,
)

MAX_DEVICES_PER_SLICE = 128
MAX_DEVICES_PER_SLICE_WITH_TAINTS = 64
UNHEALTHY_TAINT_KEY = "unhealthy"
NO_SCHEDULE = "NoSchedule"
SHARE_KIND = "share"
"""The `kind` attribute of a shared card's device (a MIG partition's is `mig`)."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str = NO_SCHEDULE


@dataclass(frozen=True, slots=True)
class SliceSettings:
    """How the node's GPUs are offered.

    `allocation_taint` (e.g. `vgpu.hami.io/allocation=controller`) is set on
    every device in controller-allocated mode: kube-scheduler then never
    allocates these devices itself, while allocations written by the
    controller are still honoured. None = kube-scheduler allocates.
    """

    driver: str = "vgpu.hami.io"
    split_count: int = 10
    memory_scaling: float = 1.0
    core_scaling: float = 1.0
    allocation_taint: Taint | None = None


def device_name(gpu: GpuInfo) -> str:
    return f"gpu-{gpu.index}"


def vendor_type(product_name: str) -> str:
    """HAMi's NVIDIA device type string: the model with `NVIDIA-` in front, no spaces."""
    return NVIDIA.device_type(product_name)


def semver(version: str) -> str:
    """A version attribute must be semver: pad `12.4` to `12.4.0`."""
    parts = [part for part in version.split(".") if part]
    while len(parts) < 3:
        parts.append("0")
    return ".".join(parts[:3])


def _memory_capacity(memory: int, vendor: DraVendor) -> dict[str, Any]:
    if vendor.exclusive:
        policy: dict[str, Any] = {"default": str(memory), "validValues": [str(memory)]}
    elif vendor.memory_tiers:
        tiers = sorted({memory * tier // 1000 // MIB * MIB for tier in vendor.memory_tiers})
        policy = {"default": str(memory), "validValues": [*map(str, tiers), str(memory)]}
    else:
        policy = {
            "default": str(memory),
            "validRange": {"min": str(MIB), "max": str(memory), "step": str(MIB)},
        }
    return {"value": str(memory), "requestPolicy": policy}


def _cores_capacity(cores: int, vendor: DraVendor) -> dict[str, Any]:
    if vendor.exclusive:
        policy: dict[str, Any] = {"default": str(cores), "validValues": [str(cores)]}
    elif vendor.core_steps:
        steps = [str(cores * step // 100) for step in vendor.core_steps]
        policy = {"default": steps[0], "validValues": steps}
    else:
        policy = {"default": "0", "validRange": {"min": "0", "max": str(cores), "step": "1"}}
    return {"value": str(cores), "requestPolicy": policy}


def _template_capacities(offer: DraOffer, cores: int) -> dict[str, Any]:
    """An Ascend chip's `memory` (its templates and the whole chip) and `cores` (none)."""
    valid = [str(size) for size in offer.memory_valid_bytes]
    return {
        "memory": {
            "value": str(offer.memory_bytes),
            "requestPolicy": {"default": valid[-1], "validValues": valid},
        },
        "cores": {
            "value": str(cores),
            "requestPolicy": {"default": "0", "validValues": [str(c) for c in offer.cores_valid]},
        },
    }


def _capacities(gpu: GpuInfo, vendor: DraVendor, settings: SliceSettings) -> dict[str, Any]:
    memory = int(gpu.memory_bytes * settings.memory_scaling) // MIB * MIB
    cores = int(100 * settings.core_scaling)
    offer = ascend_offer(gpu.product_name) if vendor.id == "ascend" else None
    if offer is not None and offer.memory_valid_bytes:
        return _template_capacities(offer, cores)
    return {"memory": _memory_capacity(memory, vendor), "cores": _cores_capacity(cores, vendor)}


def _card_attributes(gpu: GpuInfo, vendor: DraVendor) -> dict[str, Any]:
    """What a card's devices say about the card, shared or partitioned alike."""
    attributes: dict[str, Any] = {
        "vendor": {"string": vendor.request_type},
        "type": {"string": vendor.device_type(gpu.product_name)},
        "productName": {"string": gpu.product_name},
        "numa": {"int": gpu.numa_node},
    }
    if gpu.driver_version:
        attributes["driverVersion"] = {"version": semver(gpu.driver_version)}
    if gpu.compute_capability:
        attributes["cudaComputeCapability"] = {"version": semver(gpu.compute_capability)}
    return attributes


def device_taints(gpu: GpuInfo, settings: SliceSettings) -> list[dict[str, str]]:
    """An unhealthy card's taint, then the controller-allocated mode's allocation taint."""
    taints = []
    if not gpu.healthy:
        reason = gpu.unhealthy_reason or "unhealthy"
        taints.append(Taint(f"{settings.driver}/{UNHEALTHY_TAINT_KEY}", reason[:63]))
    if settings.allocation_taint is not None:
        taints.append(settings.allocation_taint)
    return [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]


def build_device(gpu: GpuInfo, settings: SliceSettings) -> dict[str, Any]:
    vendor = dra_vendor(gpu.vendor, f"gpu {gpu.uuid}: vendor")
    card = _card_attributes(gpu, vendor)
    attributes: dict[str, Any] = {
        "vendor": card["vendor"],
        "kind": {"string": SHARE_KIND},
        "type": card["type"],
        "productName": card["productName"],
        "uuid": {"string": gpu.uuid},
        "index": {"int": gpu.index},
        "minor": {"int": gpu.minor},
        "numa": card["numa"],
    }
    if vendor is not NVIDIA:
        attributes["coreUnit"] = {"string": vendor.core_unit}
    if gpu.pci_bus_id:
        attributes["pciBusID"] = {"string": gpu.pci_bus_id}
    for name in ("driverVersion", "cudaComputeCapability"):
        if name in card:
            attributes[name] = card[name]
    shares = 1 if vendor.exclusive else settings.split_count
    device: dict[str, Any] = {
        "name": device_name(gpu),
        "allowMultipleAllocations": True,
        "attributes": attributes,
        "capacity": {
            **_capacities(gpu, vendor, settings),
            "shares": {
                "value": str(shares),
                "requestPolicy": {"default": "1", "validValues": ["1"]},
            },
        },
    }
    taints = device_taints(gpu, settings)
    if taints:
        device["taints"] = taints
    return device


def build_resource_slices(
    node_name: str,
    node_uid: str,
    gpus: Sequence[GpuInfo],
    settings: SliceSettings,
    generation: int,
) -> list[dict[str, Any]]:
    """The pool's slices, in a stable order with stable names, so republishing
    the same GPUs produces the same objects: the shared cards' devices, then the
    MIG partitions, then the MIG cards' counter sets."""
    ordered = sorted(gpus, key=lambda g: g.index)
    partitioned = [gpu for gpu in ordered if is_partitioned(gpu)]
    devices = [build_device(gpu, settings) for gpu in ordered if is_shared(gpu)]
    tainted = any("taints" in device for device in devices)
    per_slice = MAX_DEVICES_PER_SLICE_WITH_TAINTS if tainted else MAX_DEVICES_PER_SLICE
    shares = [devices[i : i + per_slice] for i in range(0, len(devices), per_slice)]
    partitions = pack(
        (
            partition_devices(
                gpu,
                _card_attributes(gpu, dra_vendor(gpu.vendor, f"gpu {gpu.uuid}: vendor")),
                device_taints(gpu, settings),
            )
            for gpu in partitioned
        ),
        MAX_DEVICES_PER_SLICE_WITH_TAINTS,
    )
    sets = [counter_set(gpu) for gpu in partitioned]
    specs: list[dict[str, Any]] = [{"devices": chunk} for chunk in shares + partitions]
    specs += [
        {"sharedCounters": sets[i : i + MAX_COUNTER_SETS_PER_SLICE]}
        for i in range(0, len(sets), MAX_COUNTER_SETS_PER_SLICE)
    ]
    specs = specs or [{"devices": []}]
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": slice_name(node_name, settings.driver, position),
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Node",
                        "name": node_name,
                        "uid": node_uid,
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "driver": settings.driver,
                "nodeName": node_name,
                "pool": {
                    "name": node_name,
                    "generation": generation,
                    "resourceSliceCount": len(specs),
                },
                **content,
            },
        }
        for position, content in enumerate(specs)
    ]


def slice_name(node_name: str, driver: str, position: int) -> str:
    return f"{node_name}-{driver}-{position}"
