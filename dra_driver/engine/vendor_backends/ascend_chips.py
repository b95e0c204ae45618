"""Ascend's chip configs (the `vnpus:` section of device-config.yaml) and what a chip
offers: HAMi's vNPU template rounding, and the capacities DRA mode publishes.

Pure data and arithmetic, shared by the legacy backend (`ascend`) and the DRA
side, so that both round a request to the same template. Memory is in MB as
HAMi counts it for Ascend (one MB here is 2^20 bytes, the MiB of every other
vendor). Reference: hami-vendors.md (Ascend); docs/vendors.md (Ascend) says
why DRA mode offers capacity rather than one device per template.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, field_validator

from dra_driver.engine.vendor_backends.adapters import ConfigSection
from dra_driver.engine.vendor_backends.reading import INT32_MAX

MIB = 1 << 20
FULL_CHIP_CORES = 100


class VnpuTemplate(ConfigSection):
    """One vNPU template (Go `Template`); `aiCore`/`aiCPU` are informational."""

    name: str = Field(min_length=1, description="Template name the runtime creates, e.g. vir08.")
    memory: int = Field(gt=0, le=INT32_MAX, description="MB of the vNPU.")
    ai_core: int = Field(0, alias="aiCore", ge=0, description="AI Cores of the vNPU.")
    ai_cpu: int = Field(0, alias="aiCPU", ge=0, description="AI CPUs of the vNPU.")


class VnpuChip(ConfigSection):
    """One `vnpus.configs[]` entry (Go `VNPUConfig`); a key left out is Go's zero."""

    chip_name: str = Field("", alias="chipName", description="The chip as npu-smi names it.")
    common_word: str = Field(
        alias="commonWord",
        pattern=r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$",
        description="Request type; part of every per-chip annotation key.",
    )
    resource_name: str = Field(alias="resourceName", min_length=1, description="NPU count.")
    resource_memory_name: str = Field(
        alias="resourceMemoryName", min_length=1, description="MB per NPU (x memoryFactor)."
    )
    resource_core_name: str = Field(
        "", alias="resourceCoreName", description="AI Core percent; soft split only."
    )
    memory_allocatable: int = Field(
        0, alias="memoryAllocatable", ge=0, le=INT32_MAX, description="MB of a whole chip."
    )
    memory_capacity: int = Field(
        0, alias="memoryCapacity", ge=0, le=INT32_MAX, description="MB a request may reach."
    )
    memory_factor: int = Field(
        0, alias="memoryFactor", ge=0, le=INT32_MAX, description="Applied when above 1."
    )
    ai_core: int = Field(0, alias="aiCore", ge=0, description="AI Cores of the chip.")
    ai_cpu: int = Field(0, alias="aiCPU", ge=0, description="AI CPUs of the chip.")
    runtime_class_name: str = Field("", alias="runtimeClassName", description="Set if unset.")
    overwrite_env: bool = Field(
        False,
        alias="overwriteEnv",
        description="NPU-less containers get ASCEND_VISIBLE_DEVICES=''.",
    )
    templates: tuple[VnpuTemplate, ...] = Field((), description="Sorted by memory when read.")
    super_pod: bool = Field(False, alias="superPod", description="910C: whole modules only.")

    @field_validator("templates")
    @classmethod
    def _by_memory(cls, templates: tuple[VnpuTemplate, ...]) -> tuple[VnpuTemplate, ...]:
        """InitDevices sorts the templates by memory; trimming takes the first that holds."""
        return tuple(sorted(templates, key=lambda template: template.memory))

    def trim(self, memory: int) -> tuple[int, str]:
        """HAMi's trimMemory: the template's (memory, name) for a request, the whole chip
        (`memoryAllocatable`, no name) above every template, (0, "") beyond capacity."""
        for template in self.templates:
            if memory <= template.memory:
                return template.memory, template.name
        if memory <= self.memory_capacity:
            return self.memory_allocatable, ""
        return 0, ""


class VnpusConfig(ConfigSection):
    """The `vnpus:` section (Go `VNPUs`)."""

    hami_vnpu_core: bool = Field(
        False,
        alias="hamiVnpuCore",
        description="Soft split on nodes without a `hami-vnpu-core` annotation.",
    )
    configs: tuple[VnpuChip, ...] = Field((), description="One backend per chip.")


@dataclass(frozen=True, slots=True)
class DraOffer:
    """One chip as DRA mode publishes it: a multi-allocatable device with consumable
    `memory` (bytes) and `cores` (percent of the chip's AI Cores).

    `memory_valid_bytes` empty: any amount up to `memory_bytes` (soft split).
    Otherwise the only amounts a share may take, ascending: every template and the
    whole chip, so kube-scheduler and the controller round a claim up exactly as
    HAMi's webhook does. `cores_valid` empty: any whole percent 0..100; `(0,)`
    under the hard split, whose template fixes the AI Cores (HAMi refuses a
    `-core` request there). `templates` maps a share's memory to the template the
    Ascend runtime creates for it (no entry: the whole chip).
    """

    memory_bytes: int
    memory_valid_bytes: tuple[int, ...]
    cores_valid: tuple[int, ...]
    ai_cores: int
    templates: tuple[tuple[int, str], ...]


