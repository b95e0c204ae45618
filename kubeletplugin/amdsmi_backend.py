"""AMD GPUs through AMD SMI's Python binding (`amdsmi`, shipped with ROCm).

The module is injected as pynvml is for `NvmlBackend`, so tests hand in a fake
with the same calls and the import happens only on a node that asked for it
(`--gpu-backend amdsmi`). Every field comes from a documented amdsmi call:
`amdsmi_get_processor_handles` (GPUs only, from `amdsmi_init(INIT_AMD_GPUS)`),
`amdsmi_get_gpu_device_uuid`, `amdsmi_get_gpu_device_bdf`,
`amdsmi_get_gpu_asic_info` (`market_name`), `amdsmi_get_gpu_memory_total`
(`AmdSmiMemoryType.VRAM`, bytes), `amdsmi_topo_get_numa_node_number` and
`amdsmi_get_gpu_driver_info`. The DRM card and render node numbers a container
needs come from `amdsmi_get_gpu_enumeration_info` (ROCm 6.4 and later), else
from the PCI device's `drm/` directory in sysfs, since older bindings lack it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.objects.dra_vendors import dra_vendor
from kubeletplugin.gpus import GpuInfo, read_sysfs_numa

AMD = dra_vendor("amd")
UNKNOWN_NAME = "N/A"
"""What amdsmi's Python layer returns for a string the library left empty."""
NO_NUMA_AFFINITY = 0xFFFF_FFFF
"""The kernel's -1 (no affinity) as amdsmi's uint32 carries it."""
_DRM_NODE = re.compile(r"^(card|renderD)(\d+)$")


class AmdSmiCallError(DriverError):
    """An amdsmi call failed; the message names the call, the device and amdsmi's reason."""

    def __init__(self, call: str, device: str, reason: str) -> None:
        super().__init__(f"amdsmi {call} failed for {device}: {reason}")
        self.call = call
        self.device = device
        self.reason = reason


DrmNodes = tuple[int | None, int | None]
"""(card number, render node number) of one GPU; None where unknown."""


def read_sysfs_drm_nodes(bus_id: str, root: Path = Path("/sys/bus/pci/devices")) -> DrmNodes:
    """The `cardN` and `renderDN` entries the amdgpu driver made under the PCI device."""
    name = bus_id.lower()
    if "/" in name or name.startswith("."):
        return None, None
    try:
        entries = [entry.name for entry in (root / name / "drm").iterdir()]
    except OSError:
        return None, None
    found: dict[str, int] = {}
    for entry in sorted(entries):
        match = _DRM_NODE.match(entry)
        if match is not None:
            found.setdefault(match.group(1), int(match.group(2)))
    return found.get("card"), found.get("renderD")


@dataclass(slots=True)
class AmdSmiBackend:
    """GPUs through AMD SMI. `amdsmi` is the ROCm `amdsmi` module (or a fake with its API);
    `read_numa` and `read_drm_nodes` read sysfs when amdsmi cannot tell."""

    amdsmi: Any
    read_numa: Callable[[str], int] = field(default=read_sysfs_numa)
    read_drm_nodes: Callable[[str], DrmNodes] = field(default=read_sysfs_drm_nodes)
    has_device_nodes = True

    def discover(self) -> Sequence[GpuInfo]:
        smi = self.amdsmi
        self._call("amdsmi_init", "this node", smi.AmdSmiInitFlags.INIT_AMD_GPUS)
        try:
            handles = self._call("amdsmi_get_processor_handles", "this node")
            return [self._gpu(index, handle) for index, handle in enumerate(handles)]
        finally:
            self._call("amdsmi_shut_down", "this node")

    def _gpu(self, index: int, handle: Any) -> GpuInfo:
        bdf = str(self._call("amdsmi_get_gpu_device_bdf", f"GPU {index}", handle))
        device = f"GPU {index} ({bdf})"
        asic = self._call("amdsmi_get_gpu_asic_info", device, handle)
        name = str(asic.get("market_name") or "").strip()
        driver = self._call("amdsmi_get_gpu_driver_info", device, handle)
        card, render = self._drm_nodes(handle, bdf)
        return GpuInfo(
            uuid=str(self._call("amdsmi_get_gpu_device_uuid", device, handle)),
            index=index,
            minor=index if card is None else card,
            product_name=name if name and name != UNKNOWN_NAME else AMD.family,
            memory_bytes=int(
                self._call(
                    "amdsmi_get_gpu_memory_total",
                    device,
                    handle,
                    self.amdsmi.AmdSmiMemoryType.VRAM,
                )
            ),
            numa_node=self._numa(handle, bdf, device),
            pci_bus_id=bdf,
            driver_version=str(driver.get("driver_version") or ""),
            vendor=AMD.id,
            drm_render=render,
        )

    def _numa(self, handle: Any, bdf: str, device: str) -> int:
        node = int(self._call("amdsmi_topo_get_numa_node_number", device, handle))
        if 0 <= node < NO_NUMA_AFFINITY:
            return node
        return self.read_numa(bdf)

    def _drm_nodes(self, handle: Any, bdf: str) -> DrmNodes:
        getter = getattr(self.amdsmi, "amdsmi_get_gpu_enumeration_info", None)
        if getter is not None:
            try:
                info = getter(handle)
            except self.amdsmi.AmdSmiException:
                info = None
            if info is not None:
                return int(info["drm_card"]), int(info["drm_render"])
        return self.read_drm_nodes(bdf)

    def _call(self, name: str, device: str, *args: Any) -> Any:
        try:
            return getattr(self.amdsmi, name)(*args)
        except self.amdsmi.AmdSmiException as error:
            raise AmdSmiCallError(name, device, str(error) or type(error).__name__) from error
