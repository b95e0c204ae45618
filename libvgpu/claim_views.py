"""One claim's several shared-region files seen as one, for its metric series.

A claim whose containers name different requests gets one region file per
view (`kubeletplugin/claim_layout.py`), so each container keeps its own limits.
The monitor labels a claim's series by pod, device index and uuid, not by
container, so two views with the same GPU at the same index would give two
samples of one series. Their regions are summed instead, per (index, uuid):
what the claim uses and may use on that GPU. Pure: snapshots in, a snapshot out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from libvgpu.cache_files import CacheReading
from libvgpu.cache_paths import CacheOwnerKind
from libvgpu.region_reader import DeviceUsage, RegionSnapshot


def merge_snapshots(snapshots: Sequence[RegionSnapshot]) -> RegionSnapshot:
    """The first snapshot with every device summed over all of them by (index, uuid) and
    the newest kernel time; devices keep their first-seen order. It carries no process
    slots: theirs are decoded per file's device count, and series need only the sums."""
    devices: dict[tuple[int, str], DeviceUsage] = {}
    for snapshot in snapshots:
        for device in snapshot.devices:
            key = (device.index, device.uuid)
            seen = devices.get(key)
            devices[key] = device if seen is None else _summed(seen, device)
    return replace(
        snapshots[0],
        devices=tuple(devices.values()),
        last_kernel_time=max(snapshot.last_kernel_time for snapshot in snapshots),
        live_slots=(),
    )


def _summed(a: DeviceUsage, b: DeviceUsage) -> DeviceUsage:
    return replace(
        a,
        limit_bytes=a.limit_bytes + b.limit_bytes,
        sm_limit_percent=a.sm_limit_percent + b.sm_limit_percent,
        used_bytes=a.used_bytes + b.used_bytes,
        context_bytes=a.context_bytes + b.context_bytes,
        module_bytes=a.module_bytes + b.module_bytes,
        data_bytes=a.data_bytes + b.data_bytes,
        monitor_used_bytes=a.monitor_used_bytes + b.monitor_used_bytes,
        sm_util=a.sm_util + b.sm_util,
    )


class ClaimViews:
    """Folds the readings of each claim with several region files into one reading.

    The merged snapshot is kept while its files' snapshots stay the same objects,
    so the renderer's per-file text cache still hits for an unchanged claim.
    """

    def __init__(self) -> None:
        self._merged: dict[str, tuple[tuple[RegionSnapshot, ...], RegionSnapshot]] = {}

    def fold(self, readings: Sequence[CacheReading]) -> list[CacheReading]:
        groups: dict[str, list[CacheReading]] = {}
        result: list[CacheReading] = []
        for reading in readings:
            if reading.key.kind is CacheOwnerKind.CLAIM:
                groups.setdefault(reading.key.uid, []).append(reading)
            else:
                result.append(reading)
        merged: dict[str, tuple[tuple[RegionSnapshot, ...], RegionSnapshot]] = {}
        for group in groups.values():
            if len(group) == 1:
                result.append(group[0])
                continue
            group.sort(key=lambda reading: reading.path)
            parts = tuple(reading.snapshot for reading in group)
            first = group[0].path
            kept = self._merged.get(first)
            same = kept is not None and len(kept[0]) == len(parts)
            if same and all(x is y for x, y in zip(kept[0], parts, strict=True)):
                snapshot = kept[1]
            else:
                snapshot = merge_snapshots(parts)
            merged[first] = (parts, snapshot)
            result.append(CacheReading(first, group[0].key, snapshot))
        self._merged = merged
        return result
