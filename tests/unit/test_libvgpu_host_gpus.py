"""The NVML host backend against a stand-in NVML module (the only fake library allowed)."""

from __future__ import annotations

from types import SimpleNamespace

from libvgpu.host_gpus import HostGpu, NvmlHostBackend, StaticHostBackend


class FakeNvmlError(Exception):
    pass


def fake_nvml(devices: list[dict], calls: list[str]) -> SimpleNamespace:
    def handle(index: int) -> dict:
        device = devices[index]
        if device.get("broken"):
            raise FakeNvmlError("GPU is lost")
        return device

    return SimpleNamespace(
        NVMLError=FakeNvmlError,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: len(devices),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetUUID=lambda device: device["uuid"],
        nvmlDeviceGetName=lambda device: device["name"],
        nvmlDeviceGetMemoryInfo=lambda device: SimpleNamespace(used=device["used"], total=80),
        nvmlDeviceGetUtilizationRates=lambda device: SimpleNamespace(
            gpu=device["gpu"], memory=device["memory"]
        ),
    )


def test_nvml_backend_reads_every_readable_gpu():
    calls: list[str] = []
    module = fake_nvml(
        [
            {"uuid": "GPU-a", "name": "NVIDIA H100", "used": 10, "gpu": 50, "memory": 20},
            {"broken": True},
            {"uuid": b"GPU-c", "name": b"Tesla T4", "used": 30, "gpu": 5, "memory": 1},
        ],
        calls,
    )
    backend = NvmlHostBackend(module)
    gpus = backend.read()
    backend.close()

    assert calls == ["init", "shutdown"]
    assert gpus == (
        HostGpu(0, "GPU-a", "NVIDIA-NVIDIA H100", 10, 50, 20),
        HostGpu(2, "GPU-c", "NVIDIA-Tesla T4", 30, 5, 1),
    )


def test_nvml_backend_survives_a_failing_device_count():
    module = fake_nvml([], [])

    def failing_count() -> int:
        raise FakeNvmlError("driver gone")

    module.nvmlDeviceGetCount = failing_count
    assert NvmlHostBackend(module).read() == ()


def test_static_backend_returns_what_it_was_given():
    gpu = HostGpu(0, "GPU-a", "NVIDIA-X", 1, 2, 3)
    assert StaticHostBackend([gpu]).read() == (gpu,)