def dra_offer(chip: VnpuChip, soft_split: bool) -> DraOffer:
    """What a node publishes for each NPU of this chip: the chip's `memoryCapacity`,
    and under the hard split the template sizes plus `memoryAllocatable` as the
    only valid amounts. One difference from HAMi stays: HAMi rounds a request above
    `memoryAllocatable` but within `memoryCapacity` *down* to `memoryAllocatable`
    (310P: 21527 of 24576 MB); a valid-values list can only round up, so such a
    claim finds no device."""
    templates = tuple((template.memory * MIB, template.name) for template in chip.templates)
    if soft_split:
        valid: tuple[int, ...] = ()
    else:
        sizes = {memory for memory, _ in templates} | {chip.memory_allocatable * MIB}
        valid = tuple(sorted(size for size in sizes if 0 < size <= chip.memory_capacity * MIB))
    return DraOffer(
        memory_bytes=chip.memory_capacity * MIB,
        memory_valid_bytes=valid,
        cores_valid=() if soft_split else (0,),
        ai_cores=chip.ai_core,
        templates=templates,
    )


HAMI_DEFAULT_SECTION = {
    "hamiVnpuCore": False,
    "configs": [
        {
            "chipName": "910A",
            "commonWord": "Ascend910A",
            "resourceName": "huawei.com/Ascend910A",
            "resourceMemoryName": "huawei.com/Ascend910A-memory",
            "memoryAllocatable": 32768,
            "memoryCapacity": 32768,
            "aiCore": 30,
            "templates": [
                {"name": "vir02", "memory": 2184, "aiCore": 2},
                {"name": "vir04", "memory": 4369, "aiCore": 4},
                {"name": "vir08", "memory": 8738, "aiCore": 8},
                {"name": "vir16", "memory": 17476, "aiCore": 16},
            ],
        },
        {
            "chipName": "910B2",
            "commonWord": "Ascend910B2",
            "resourceName": "huawei.com/Ascend910B2",
            "resourceMemoryName": "huawei.com/Ascend910B2-memory",
            "memoryAllocatable": 65536,
            "memoryCapacity": 65536,
            "aiCore": 24,
            "aiCPU": 6,
            "templates": [
                {"name": "vir03_1c_8g", "memory": 8192, "aiCore": 3, "aiCPU": 1},
                {"name": "vir06_1c_16g", "memory": 16384, "aiCore": 6, "aiCPU": 1},
                {"name": "vir12_3c_32g", "memory": 32768, "aiCore": 12, "aiCPU": 3},
            ],
        },
        {
            "chipName": "910B3",
            "commonWord": "Ascend910B3",
            "resourceName": "huawei.com/Ascend910B3",
            "resourceMemoryName": "huawei.com/Ascend910B3-memory",
            "memoryAllocatable": 65536,
            "memoryCapacity": 65536,
            "aiCore": 20,
            "aiCPU": 7,
            "templates": [
                {"name": "vir05_1c_16g", "memory": 16384, "aiCore": 5, "aiCPU": 1},
                {"name": "vir10_3c_32g", "memory": 32768, "aiCore": 10, "aiCPU": 3},
            ],
        },
        {
            "chipName": "910B4",
            "commonWord": "Ascend910B4",
            "resourceName": "huawei.com/Ascend910B4",
            "resourceMemoryName": "huawei.com/Ascend910B4-memory",
            "memoryAllocatable": 32768,
            "memoryCapacity": 32768,
            "aiCore": 20,
            "aiCPU": 7,
            "templates": [
                {"name": "vir05_1c_8g", "memory": 8192, "aiCore": 5, "aiCPU": 1},
                {"name": "vir10_3c_16g", "memory": 16384, "aiCore": 10, "aiCPU": 3},
            ],
        },
        {
            "chipName": "310P3",
            "commonWord": "Ascend310P",
            "resourceName": "huawei.com/Ascend310P",
            "resourceMemoryName": "huawei.com/Ascend310P-memory",
            "memoryAllocatable": 21527,
            "memoryCapacity": 24576,
            "aiCore": 8,
            "aiCPU": 7,
            "templates": [
                {"name": "vir01", "memory": 3072, "aiCore": 1, "aiCPU": 1},
                {"name": "vir02", "memory": 6144, "aiCore": 2, "aiCPU": 2},
                {"name": "vir04", "memory": 12288, "aiCore": 4, "aiCPU": 4},
            ],
        },
    ],
}
"""The `vnpus:` section of HAMi's InitDefaultDevices (pkg/scheduler/config/config.go), used
when the scheduler runs without a device-config file and `--enable-ascend` is set."""
