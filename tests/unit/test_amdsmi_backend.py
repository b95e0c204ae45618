"""AMD discovery through a fake `amdsmi` module, choosing the backend (flag, env var,
the missing-module error) and the AMD device nodes a claim's CDI spec lists."""

from __future__ import annotations

import os
import types
from pathlib import Path

import pytest
from fake_amdsmi import GIB, FakeCard, fake_amdsmi

from cdi.spec import ClaimDeviceEdits, build_claim_spec
from dra_driver.cli import build_parser
from dra_driver.errors import InvalidParameterError
from kubeletplugin.amdsmi_backend import AmdSmiBackend, AmdSmiCallError, read_sysfs_drm_nodes
from kubeletplugin.command import GPU_BACKEND_CHOICES
from kubeletplugin.gpu_sources import GPU_BACKENDS, GpuLibraryMissingError, open_gpu_backend
from kubeletplugin.gpus import GpuInfo, MockBackend, NvmlBackend
from kubeletplugin.host_files import (
    AMD_CONTROL_DEVICE_NODES,
    HostSetupError,
    amd_device_nodes,
    host_amd_device_nodes,
)
from kubeletplugin.service import settings_from_args
from libvgpu.container_edits import ContainerEdits, EnvVar

CARDS = [
    FakeCard("0000:23:00.0", "e4ff74a1-0000-1000-80ff-ffffffffffff", numa=0, drm_card=1),
    FakeCard(
        "0000:c3:00.0",
        "a6ff74a1-0000-1000-8088-ffffffffffff",
        numa=1,
        drm_card=2,
        drm_render=129,
    ),
]


def test_every_field_comes_from_its_amdsmi_call():
    smi = fake_amdsmi(CARDS)
    first, second = AmdSmiBackend(smi, read_numa=lambda bdf: 9).discover()
    assert first == GpuInfo(
        uuid="e4ff74a1-0000-1000-80ff-ffffffffffff",
        index=0,
        minor=1,
        product_name="AMD Instinct MI300X",
        memory_bytes=192 * GIB,
        numa_node=0,
        pci_bus_id="0000:23:00.0",
        driver_version="6.8.5",
        vendor="amd",
        drm_render=128,
    )
    assert (second.index, second.minor, second.drm_render, second.numa_node) == (1, 2, 129, 1)
    assert smi.calls == ["init:INIT_AMD_GPUS", "shut_down"]


def test_a_binding_without_enumeration_info_reads_the_drm_nodes_from_sysfs(tmp_path: Path):
    drm = tmp_path / "0000:23:00.0" / "drm"
    drm.mkdir(parents=True)
    for name in ("card3", "renderD131", "controlD67"):
        (drm / name).mkdir()
    smi = fake_amdsmi(CARDS[:1], enumeration=False)
    (gpu,) = AmdSmiBackend(
        smi, read_drm_nodes=lambda bdf: read_sysfs_drm_nodes(bdf, tmp_path)
    ).discover()
    assert (gpu.minor, gpu.drm_render) == (3, 131)


def test_unsupported_enumeration_info_falls_back_to_sysfs_and_then_to_the_index():
    card = FakeCard("0000:23:00.0", "u-1", failing={"amdsmi_get_gpu_enumeration_info"})
    (gpu,) = AmdSmiBackend(fake_amdsmi([card]), read_drm_nodes=lambda bdf: (None, None)).discover()
    assert (gpu.minor, gpu.drm_render) == (0, None)


def test_no_numa_affinity_and_an_empty_market_name_have_fallbacks():
    card = FakeCard("0000:23:00.0", "u-1", numa=0xFFFF_FFFF, market_name="N/A")
    (gpu,) = AmdSmiBackend(fake_amdsmi([card]), read_numa=lambda bdf: 3).discover()
    assert gpu.numa_node == 3
    assert gpu.product_name == "AMD Instinct GPU"


def test_a_failing_call_is_a_typed_error_naming_the_call_and_the_device():
    card = FakeCard("0000:c3:00.0", "u-1", failing={"amdsmi_get_gpu_memory_total"})
    smi = fake_amdsmi([card])
    with pytest.raises(AmdSmiCallError) as caught:
        AmdSmiBackend(smi).discover()
    assert caught.value.call == "amdsmi_get_gpu_memory_total"
    assert caught.value.device == "GPU 0 (0000:c3:00.0)"
    assert str(caught.value).startswith(
        "amdsmi amdsmi_get_gpu_memory_total failed for GPU 0 (0000:c3:00.0): An error occured"
    )
    assert smi.calls[-1] == "shut_down", "the library is shut down after a failure too"


def test_sysfs_drm_nodes_of_an_unknown_or_odd_device_are_unknown(tmp_path: Path):
    assert read_sysfs_drm_nodes("0000:99:00.0", tmp_path) == (None, None)
    assert read_sysfs_drm_nodes("../etc", tmp_path) == (None, None)


def importer(modules: dict[str, types.ModuleType]):
    def import_module(name: str) -> types.ModuleType:
        if name not in modules:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return modules[name]

    return import_module


