"""The DRA families: classes, the devices they select, what slices publish for each,
the mock backend's vendor field, what prepare's vendor env holds, and the engine
adapters a claim of each class is fitted with."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from api.quantity import MIB
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.claim_workloads import DEVICE_CLASSES, claim_request
from dra_driver.objects.dra_cel import cel_device_from_slice, compile_selector
from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
from dra_driver.objects.dra_vendors import (
    DRA_VENDORS,
    NVIDIA,
    device_class,
    dra_vendor,
)
from dra_driver.objects.mig_devices import PARTITION_CLASS
from kubeletplugin.gpus import GpuInfo, MockBackend
from kubeletplugin.slices import SliceSettings, build_device, vendor_type
from kubeletplugin.vendor_env import share_env
from libvgpu.container_edits import DeviceShare
from libvgpu.host_gpus import MockHostBackend

ROOT = Path(__file__).resolve().parents[2]
DEPLOYED = ROOT / "deploy" / "components" / "kubelet-plugin" / "deviceclasses.yaml"
GIB = 1 << 30
VENDORS = [vendor.id for vendor in DRA_VENDORS]


def card(vendor: str, index: int = 0, memory: int = 32 * GIB, product: str = "X1") -> GpuInfo:
    return GpuInfo(f"{vendor}-{index}", index, index, product, memory, vendor=vendor)


def test_ids_request_types_and_classes_are_unique_and_nvidia_keeps_its_spelling():
    assert len(set(VENDORS)) == len(VENDORS) == 13
    assert len({v.request_type for v in DRA_VENDORS}) == 13
    assert NVIDIA.request_type == "NVIDIA" and NVIDIA.device_class == "nvidia.vgpu.hami.io"
    assert {v.device_class: v.request_type for v in DRA_VENDORS}.items() <= DEVICE_CLASSES.items()


def test_the_deployed_classes_are_the_table_plus_partitions_and_the_engines_mock():
    documents = [doc for doc in yaml.safe_load_all(DEPLOYED.read_text()) if doc]
    expected = [device_class(v) for v in DRA_VENDORS]
    partitions = [d for d in documents if d["metadata"]["name"] == PARTITION_CLASS]
    assert [d for d in documents[:-1] if d not in partitions] == expected
    assert len(partitions) == 1
    assert documents[-1]["metadata"]["name"] == "mock.vgpu.hami.io"


@pytest.mark.parametrize("vendor_id", VENDORS)
def test_each_class_selects_its_family_and_no_other(vendor_id):
    vendor = dra_vendor(vendor_id)
    (selector,) = device_class(vendor)["spec"]["selectors"]
    compiled = compile_selector(selector["cel"]["expression"])
    for other in DRA_VENDORS:
        device = cel_device_from_slice(
            "vgpu.hami.io", build_device(card(other.id), SliceSettings())
        )
        assert compiled.matches(device) is (other is vendor), other.id


@pytest.mark.parametrize(
    ("vendor_id", "product", "expected"),
    [
        ("nvidia", "Tesla T4", "NVIDIA-Tesla-T4"),
        ("nvidia", "NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
        ("mlu", "MLU370-X8", "MLU370-X8"),
        ("iluvatar", "BI-V100", "Iluvatar-BI-V100"),
        ("ascend", "Ascend910B3", "Ascend910B3"),
        ("amd", "AMD Instinct MI300X", "AMD-Instinct-MI300X"),
        ("metax", "MXC500", "Metax-SGPU-MXC500"),
    ],
)
def test_device_type_carries_the_request_type(vendor_id, product, expected):
    vendor = dra_vendor(vendor_id)
    assert vendor.device_type(product) == expected
    assert dra_vendor_registry().get(vendor.request_type).matches(expected)


def test_nvidia_type_is_what_it_always_was():
    assert vendor_type("H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"


def test_an_unknown_vendor_names_the_field_and_the_known_ones():
    with pytest.raises(InvalidParameterError) as caught:
        dra_vendor("tpu", "gpus.yaml: vendor")
    assert caught.value.field == "gpus.yaml: vendor"
    assert "'tpu'" in caught.value.reason and "nvidia, mlu" in caught.value.reason


def test_nvidia_device_is_published_as_before():
    device = build_device(card("nvidia", product="Tesla T4", memory=16 * GIB), SliceSettings())
    assert device["attributes"]["vendor"] == {"string": "NVIDIA"}
    assert "coreUnit" not in device["attributes"]
    assert device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] == str(MIB)
    assert device["capacity"]["cores"]["requestPolicy"]["default"] == "0"
    assert device["capacity"]["shares"]["value"] == "10"


def test_memory_tiers_are_published_as_valid_values():
    device = build_device(card("xpu", memory=96 * GIB), SliceSettings())
    policy = device["capacity"]["memory"]["requestPolicy"]
    assert policy["validValues"] == [str(24 * GIB), str(48 * GIB), str(96 * GIB)]
    assert device["attributes"]["coreUnit"] == {"string": "core"}


def test_core_steps_are_whole_neuroncores():
    device = build_device(card("neuron"), SliceSettings())
    assert device["capacity"]["cores"]["requestPolicy"] == {
        "default": "50",
        "validValues": ["50", "100"],
    }
    assert device["attributes"]["coreUnit"] == {"string": "NeuronCore"}


@pytest.mark.parametrize("vendor_id", ["gcu", "vastai", "biren"])
def test_exclusive_families_are_one_share_of_everything(vendor_id):
    device = build_device(card(vendor_id, memory=48 * GIB), SliceSettings(split_count=10))
    capacity = device["capacity"]
    assert capacity["shares"]["value"] == "1"
    assert capacity["memory"]["requestPolicy"]["validValues"] == [str(48 * GIB)]
    assert capacity["cores"]["requestPolicy"] == {"default": "100", "validValues": ["100"]}


def test_mock_file_vendor_fills_in_the_familys_card(tmp_path: Path):
    path = tmp_path / "gpus.yaml"
    path.write_text("vendor: ascend\ngpus:\n  - {uuid: NPU-0, index: 0}\n")
    (npu,) = MockBackend(path).discover()
    assert (npu.vendor, npu.product_name, npu.memory_bytes) == ("ascend", "Ascend910B3", 64 * GIB)
    assert (npu.driver_version, npu.cuda_driver_version, npu.compute_capability) == ("", "", "")


def test_mock_file_without_vendor_is_nvidia_as_before(tmp_path: Path):
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n  - {uuid: GPU-0, index: 0}\n")
    (gpu,) = MockBackend(path).discover()
    assert (gpu.vendor, gpu.product_name, gpu.memory_bytes) == (
        "nvidia",
        "NVIDIA A100-SXM4-80GB",
        80 * GIB,
    )
    assert (gpu.driver_version, gpu.cuda_driver_version) == ("550.54.15", "12.4")


def test_mock_file_with_an_unknown_vendor_is_refused_naming_it(tmp_path: Path):
    path = tmp_path / "gpus.yaml"
    path.write_text("vendor: tpu\ngpus: []\n")
    with pytest.raises(InvalidParameterError) as caught:
        MockBackend(path).discover()
    assert caught.value.field == f"{path}: vendor"


def shares(*limits: tuple[str, int, int | None, int | None]) -> list[DeviceShare]:
    return [DeviceShare(uuid, index, memory, cores) for uuid, index, memory, cores in limits]


def test_ascend_env_names_the_npus_by_index_in_device_order():
    env = share_env(
        dra_vendor("ascend"), shares(("NPU-3", 3, 8 * GIB, 25), ("NPU-1", 1, GIB, None))
    )
    assert [(v.name, v.value) for v in env] == [
        ("ASCEND_VISIBLE_DEVICES", "1,3"),
        ("VGPU_SHARE_VENDOR", "ascend"),
        ("VGPU_SHARE_DEVICES", "NPU-1,NPU-3"),
        ("VGPU_SHARE_MEMORY_LIMIT_0", "1024m"),
        ("VGPU_SHARE_CORE_LIMIT_0", "0"),
        ("VGPU_SHARE_MEMORY_LIMIT_1", "8192m"),
        ("VGPU_SHARE_CORE_LIMIT_1", "25"),
    ]


def test_amd_env_has_hami_amd_layers_memory_limit_the_smallest_of_the_container():
    env = dict(
        (v.name, v.value)
        for v in share_env(dra_vendor("amd"), shares(("A", 0, 16 * GIB, 50), ("B", 1, 8 * GIB, 50)))
    )
    assert env["ROCR_VISIBLE_DEVICES"] == "0,1"
    assert env["HIP_DEVICE_MEMORY_LIMIT"] == "8192m"


def test_amd_cards_are_numbered_as_the_container_sees_them():
    """The spec exposes only the claim's render nodes, so ROCm counts the cards it finds
    from 0: host cards 2 and 5 are the container's 0 and 1 (Ascend's runtime, which mounts
    the NPUs itself, keeps host indexes)."""
    amd = share_env(dra_vendor("amd"), shares(("A", 5, 8 * GIB, 50), ("B", 2, 8 * GIB, 50)))
    assert dict((v.name, v.value) for v in amd)["ROCR_VISIBLE_DEVICES"] == "0,1"
    ascend = share_env(dra_vendor("ascend"), shares(("N", 5, 8 * GIB, 0)))
    assert dict((v.name, v.value) for v in ascend)["ASCEND_VISIBLE_DEVICES"] == "5"


def test_a_family_without_a_known_runtime_variable_gets_only_the_share():
    env = share_env(dra_vendor("mlu"), shares(("MLU-0", 0, 12 * GIB, 25)))
    assert [v.name for v in env] == [
        "VGPU_SHARE_VENDOR",
        "VGPU_SHARE_DEVICES",
        "VGPU_SHARE_MEMORY_LIMIT_0",
        "VGPU_SHARE_CORE_LIMIT_0",
    ]


@pytest.mark.parametrize("vendor_id", VENDORS)
def test_a_claim_of_each_class_is_an_engine_request_of_its_family(vendor_id):
    vendor = dra_vendor(vendor_id)
    claim = {
        "metadata": {"namespace": "default", "name": "c"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "card",
                        "exactly": {
                            "deviceClassName": vendor.device_class,
                            "capacity": {"requests": {"memory": "4Gi", "cores": "50"}},
                        },
                    }
                ]
            }
        },
    }
    request, names = claim_request(claim, dra_vendor_registry())
    ((device_request,),) = request.containers
    assert (device_request.vendor, device_request.memory_mib, device_request.cores) == (
        vendor.request_type,
        4096,
        50,
    )
    adapter = dra_vendor_registry().get(vendor.request_type)
    assert (adapter.fit, adapter.score, adapter.read_request) == (None, None, None)
    assert names == ("card",)


def test_the_monitor_reads_any_vendors_mock_file(tmp_path: Path):
    path = tmp_path / "gpus.yaml"
    path.write_text(
        "vendor: mlu\ngpus:\n  - {uuid: MLU-0, index: 0, memoryUsed: 1024, utilization: 40}\n"
    )
    (host,) = MockHostBackend(path).read()
    assert (host.vendor, host.device_type, host.memory_used_bytes, host.utilization_percent) == (
        "MLU",
        "MLU370-X8",
        1024,
        40,
    )
    path.write_text("vendor: tpu\ngpus: []\n")
    assert MockHostBackend(path).read() == ()
