"""The rows of the cluster view: a GPU, a holder's share of it, a claim still waiting.

`model.py` builds them from API objects, `summary.py` folds them per node, the
renderers print them; all three read these types, so they live below all three.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dra_driver.objects.dra_vendors import LIBVGPU


@dataclass(slots=True)
class PartitionView:
    """One MIG placement of a partitioned card, and who holds it (empty while free)."""

    profile: str
    placement: str
    """`start:size` in memory slices, as `nvidia-smi mig -lgipp` prints it."""
    memory_bytes: int
    device: str = ""
    """The partition's ResourceSlice device (DRA); empty for a legacy pod's slice."""
    mode: str = ""
    namespace: str = ""
    holder: str = ""
    """The claim (DRA) or pod (legacy) holding the placement."""
    pods: list[str] = field(default_factory=list)


@dataclass(slots=True)
class ShareView:
    """One holder's share of a GPU: a claim (DRA) or a pod's container set (legacy)."""

    mode: str
    namespace: str
    holder: str
    """The claim name (DRA) or the pod name (legacy)."""
    pods: list[str]
    memory_bytes: int
    cores: int
    enforced: bool = True
    """False: the limits do not hold, the memory and cores are accounting only (a
    libvgpu opt-out on an NVIDIA card, or a family nothing in the container enforces)."""
    enforcement_note: str = ""
    """Why enforcement is off, or why an opt-out the holder asked for is not in effect."""
    enforced_by: str = LIBVGPU
    """Who holds the share to its limits: HAMi-core (libvgpu) for NVIDIA cards, else the
    family's entry in `dra_vendors` (`Ascend runtime (vNPU template)`, `accounting only`)."""
    partition: str = ""
    """`<profile> <start:size>` when the share is a MIG partition (the hardware holds it)."""


@dataclass(slots=True)
class GpuView:
    node: str
    device: str
    """The ResourceSlice device name (DRA) or the GPU UUID (legacy)."""
    uuid: str
    type: str
    mode: str
    memory_bytes: int
    cores: int
    shares_total: int
    healthy: bool = True
    shares: list[ShareView] = field(default_factory=list)
    vendor: str = ""
    """The card's family: the device's `vendor` attribute (DRA), HAMi's register key (legacy)."""
    partitions: list[PartitionView] = field(default_factory=list)
    """A MIG-mode card's placements: every published one (DRA, free or held), and the
    slices legacy pods hold; empty for a card shared through HAMi-core."""

    @property
    def allocated_memory_bytes(self) -> int:
        return sum(share.memory_bytes for share in self.shares)

    @property
    def allocated_cores(self) -> int:
        return sum(share.cores for share in self.shares)


@dataclass(slots=True)
class PendingClaimView:
    namespace: str
    name: str
    pods: list[str]
    reason: str
    """The newest Warning event on the claim (or its pod), else why it is waiting."""
