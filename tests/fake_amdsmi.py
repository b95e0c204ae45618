"""A stand-in for ROCm's `amdsmi` Python module: the calls GPU discovery makes, with
values shaped as AMD's Python API reference documents them (BDF and UUID strings, the
asic-info and driver-info dicts, VRAM bytes, the enumeration-info dict of ROCm 6.4+),
and its exception classes, so `AmdSmiBackend` runs without an AMD card."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from enum import IntEnum

GIB = 1 << 30
NOT_SUPPORTED = 2
"""AMDSMI_STATUS_NOT_SUPPORTED."""


class AmdSmiException(Exception):  # noqa: N818 - amdsmi's own name
    """amdsmi's base exception class."""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code

    def __str__(self) -> str:
        return f"An error occured with code: {self.err_code}(AMDSMI_STATUS_NOT_SUPPORTED)"


class AmdSmiParameterException(AmdSmiException):
    pass


class AmdSmiInitFlags(IntEnum):
    INIT_AMD_CPUS = 1 << 0
    INIT_AMD_GPUS = 1 << 1


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


@dataclass
class FakeCard:
    """One card as amdsmi reports it; `failing` names calls that raise NOT_SUPPORTED."""

    bdf: str
    uuid: str
    market_name: str = "AMD Instinct MI300X"
    vram: int = 192 * GIB
    numa: int = 0
    drm_card: int = 1
    drm_render: int = 128
    failing: set[str] = field(default_factory=set)


class Handle:
    """amdsmi_processor_handle: the functions refuse anything else."""

    def __init__(self, card: FakeCard) -> None:
        self.card = card


def fake_amdsmi(cards: list[FakeCard], *, enumeration: bool = True) -> types.ModuleType:
    """The module; `calls` records init and shut-down, `enumeration=False` is a binding
    older than ROCm 6.4 (no `amdsmi_get_gpu_enumeration_info`)."""
    module = types.ModuleType("amdsmi")
    calls: list[str] = []
    module.calls = calls
    module.AmdSmiException = AmdSmiException
    module.AmdSmiLibraryException = AmdSmiLibraryException
    module.AmdSmiInitFlags = AmdSmiInitFlags
    module.AmdSmiMemoryType = AmdSmiMemoryType

    def card_of(name: str, handle: object) -> FakeCard:
        if not isinstance(handle, Handle):
            raise AmdSmiParameterException(f"{name}: not a processor handle")
        if name in handle.card.failing:
            raise AmdSmiLibraryException(NOT_SUPPORTED)
        return handle.card

    def init(flags: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        calls.append(f"init:{AmdSmiInitFlags(flags).name}")

    def memory_total(handle: object, mem_type: AmdSmiMemoryType) -> int:
        card = card_of("amdsmi_get_gpu_memory_total", handle)
        if not isinstance(mem_type, AmdSmiMemoryType):
            raise AmdSmiParameterException("mem_type")
        return card.vram if mem_type is AmdSmiMemoryType.VRAM else 512 << 20

    module.amdsmi_init = init
    module.amdsmi_shut_down = lambda: calls.append("shut_down")
    module.amdsmi_get_processor_handles = lambda: [Handle(card) for card in cards]
    module.amdsmi_get_gpu_device_bdf = lambda h: card_of("amdsmi_get_gpu_device_bdf", h).bdf
    module.amdsmi_get_gpu_device_uuid = lambda h: card_of("amdsmi_get_gpu_device_uuid", h).uuid
    module.amdsmi_get_gpu_asic_info = lambda h: {
        "market_name": card_of("amdsmi_get_gpu_asic_info", h).market_name,
        "vendor_id": 0x1002,
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": 0x1002,
        "device_id": 0x74A1,
        "rev_id": "0x00",
        "asic_serial": "0xD1CF5C0A8C7F2D83",
        "oam_id": 0,
        "num_compute_units": 304,
        "target_graphics_version": "gfx942",
    }
    module.amdsmi_get_gpu_memory_total = memory_total
    module.amdsmi_topo_get_numa_node_number = lambda h: (
        card_of("amdsmi_topo_get_numa_node_number", h).numa
    )

    def driver_info(handle: object) -> dict:
        card_of("amdsmi_get_gpu_driver_info", handle)
        return {"driver_name": "amdgpu", "driver_version": "6.8.5", "driver_date": "2015/01/01"}

    module.amdsmi_get_gpu_driver_info = driver_info
    if enumeration:

        def enumeration_info(handle: object) -> dict:
            card = card_of("amdsmi_get_gpu_enumeration_info", handle)
            return {
                "drm_render": card.drm_render,
                "drm_card": card.drm_card,
                "hsa_id": 1,
                "hip_id": 0,
                "hip_uuid": "GPU-4b2c1a0f7d3e9a81",
            }

        module.amdsmi_get_gpu_enumeration_info = enumeration_info
    return module
