"""Ascend in DRA mode: each chip's templates as the published memory policy, the
controller rounding a claim up to a template, and the vNPU template prepare names
for the Ascend runtime (`ASCEND_VNPU_SPECS`).

Chip values are HAMi's built-in `vnpus:` section (InitDefaultDevices); the template
a share's memory names is HAMi's Test_PatchAnnotations value (8738 MB on Ascend910A
-> vir08), as its Ascend device plugin turns the runtime JSON's `temp` into
ASCEND_VNPU_SPECS.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from api.quantity import MIB
from controller.allocation import consumed_capacity
from controller.inventory import PublishedDevice
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import CapacityRefusal
from dra_driver.objects.dra_vendors import ascend_chip, dra_vendor
from kubeletplugin.ascend_env import NpuShare, vnpu_env, vnpu_template
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_device

GIB = 1 << 30


def npu(product: str, memory: int = 64 * GIB, index: int = 0) -> GpuInfo:
    return GpuInfo(f"NPU-{index}", index, index, product, memory, vendor=dra_vendor("ascend").id)


def mib(*values: int) -> list[str]:
    return [str(value * MIB) for value in values]


@pytest.mark.parametrize(
    ("product", "capacity", "valid"),
    [
        ("Ascend910A", 32768, mib(2184, 4369, 8738, 17476, 32768)),
        ("Ascend910B2", 65536, mib(8192, 16384, 32768, 65536)),
        ("Ascend910B3", 65536, mib(16384, 32768, 65536)),
        ("Ascend910B4", 32768, mib(8192, 16384, 32768)),
        # 310P: memoryCapacity 24576, the whole chip memoryAllocatable 21527.
        ("Ascend310P3", 24576, mib(3072, 6144, 12288, 21527)),
    ],
)
def test_each_chip_publishes_its_templates_and_the_whole_chip_as_memory(product, capacity, valid):
    device = build_device(npu(product), SliceSettings(memory_scaling=2.0))
    memory = device["capacity"]["memory"]
    assert memory["value"] == str(capacity * MIB)
    assert memory["requestPolicy"] == {"default": valid[-1], "validValues": valid}
    # The template fixes the AI Cores: a share takes none of the `cores` capacity.
    assert device["capacity"]["cores"]["requestPolicy"] == {"default": "0", "validValues": ["0"]}


def test_an_npu_of_a_chip_without_templates_is_plain_capacity():
    device = build_device(npu("Ascend950X", memory=32 * GIB), SliceSettings())
    policy = device["capacity"]["memory"]["requestPolicy"]
    assert policy["validRange"] == {"min": str(MIB), "max": str(32 * GIB), "step": str(MIB)}


@pytest.mark.parametrize(
    ("product", "held_mib"),
    [("Ascend910B2", 8192), ("Ascend910B3", 16384), ("Ascend910B4", 8192)],
)
def test_a_claim_of_3000_mib_on_a_910b_takes_the_smallest_template(product, held_mib):
    spec = build_device(npu(product), SliceSettings())
    published = PublishedDevice("vgpu.hami.io", "node-a", "node-a", spec, "uid", 1, "NPU-0")
    consumed = consumed_capacity(published, memory_mib=3000, cores=0, requested={})
    assert consumed is not None
    assert consumed["memory"] == Decimal(held_mib * MIB)
    assert consumed["cores"] == 0


def test_a_core_share_on_a_template_chip_is_refused_as_hami_refuses_it_on_the_hard_split():
    spec = build_device(npu("Ascend910B3"), SliceSettings())
    published = PublishedDevice("vgpu.hami.io", "node-a", "node-a", spec, "uid", 1, "NPU-0")
    refused = consumed_capacity(published, memory_mib=3000, cores=25, requested={})
    assert isinstance(refused, CapacityRefusal)


def test_above_the_whole_chip_a_310p_claim_finds_no_size_where_hami_rounds_down():
    spec = build_device(npu("Ascend310P3"), SliceSettings())
    published = PublishedDevice("vgpu.hami.io", "node-a", "node-a", spec, "uid", 1, "NPU-0")
    refused = consumed_capacity(published, memory_mib=22000, cores=0, requested={})
    assert isinstance(refused, CapacityRefusal)


@pytest.mark.parametrize(
    ("product", "chip_word"),
    [
        ("Ascend910B3", "Ascend910B3"),
        ("ascend 910b4", "Ascend910B4"),
        ("Ascend310P3", "Ascend310P"),
        ("Atlas-310P3", "Ascend310P"),
    ],
)
def test_the_chip_is_found_by_its_request_type_or_its_npu_smi_name(product, chip_word):
    chip = ascend_chip(product)
    assert chip is not None
    assert chip.common_word == chip_word


def test_hamis_patch_annotations_value_names_vir08_for_8738_mb_on_910a():
    assert vnpu_template(NpuShare("device-0", "Ascend910A", 8738 * MIB)) == "vir08"


@pytest.mark.parametrize(
    ("product", "memory_mib", "expected"),
    [
        ("Ascend910B3", 16384, "vir05_1c_16g"),
        ("Ascend910B3", 32768, "vir10_3c_32g"),
        ("Ascend910B2", 8192, "vir03_1c_8g"),
        ("Ascend310P3", 3072, "vir01"),
        ("Ascend910B3", 65536, ""),
        ("Ascend310P3", 21527, ""),
        ("Ascend950X", 8192, ""),
    ],
)
def test_a_template_share_names_its_template_and_a_whole_chip_none(product, memory_mib, expected):
    assert vnpu_template(NpuShare("NPU-0", product, memory_mib * MIB)) == expected


def test_one_vnpu_share_sets_ascend_vnpu_specs():
    env = vnpu_env([NpuShare("NPU-0", "Ascend910B3", 16 * GIB)], "default/c (u)")
    assert [(v.name, v.value) for v in env] == [("ASCEND_VNPU_SPECS", "vir05_1c_16g")]


def test_whole_chips_set_no_template_however_many():
    shares = [NpuShare(f"NPU-{i}", "Ascend910B3", 64 * GIB) for i in range(2)]
    assert vnpu_env(shares, "default/c (u)") == ()
    assert vnpu_env([NpuShare("NPU-0", "Ascend910B3", None)], "default/c (u)") == ()


def test_a_vnpu_share_among_several_npus_is_refused_naming_the_claim():
    shares = [
        NpuShare("NPU-0", "Ascend910B3", 64 * GIB),
        NpuShare("NPU-1", "Ascend910B3", 16 * GIB),
    ]
    with pytest.raises(InvalidParameterError) as caught:
        vnpu_env(shares, "default/c (u)")
    assert caught.value.field == "claim default/c (u)"
    assert "NPU-1 is a vir05_1c_16g vNPU share" in str(caught.value)
    assert "one vNPU per container" in str(caught.value)
