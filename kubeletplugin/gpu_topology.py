"""How a node's GPUs are linked to each other, and HAMi's pair scores from it.

HAMi's device plugin publishes `hami.io/node-nvidia-score` so that the
`topology-aware` GPU policy picks the best-connected set of cards: for each
ordered pair of GPUs it sums one score per link entry, the PCIe path from
`nvmlDeviceGetTopologyCommonAncestor` (10 across CPUs up to 60 on one board)
and the NVLinks (100 per link, direct or through NVSwitch). A pair whose two
directions report a different number of link entries scores 0, as a sign of
an NVLink or driver fault (`calculate_score.go`). Pure: the backends fill the
links, the device plugin encodes the scores.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

MAX_NVLINKS = 18
"""`NVML_NVLINK_MAX_LINKS`; HAMi's score table stops there too."""

NVLINK_SCORE = 100
"""Per NVLink between the pair."""


class P2PLevel(StrEnum):
    """The closest common PCIe ancestor of two GPUs, as NVML names the levels."""

    INTERNAL = "internal"
    """Both on one board (`NVML_TOPOLOGY_INTERNAL`)."""
    SINGLE = "single"
    """One PCIe switch between them (`NVML_TOPOLOGY_SINGLE`, nvidia-smi `PIX`)."""
    MULTIPLE = "multiple"
    """Several PCIe switches, no host bridge (`NVML_TOPOLOGY_MULTIPLE`, `PXB`)."""
    HOSTBRIDGE = "hostbridge"
    """Through one CPU's host bridge (`NVML_TOPOLOGY_HOSTBRIDGE`, `PHB`)."""
    NODE = "node"
    """Across host bridges of one NUMA node (`NVML_TOPOLOGY_NODE`, `NODE`)."""
    SYSTEM = "system"
    """Across CPU sockets (`NVML_TOPOLOGY_SYSTEM`, `SYS`)."""


P2P_SCORES: Mapping[P2PLevel, int] = {
    P2PLevel.INTERNAL: 60,
    P2PLevel.SINGLE: 50,
    P2PLevel.MULTIPLE: 40,
    P2PLevel.HOSTBRIDGE: 30,
    P2PLevel.NODE: 20,
    P2PLevel.SYSTEM: 10,
}


@dataclass(frozen=True, slots=True)
class GpuLink:
    """What one GPU reports about its connection to another."""

    peer: str
    """The other GPU's UUID."""

    p2p: P2PLevel | None = None
    """None: NVML could not tell the PCIe path."""

    nvlinks: int = 0
    """Active NVLinks to the peer, 0..`MAX_NVLINKS` (direct, or the fewer of both
    GPUs' NVSwitch links)."""

    @property
    def entries(self) -> int:
        """How many link records HAMi keeps for the pair: the PCIe path and the NVLinks."""
        return (self.p2p is not None) + (self.nvlinks > 0)

    @property
    def score(self) -> int:
        path = P2P_SCORES[self.p2p] if self.p2p is not None else 0
        return path + self.nvlinks * NVLINK_SCORE


@dataclass(frozen=True, slots=True)
class PairScores:
    scores: dict[str, dict[str, int]]
    """GPU UUID -> peer UUID -> score, GPUs and peers in the order given."""

    asymmetric: tuple[tuple[str, str], ...]
    """Pairs scored 0 because their two directions disagree on the link count."""


def pair_scores(links: Mapping[str, Sequence[GpuLink]]) -> PairScores:
    """HAMi's score of every ordered pair among the GPUs `links` names (its keys,
    in order; links to GPUs outside them are ignored, as HAMi scores only the
    devices it registers)."""
    by_peer = {uuid: {link.peer: link for link in gpu_links} for uuid, gpu_links in links.items()}
    scores: dict[str, dict[str, int]] = {}
    asymmetric: list[tuple[str, str]] = []
    for uuid in links:
        scores[uuid] = {}
        for peer in links:
            if peer == uuid:
                continue
            there = by_peer[uuid].get(peer, GpuLink(peer))
            back = by_peer[peer].get(uuid, GpuLink(uuid))
            if there.entries != back.entries:
                scores[uuid][peer] = 0
                asymmetric.append((uuid, peer))
            else:
                scores[uuid][peer] = there.score
    return PairScores(scores, tuple(asymmetric))
