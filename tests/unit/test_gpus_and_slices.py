"""GPU discovery (mock file, fake NVML module) and the ResourceSlices built from it."""

from __future__ import annotations

import types
from pathlib import Path

import kubernetes_validate
import pytest

from dra_driver.errors import InvalidParameterError
from kubeletplugin.gpus import GpuInfo, MockBackend, NvmlBackend, read_sysfs_numa
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices, vendor_type

GIB = 1 << 30


class FakeNvmlError(Exception):
    pass


def fake_nvml(gpus: list[dict]) -> types.ModuleType:
    """A stand-in for the pynvml module with the calls discovery makes."""
    module = types.ModuleType("pynvml")
    module.NVMLError = FakeNvmlError
    calls: list[str] = []
    module.calls = calls
    module.nvmlInit = lambda: calls.append("init")
    module.nvmlShutdown = lambda: calls.append("shutdown")
    module.nvmlSystemGetDriverVersion = lambda: b"550.54.15"
    module.nvmlSystemGetCudaDriverVersion = lambda: 12040
    module.nvmlDeviceGetCount = lambda: len(gpus)
    module.nvmlDeviceGetHandleByIndex = lambda i: gpus[i]
    module.nvmlDeviceGetUUID = lambda h: h["uuid"]
    module.nvmlDeviceGetMinorNumber = lambda h: h["minor"]
    module.nvmlDeviceGetName = lambda h: h["name"]
    module.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=h["memory"])
    module.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=h["bus"].encode())
    module.nvmlDeviceGetCudaComputeCapability = lambda h: (9, 0)

    def numa(handle):
        if handle["numa"] is None:
            raise FakeNvmlError("not supported")
        return handle["numa"]

    module.nvmlDeviceGetNumaNodeId = numa
    return module


def test_nvml_backend_reads_every_field():
    nvml = fake_nvml(
        [
            {
                "uuid": "GPU-a",
                "minor": 3,
                "name": b"NVIDIA H100 80GB HBM3",
                "memory": 80 * GIB,
                "bus": "00000000:3B:00.0",
                "numa": 1,
            },
            {
                "uuid": "GPU-b",
                "minor": 4,
                "name": "NVIDIA H100 80GB HBM3",
                "memory": 80 * GIB,
                "bus": "00000000:86:00.0",
                "numa": None,
            },
        ]
    )
    backend = NvmlBackend(
        nvml,
        read_numa=lambda bus: 7 if bus.endswith("86:00.0") else 0,
        unhealthy={"GPU-b": "xid-79"},
    )
    first, second = backend.discover()
    assert first == GpuInfo(
        uuid="GPU-a",
        index=0,
        minor=3,
        product_name="NVIDIA H100 80GB HBM3",
        memory_bytes=80 * GIB,
        numa_node=1,
        pci_bus_id="00000000:3B:00.0",
        driver_version="550.54.15",
        cuda_driver_version="12.4",
        compute_capability="9.0",
    )
    assert (second.numa_node, second.healthy, second.unhealthy_reason) == (7, False, "xid-79")
    assert nvml.calls == ["init", "shutdown"]


def test_sysfs_numa_reads_and_refuses_odd_bus_ids(tmp_path: Path):
    device = tmp_path / "0000:3b:00.0"
    device.mkdir()
    (device / "numa_node").write_text("1\n")
    assert read_sysfs_numa("00000000:3B:00.0", tmp_path) == 1
    assert read_sysfs_numa("../etc", tmp_path) == 0
    assert read_sysfs_numa("0000:ff:00.0", tmp_path) == 0


