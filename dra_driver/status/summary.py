"""One line per node: the default `dra-driver status` view, readable at a thousand nodes.

The full view lists every GPU and every share: at 1,000 nodes x 8 GPUs that is
8,000 rows nobody reads. The summary folds a node's GPUs into one row (count,
kinds, memory and cores allocated of total, holders) and sorts the busiest
first, by the share of memory allocated, then of cores, then by name, so the
nodes a reader must look at come at the top; `--node` and `-o wide` give the
details. Holders are counted once per node even when they hold several of its
GPUs (a claim or a legacy pod holding two cards is one holder).

Pure: the built view in, plain dataclasses out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dra_driver.status.views import GpuView, PendingClaimView

PENDING_SHOWN = 5
"""Pending claims the summary lists by name; the count covers all of them."""


@dataclass(slots=True)
class NodeSummary:
    node: str
    gpus: int = 0
    unhealthy_gpus: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    """`vendor type` (as the GPUs say) -> how many of the node's GPUs are of it."""
    modes: list[str] = field(default_factory=list)
    """The GPUs' modes (dra, legacy, mixed), sorted."""
    memory_bytes: int = 0
    allocated_memory_bytes: int = 0
    cores: int = 0
    allocated_cores: int = 0
    holders: int = 0
    """Distinct claims (DRA) and pods (legacy) holding a share of the node's GPUs."""
    limits_off: int = 0
    """Of those shares, how many run without enforced limits."""

    @property
    def memory_ratio(self) -> float:
        return self.allocated_memory_bytes / self.memory_bytes if self.memory_bytes else 0.0

    @property
    def cores_ratio(self) -> float:
        return self.allocated_cores / self.cores if self.cores else 0.0


@dataclass(slots=True)
class ClusterTotals:
    nodes: int = 0
    gpus: int = 0
    unhealthy_gpus: int = 0
    memory_bytes: int = 0
    allocated_memory_bytes: int = 0
    cores: int = 0
    allocated_cores: int = 0
    holders: int = 0
    limits_off: int = 0
    pending: int = 0


def gpu_kind(vendor: str, type_name: str) -> str:
    """`NVIDIA-A100-SXM4-80GB`, or `vendor type` where the type does not already say it."""
    if not type_name:
        return vendor or "-"
    if not vendor or type_name.lower().startswith(vendor.lower()):
        return type_name
    return f"{vendor} {type_name}"


def summarize_nodes(gpus: Iterable[GpuView]) -> list[NodeSummary]:
    """Per node one summary, busiest first (memory share, then cores share, then name)."""
    nodes: dict[str, NodeSummary] = {}
    holders: dict[str, set[tuple[str, str, str]]] = {}
    kinds: dict[str, Counter[str]] = {}
    modes: dict[str, set[str]] = {}
    for gpu in gpus:
        summary = nodes.get(gpu.node)
        if summary is None:
            summary = nodes[gpu.node] = NodeSummary(gpu.node)
            holders[gpu.node], kinds[gpu.node], modes[gpu.node] = set(), Counter(), set()
        summary.gpus += 1
        summary.unhealthy_gpus += not gpu.healthy
        summary.memory_bytes += gpu.memory_bytes
        summary.cores += gpu.cores
        kinds[gpu.node][gpu_kind(gpu.vendor, gpu.type)] += 1
        modes[gpu.node].add(gpu.mode)
        for share in gpu.shares:
            summary.allocated_memory_bytes += share.memory_bytes
            summary.allocated_cores += share.cores
            summary.limits_off += not share.enforced
            holders[gpu.node].add((share.mode, share.namespace, share.holder))
    for name, summary in nodes.items():
        summary.holders = len(holders[name])
        summary.kinds = dict(kinds[name].most_common())
        summary.modes = sorted(modes[name])
    return sorted(nodes.values(), key=lambda n: (-n.memory_ratio, -n.cores_ratio, n.node))


def cluster_totals(
    nodes: Sequence[NodeSummary], pending: Sequence[PendingClaimView]
) -> ClusterTotals:
    totals = ClusterTotals(nodes=len(nodes), pending=len(pending))
    for node in nodes:
        totals.gpus += node.gpus
        totals.unhealthy_gpus += node.unhealthy_gpus
        totals.memory_bytes += node.memory_bytes
        totals.allocated_memory_bytes += node.allocated_memory_bytes
        totals.cores += node.cores
        totals.allocated_cores += node.allocated_cores
        totals.holders += node.holders
        totals.limits_off += node.limits_off
    return totals
