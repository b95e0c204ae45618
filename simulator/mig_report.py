"""Which pod holds which MIG partition: the report's rows for partition allocations. Pure.

A partition is a whole device (`dra_driver.objects.mig_devices`): the claim's
allocation names it, and its name says the card, the profile and the first
memory slice; the device as its ResourceSlice publishes it adds the profile's
own name, the card's uuid and the placement's size. The cluster status lists
every published placement as a device of its own, so the report shows the
partitions here, one row per allocated one, and leaves them out of the GPU table.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rich.table import Table

from dra_driver.objects.mig_devices import parse_partition_device_name
from dra_driver.objects.pod_claims import pod_claim_names


@dataclass
class PartitionReport:
    """One MIG partition a pod's claim holds."""

    claim: str
    request: str
    node: str
    device: str
    """The partition device, `gpu-<i>-mig-<profile>-at-<start>`."""
    gpu_index: int
    gpu_uuid: str
    """The card's uuid, as the slice publishes it ("" when the slice is gone)."""
    profile: str
    placement_start: int
    placement_size: int
    """Memory slices; 0 when the slice is gone."""

    @property
    def placement(self) -> str:
        """`start..end` in memory slices, or the start alone when the size is unknown."""
        if not self.placement_size:
            return str(self.placement_start)
        return f"{self.placement_start}..{self.placement_start + self.placement_size - 1}"


def _value(attribute: Mapping[str, Any] | None) -> Any:
    return next(iter((attribute or {}).values()), None)


def published_partitions(
    slices: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """(driver, pool, device) -> the attributes of every partition device published."""
    found: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        for device in spec.get("devices") or []:
            if parse_partition_device_name(str(device.get("name", ""))) is None:
                continue
            key = (spec.get("driver", ""), (spec.get("pool") or {}).get("name", ""), device["name"])
            found[key] = device.get("attributes") or {}
    return found


def holds_partition(claim: Mapping[str, Any]) -> bool:
    """Whether the claim's allocation names a partition device."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return any(
        parse_partition_device_name(str(result.get("device", ""))) is not None
        for result in (allocation.get("devices") or {}).get("results") or []
    )


def claim_partitions(
    claim: Mapping[str, Any], published: Mapping[tuple[str, str, str], Mapping[str, Any]]
) -> list[PartitionReport]:
    """The partitions the claim's allocation names, in result order."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    found = []
    for result in (allocation.get("devices") or {}).get("results") or []:
        name = parse_partition_device_name(str(result.get("device", "")))
        if name is None:
            continue
        key = (result.get("driver", ""), result.get("pool", ""), result["device"])
        attributes = published.get(key) or {}
        found.append(
            PartitionReport(
                claim=claim["metadata"]["name"],
                request=str(result.get("request", "")),
                node=str(result.get("pool", "")),
                device=result["device"],
                gpu_index=name.gpu_index,
                gpu_uuid=str(_value(attributes.get("parentUUID")) or ""),
                profile=str(_value(attributes.get("profile")) or name.profile_slug),
                placement_start=name.start,
                placement_size=int(_value(attributes.get("placementSize")) or 0),
            )
        )
    return found


def pod_partitions(
    pod: Mapping[str, Any],
    claims: Mapping[tuple[str, str], Mapping[str, Any]],
    published: Mapping[tuple[str, str, str], Mapping[str, Any]],
) -> list[PartitionReport]:
    """The partitions of the pod's claims (`claims` by namespace and name)."""
    namespace = pod["metadata"]["namespace"]
    found: list[PartitionReport] = []
    for name in dict.fromkeys(n for n in pod_claim_names(pod).values() if n):
        claim = claims.get((namespace, name))
        if claim is not None:
            found += claim_partitions(claim, published)
    return found


def partitions_table(rows: Sequence[tuple[str, PartitionReport]]) -> Table:
    """One row per (pod, partition): where it is, which card, profile and placement."""
    table = Table(title="MIG partitions (hardware instances) and who holds them", expand=False)
    for column in ("pod", "node", "card", "profile", "placement (memory slices)", "claim"):
        table.add_column(column, overflow="fold")
    for pod, partition in rows:
        card = f"gpu-{partition.gpu_index}"
        table.add_row(
            pod,
            partition.node,
            f"{card} {partition.gpu_uuid}".strip(),
            partition.profile,
            partition.placement,
            f"{partition.claim} ({partition.request})",
        )
    return table
