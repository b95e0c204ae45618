"""The device families DRA mode serves: one entry per vendor, read by every side.

The kubelet plugin publishes a family's devices with its `vendor` attribute,
`type` and capacities; the DeviceClass `<id>.vgpu.hami.io` selects them by
driver and that attribute; the controller turns a claim of the class into an
engine request of the family's HAMi request type; the simulator builds nodes
of a family from its mock defaults. Keeping all of it in one table is what
keeps the class, the slice and the request in agreement.

A family differs from NVIDIA only in data and in three rules:
- `exclusive`: HAMi hands these cards out whole (count-only resources), so a
  device is one share and every claim takes all of its memory and cores;
- `memory_tiers`: the vendor's sharing layer only makes slices of fixed
  sizes, so a request is rounded up to the next tier, as HAMi's webhook rounds
  it (the published `requestPolicy.validValues` make kube-scheduler and the
  controller round the same way);
- `core_steps`: the compute share comes in whole units (AWS NeuronCores), so
  the `cores` percentage may only take those values.

Ascend is the one family whose rule is per chip: each NPU's templates (HAMi's
built-in `vnpus:` chips, `ascend_chips.dra_offer`) are its memory's valid
values, so a claim is rounded up to the vNPU the Ascend runtime will create.

Each family also says who holds a share to its memory and cores (`enforced_by`,
shown by `dra-driver status`): HAMi-core for NVIDIA, the vendor's runtime where
prepare sets what that runtime reads, else nobody (accounting only).

`cores` is always a percentage of the card's compute units, whatever the
vendor calls them (`core_unit`, published as the `coreUnit` attribute), so
one claim shape serves every class. Pure data: no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.engine.vendor_backends.ascend_chips import (
    HAMI_DEFAULT_SECTION,
    DraOffer,
    VnpuChip,
    VnpusConfig,
    dra_offer,
)
from dra_driver.errors import InvalidParameterError

DRIVER = "vgpu.hami.io"
GIB = 1 << 30
ACCOUNTING_ONLY = "accounting only"
LIBVGPU = "HAMi-core (libvgpu)"


@dataclass(frozen=True, slots=True)
class DraVendor:
    """One device family as DRA mode offers it."""

    id: str
    """Canonical short id: the class `<id>.vgpu.hami.io`, the mock file's `vendor`, `--vendors`."""

    request_type: str
    """HAMi's request type word (the engine's vendor); every published `type` of the
    family contains it and the devices' `vendor` attribute is exactly it."""

    family: str
    """Who makes what, for people: `Cambricon MLU`."""

    product: str
    """The mock backend's product name when the mock file gives none."""

    memory_bytes: int
    """The mock backend's card memory when the mock file gives none."""

    core_unit: str
    """What `cores` is a percentage of (SMs, CUs, AI Cores, ...)."""

    exclusive: bool = False
    """Whole cards only: one share per device, taking all memory and cores."""

    memory_tiers: tuple[int, ...] = ()
    """Fractions of the card's memory, in 1/1000ths, a share is rounded up to; empty = any MiB."""

    core_steps: tuple[int, ...] = ()
    """The `cores` percentages a share may take; empty = any whole percent."""

    enforced_by: str = ACCOUNTING_ONLY
    """Who holds a share to its memory and cores in the container, for people."""

    limits_enforced: bool = False
    """Whether something in the container holds a share to its memory: False means the
    allocation is accounting only (the scheduler's bookkeeping, nothing in the way)."""

    @property
    def device_class(self) -> str:
        return f"{self.id}.{DRIVER}"

    def device_type(self, product: str) -> str:
        """HAMi's device type: the product without spaces, with the request type in front
        unless the product already names it (`NVIDIA-A100...`, `MLU370-X8`)."""
        name = product.strip().replace(" ", "-")
        if self.request_type.lower() in name.lower():
            return name
        return f"{self.request_type}-{name}"


NVIDIA = DraVendor(
    "nvidia",
    "NVIDIA",
    "NVIDIA GPU",
    "NVIDIA A100-SXM4-80GB",
    80 * GIB,
    "SM",
    enforced_by=LIBVGPU,
    limits_enforced=True,
)
WHOLE_CARD = "whole card; accounting only"