def test_mock_backend_reads_quantities(tmp_path: Path):
    config = tmp_path / "gpus.yaml"
    config.write_text(
        "gpus:\n"
        "  - {uuid: GPU-m0, index: 0, memory: 16Gi, numa: 1}\n"
        "  - {uuid: GPU-m1, index: 1, minor: 5, memory: 1073741824, healthy: false,"
        " unhealthyReason: xid-48}\n"
    )
    first, second = MockBackend(config).discover()
    assert (first.memory_bytes, first.minor, first.numa_node) == (16 * GIB, 0, 1)
    assert (second.minor, second.healthy, second.unhealthy_reason) == (5, False, "xid-48")


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ("gpus: [{uuid: g, index: 0, memory: lots}]", "gpus[0].memory"),
        ("gpus: [{index: 0}]", "uuid"),
    ],
)
def test_mock_backend_bad_file_names_the_problem(tmp_path: Path, content: str, field: str):
    config = tmp_path / "gpus.yaml"
    config.write_text(content)
    with pytest.raises(InvalidParameterError, match=field.replace("[", r"\[").replace("]", r"\]")):
        MockBackend(config).discover()


def gpu(index: int, **kw) -> GpuInfo:
    values = dict(
        uuid=f"GPU-{index}",
        index=index,
        minor=index,
        product_name="NVIDIA A100-SXM4-80GB",
        memory_bytes=80 * GIB + 123,
        driver_version="550.54.15",
        compute_capability="8.0",
    )
    values.update(kw)
    return GpuInfo(**values)


def test_slice_device_attributes_and_capacity():
    (slice_,) = build_resource_slices("node-a", "uid-a", [gpu(0)], SliceSettings(split_count=4), 3)
    assert slice_["metadata"]["name"] == "node-a-vgpu.hami.io-0"
    assert slice_["metadata"]["ownerReferences"][0]["uid"] == "uid-a"
    assert slice_["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": 1}
    (device,) = slice_["spec"]["devices"]
    assert device["name"] == "gpu-0"
    assert device["allowMultipleAllocations"] is True
    assert device["attributes"]["type"] == {"string": "NVIDIA-A100-SXM4-80GB"}
    assert device["attributes"]["driverVersion"] == {"version": "550.54.15"}
    assert device["attributes"]["cudaComputeCapability"] == {"version": "8.0.0"}
    assert device["capacity"]["memory"]["value"] == str(80 * GIB)
    assert device["capacity"]["cores"]["requestPolicy"]["default"] == "0"
    assert device["capacity"]["shares"] == {
        "value": "4",
        "requestPolicy": {"default": "1", "validValues": ["1"]},
    }
    assert "taints" not in device


def test_unhealthy_and_controller_mode_devices_are_tainted():
    settings = SliceSettings(allocation_taint=Taint("vgpu.hami.io/allocation", "controller"))
    (slice_,) = build_resource_slices(
        "n", "u", [gpu(0, healthy=False, unhealthy_reason="xid-79")], settings, 1
    )
    assert slice_["spec"]["devices"][0]["taints"] == [
        {"key": "vgpu.hami.io/unhealthy", "value": "xid-79", "effect": "NoSchedule"},
        {"key": "vgpu.hami.io/allocation", "value": "controller", "effect": "NoSchedule"},
    ]


def test_scaling_changes_published_capacity():
    settings = SliceSettings(memory_scaling=1.5, core_scaling=2)
    device = build_resource_slices("n", "u", [gpu(0, memory_bytes=16 * GIB)], settings, 1)[0][
        "spec"
    ]["devices"][0]
    assert device["capacity"]["memory"]["value"] == str(24 * GIB)
    assert device["capacity"]["cores"]["value"] == "200"


def test_large_pools_split_into_several_slices():
    gpus = [gpu(i) for i in range(130)]
    slices = build_resource_slices("n", "u", gpus, SliceSettings(), 1)
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 2]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {2}
    tainted = build_resource_slices(
        "n", "u", gpus, SliceSettings(allocation_taint=Taint("k", "v")), 1
    )
    assert [len(s["spec"]["devices"]) for s in tainted] == [64, 64, 2]


def test_slices_pass_the_kubernetes_1_36_schema():
    settings = SliceSettings(allocation_taint=Taint("vgpu.hami.io/allocation", "controller"))
    for slice_ in build_resource_slices(
        "node-a", "uid", [gpu(0), gpu(1, healthy=False)], settings, 2
    ):
        kubernetes_validate.validate(slice_, "1.36.0", strict=True)


def test_vendor_type_prefixes_nvidia():
    assert vendor_type("Tesla T4") == "NVIDIA-Tesla-T4"
    assert vendor_type("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