def test_the_backend_flag_chooses_and_imports_only_the_chosen_library(tmp_path: Path):
    smi = fake_amdsmi(CARDS)
    only_amd = importer({"amdsmi": smi})
    amd = open_gpu_backend(None, backend="amdsmi", import_module=only_amd)
    assert isinstance(amd, AmdSmiBackend) and amd.amdsmi is smi
    nvml = types.ModuleType("pynvml")
    assert isinstance(open_gpu_backend(None, import_module=importer({"pynvml": nvml})), NvmlBackend)
    mock = tmp_path / "gpus.yaml"
    assert isinstance(open_gpu_backend(mock, import_module=only_amd), MockBackend)
    assert isinstance(open_gpu_backend(mock, backend="mock", import_module=only_amd), MockBackend)


def test_a_missing_amdsmi_module_says_what_to_install():
    with pytest.raises(GpuLibraryMissingError) as caught:
        open_gpu_backend(None, backend="amdsmi", import_module=importer({}))
    message = str(caught.value)
    assert message.startswith("--gpu-backend amdsmi: cannot import the amdsmi module")
    assert "install ROCm's amdsmi Python package" in message


def test_contradicting_backend_choices_are_refused(tmp_path: Path):
    with pytest.raises(InvalidParameterError) as caught:
        open_gpu_backend(None, backend="mock")
    assert caught.value.field == "--gpu-backend"
    with pytest.raises(InvalidParameterError) as caught:
        open_gpu_backend(tmp_path / "gpus.yaml", backend="amdsmi")
    assert caught.value.field == "--mock-gpus"
    with pytest.raises(InvalidParameterError, match="'rocm' is not one of nvml, amdsmi, mock"):
        open_gpu_backend(None, backend="rocm")


def test_the_cli_choices_are_the_backends():
    assert GPU_BACKEND_CHOICES == GPU_BACKENDS


def test_the_kubelet_plugin_takes_the_backend_by_flag_and_env(monkeypatch: pytest.MonkeyPatch):
    parser = build_parser()
    flags = ["kubelet-plugin", "--node-name", "n1"]
    assert settings_from_args(parser.parse_args(flags)).gpu_backend is None
    chosen = parser.parse_args([*flags, "--gpu-backend", "amdsmi"])
    assert settings_from_args(chosen).gpu_backend == "amdsmi"
    monkeypatch.setenv("GPU_BACKEND", "amdsmi")
    assert settings_from_args(build_parser().parse_args(flags)).gpu_backend == "amdsmi"


def test_an_unknown_backend_in_the_env_var_is_a_usage_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("GPU_BACKEND", "rocm")
    with pytest.raises(SystemExit) as caught:
        build_parser().parse_args(["kubelet-plugin", "--node-name", "n1"])
    assert caught.value.code == 2


def amd_gpu(index: int, card: int, render: int | None) -> GpuInfo:
    return GpuInfo(f"u-{index}", index, card, "MI300X", GIB, vendor="amd", drm_render=render)


def test_amd_device_nodes_need_kfd_and_the_render_node(tmp_path: Path):
    (tmp_path / "dri").mkdir()
    gpu = amd_gpu(0, 1, 128)
    with pytest.raises(HostSetupError, match=f"device node {tmp_path}/kfd"):
        host_amd_device_nodes(tmp_path, [gpu])
    os.mkfifo(tmp_path / "kfd")
    with pytest.raises(HostSetupError, match=f"device node {tmp_path}/dri/renderD128 of AMD"):
        host_amd_device_nodes(tmp_path, [gpu])
    os.mkfifo(tmp_path / "dri" / "renderD128")
    assert host_amd_device_nodes(tmp_path, [gpu]) == {
        "/dev/kfd": str(tmp_path / "kfd"),
        "/dev/dri/renderD128": str(tmp_path / "dri" / "renderD128"),
    }, "card1 is listed only when the host has it"
    os.mkfifo(tmp_path / "dri" / "card1")
    assert "/dev/dri/card1" in host_amd_device_nodes(tmp_path, [gpu])
    with pytest.raises(HostSetupError, match=r"AMD GPU u-1 .* has no known render node"):
        host_amd_device_nodes(tmp_path, [amd_gpu(1, 2, None)])


def test_an_amd_claim_spec_lists_kfd_once_and_each_cards_dri_nodes():
    gpus = [amd_gpu(0, 1, 128), amd_gpu(1, 2, 129)]
    host = {path: f"/host{path}" for gpu in gpus for path in amd_device_nodes(gpu)}
    host["/dev/kfd"] = "/host/dev/kfd"
    edits = ContainerEdits(env=(EnvVar("ROCR_VISIBLE_DEVICES", "0,1"),), mounts=())
    spec = build_claim_spec(
        "0b4f6a1e-3d2c-4f5e-8a9b-1c2d3e4f5a6b",
        [
            ClaimDeviceEdits(f"gpu-{g.index}", g.minor, edits, None, amd_device_nodes(g))
            for g in gpus
        ],
        host_nodes=host,
        control_nodes=AMD_CONTROL_DEVICE_NODES,
    )
    document = spec.to_document()
    assert document["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/kfd", "hostPath": "/host/dev/kfd"}
    ]
    assert [
        [n["path"] for n in d["containerEdits"]["deviceNodes"]] for d in document["devices"]
    ] == [
        ["/dev/dri/card1", "/dev/dri/renderD128"],
        ["/dev/dri/card2", "/dev/dri/renderD129"],
    ]