DRA_VENDORS: tuple[DraVendor, ...] = (
    NVIDIA,
    DraVendor("mlu", "MLU", "Cambricon MLU", "MLU370-X8", 48 * GIB, "MLU core"),
    DraVendor("dcu", "DCU", "Hygon DCU", "Z100L", 32 * GIB, "CU"),
    DraVendor(
        "ascend",
        "Ascend",
        "Huawei Ascend NPU",
        "Ascend910B3",
        64 * GIB,
        "AI Core",
        enforced_by="Ascend runtime (vNPU template)",
        limits_enforced=True,
    ),
    DraVendor("iluvatar", "Iluvatar", "Iluvatar CoreX GPU", "BI-V100", 32 * GIB, "core"),
    DraVendor("metax", "Metax-SGPU", "MetaX GPU (sGPU)", "MXC500", 64 * GIB, "compute unit"),
    DraVendor("mthreads", "Mthreads", "Moore Threads GPU", "MTT S4000", 48 * GIB, "core"),
    DraVendor(
        "gcu", "GCU", "Enflame GCU", "S60", 48 * GIB, "core", exclusive=True, enforced_by=WHOLE_CARD
    ),
    DraVendor(
        "xpu", "XPU", "Kunlunxin XPU (vXPU)", "P800", 96 * GIB, "core", memory_tiers=(250, 500)
    ),
    DraVendor(
        "neuron",
        "AWSNeuron",
        "AWS Neuron",
        "Inferentia2",
        32 * GIB,
        "NeuronCore",
        core_steps=(50, 100),
        enforced_by="Neuron runtime (visible devices); memory and cores accounting only",
    ),
    DraVendor(
        "amd",
        "AMD",
        "AMD Instinct GPU",
        "AMD Instinct MI300X",
        192 * GIB,
        "CU",
        enforced_by="HAMi's AMD layer if the image has it (memory); cores accounting only",
    ),
    DraVendor(
        "vastai",
        "Vastai",
        "Vastai",
        "VA1",
        32 * GIB,
        "core",
        exclusive=True,
        enforced_by=WHOLE_CARD,
    ),
    DraVendor(
        "biren",
        "Biren",
        "Biren GPU",
        "BR104",
        32 * GIB,
        "core",
        exclusive=True,
        enforced_by=WHOLE_CARD,
    ),
)
"""Every family, NVIDIA first. Kunlunxin's vXPU tiers are HAMi's 24576/49152/98304 MiB of a
98304 MiB card (1/4, 1/2, whole); AWS Neuron devices have two NeuronCores (50 % each)."""

_BY_ID: Mapping[str, DraVendor] = {vendor.id: vendor for vendor in DRA_VENDORS}

ASCEND_CHIPS: tuple[VnpuChip, ...] = VnpusConfig.model_validate(HAMI_DEFAULT_SECTION).configs
"""HAMi's built-in Ascend chips: the kubelet plugin reads no device-config file."""


def ascend_chip(product: str) -> VnpuChip | None:
    """The chip config of an NPU by its product name: the chip's request type
    (`Ascend910B3`), else the npu-smi chip name it ends with (`...310P3`); None for a
    chip HAMi has no templates for (its NPUs are offered as plain capacity)."""
    name = product.strip().replace(" ", "").lower()
    by_word = next((c for c in ASCEND_CHIPS if c.common_word.lower() == name), None)
    if by_word is not None:
        return by_word
    return next(
        (c for c in ASCEND_CHIPS if c.chip_name and name.endswith(c.chip_name.lower())), None
    )


def ascend_offer(product: str) -> DraOffer | None:
    """What an NPU of this product offers in DRA mode: the hard split (HAMi's default,
    `hamiVnpuCore: false`), whose template the Ascend runtime creates; the soft split
    needs HAMi's hami-vnpu-core library in the container, which DRA mode does not inject."""
    chip = ascend_chip(product)
    return None if chip is None else dra_offer(chip, soft_split=False)


def dra_vendor(vendor_id: str, field: str = "vendor") -> DraVendor:
    """The family with this id; InvalidParameterError naming `field` otherwise."""
    try:
        return _BY_ID[vendor_id]
    except KeyError:
        raise InvalidParameterError(
            field, f"unknown vendor {vendor_id!r}; known: {', '.join(_BY_ID)}"
        ) from None


def vendor_of_request_type(request_type: str) -> DraVendor | None:
    """The family whose request type this is, or None."""
    return next((v for v in DRA_VENDORS if v.request_type == request_type), None)


def selector(vendor: DraVendor, driver: str = DRIVER) -> str:
    """The DeviceClass CEL: this driver's devices whose `vendor` attribute is the family's.
    NVIDIA's also asks for `kind` `share`: an NVIDIA card's MIG partitions carry its vendor
    too, and are served by the partition class (`mig_devices.PARTITION_CLASS`)."""
    attributes = f"device.attributes['{driver}']"
    expression = f"device.driver == '{driver}' && {attributes}.vendor == '{vendor.request_type}'"
    if vendor is NVIDIA:
        expression += f" && {attributes}.kind == 'share'"
    return expression


def device_class(vendor: DraVendor, driver: str = DRIVER) -> dict[str, Any]:
    """The family's DeviceClass, as deploy/ installs it."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": vendor.device_class},
        "spec": {"selectors": [{"cel": {"expression": selector(vendor, driver)}}]},
    }


def class_vendors() -> dict[str, str]:
    """DeviceClass name -> the engine's request type, for every family."""
    return {vendor.device_class: vendor.request_type for vendor in DRA_VENDORS}
