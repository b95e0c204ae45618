"""Reading the GPUs' links to each other from NVML, as HAMi's device plugin does.

For each ordered pair: the PCIe path (`nvmlDeviceGetTopologyCommonAncestor`)
and the NVLinks, counted as the enabled links whose remote PCI device is the
peer or, when a GPU's links end at NVSwitches, the fewer of both GPUs'
switch links (`links.go`). A call NVML does not support leaves that part
unknown rather than failing discovery: a node without NVLink still has GPUs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubeletplugin.gpu_topology import MAX_NVLINKS, GpuLink, P2PLevel
from libvgpu.host_gpus import nvml_text

NVML_FEATURE_ENABLED = 1
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2

NVML_LEVELS = {
    0: P2PLevel.INTERNAL,
    10: P2PLevel.SINGLE,
    20: P2PLevel.MULTIPLE,
    30: P2PLevel.HOSTBRIDGE,
    40: P2PLevel.NODE,
    50: P2PLevel.SYSTEM,
}
"""`nvmlGpuTopologyLevel_t` values (NVML_TOPOLOGY_CPU is the old name of NODE)."""


@dataclass(frozen=True, slots=True)
class NvmlGpu:
    uuid: str
    handle: Any
    bus_id: str


@dataclass(frozen=True, slots=True)
class _NvLinks:
    remote_bus_ids: tuple[str, ...]
    """The remote PCI device of each enabled link, lower case."""
    switch_links: int
    """Enabled links that end at an NVSwitch."""


def read_links(nvml: Any, gpus: Sequence[NvmlGpu]) -> dict[str, tuple[GpuLink, ...]]:
    """GPU UUID -> its links to every other GPU in `gpus`."""
    nvlinks = {gpu.uuid: _enabled_links(nvml, gpu.handle) for gpu in gpus}
    links: dict[str, tuple[GpuLink, ...]] = {}
    for gpu in gpus:
        links[gpu.uuid] = tuple(
            GpuLink(
                peer.uuid,
                _common_ancestor(nvml, gpu.handle, peer.handle),
                _nvlink_count(nvlinks[gpu.uuid], nvlinks[peer.uuid], peer.bus_id),
            )
            for peer in gpus
            if peer.uuid != gpu.uuid
        )
    return links


def _common_ancestor(nvml: Any, handle: Any, peer: Any) -> P2PLevel | None:
    level = _call(nvml, nvml.nvmlDeviceGetTopologyCommonAncestor, handle, peer)
    return None if level is None else NVML_LEVELS.get(int(level))


def _nvlink_count(mine: _NvLinks, theirs: _NvLinks, peer_bus_id: str) -> int:
    """Direct links to the peer; else, when both reach NVSwitches, the fewer switch links."""
    direct = mine.remote_bus_ids.count(peer_bus_id.lower())
    if direct:
        return direct
    if mine.switch_links and theirs.switch_links:
        return min(mine.switch_links, theirs.switch_links)
    return 0


def _enabled_links(nvml: Any, handle: Any) -> _NvLinks:
    remote: list[str] = []
    switch_links = 0
    for link in range(MAX_NVLINKS):
        if _call(nvml, nvml.nvmlDeviceGetNvLinkState, handle, link) != NVML_FEATURE_ENABLED:
            continue
        info = _call(nvml, nvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
        if info is not None:
            remote.append(nvml_text(info.busId).lower())
        kind = _call(nvml, nvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
        switch_links += kind == NVML_NVLINK_DEVICE_TYPE_SWITCH
    return _NvLinks(tuple(remote), switch_links)


def _call(nvml: Any, function: Any, *args: Any) -> Any:
    """NVML's answer, None where it has none (a link the GPU lacks, an older driver)."""
    try:
        return function(*args)
    except nvml.NVMLError:
        return None
