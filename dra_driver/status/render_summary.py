"""The summary view as text: one row per node, a cluster total line, the pending claims short.

What a reader needs first at any size: which nodes are full, how full the
cluster is, and whether claims wait. The table's caption says where the
details are (`--node`, `-o wide`, `-o json|yaml`), so the summary never has to
carry them.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from dra_driver.status.columns import aligned
from dra_driver.status.model import ClusterStatus
from dra_driver.status.render import LIMITS_OFF, gib, usage_bar
from dra_driver.status.summary import (
    PENDING_SHOWN,
    ClusterTotals,
    NodeSummary,
    cluster_totals,
    summarize_nodes,
)
from dra_driver.status.views import PendingClaimView

SUMMARY_BAR_WIDTH = 10
COLUMNS = ("NODE", "GPUS", "MODE", "MEMORY", "CORES", "HOLDERS")
TIB = 1 << 40
DETAILS = (
    "Busiest first. One node's GPUs and shares: dra-driver status --node <name>; "
    "every GPU and share: -o wide; all of it: -o json or -o yaml."
)


def _gpus(node: NodeSummary) -> str:
    kinds = ", ".join(f"{count} x {kind}" for kind, count in node.kinds.items())
    return f"{kinds} ({node.unhealthy_gpus} unhealthy)" if node.unhealthy_gpus else kinds


def _holders(node: NodeSummary) -> Text:
    text = Text(str(node.holders))
    if node.limits_off:
        text.append(f" ({node.limits_off} {LIMITS_OFF})", style="bold red")
    return text


def nodes_table(nodes: Sequence[NodeSummary], note: str = DETAILS) -> Text:
    """A row per node; `note` under the rows (by default where `dra-driver status` keeps
    the details; the simulator's report, which has its own, passes its own or "")."""
    rows = []
    for node in nodes:
        memory = usage_bar(node.allocated_memory_bytes, node.memory_bytes, SUMMARY_BAR_WIDTH)
        memory.append(f" {size(node.allocated_memory_bytes)}/{size(node.memory_bytes)}")
        cores = usage_bar(node.allocated_cores, node.cores, SUMMARY_BAR_WIDTH)
        cores.append(f" {node.allocated_cores}/{node.cores}")
        rows.append([node.node, _gpus(node), ",".join(node.modes), memory, cores, _holders(node)])
    return aligned("GPU nodes", COLUMNS, rows, note)


def size(value: int) -> str:
    """Gi, or Ti from a TiB on (a cluster's total)."""
    return f"{value / TIB:.1f}Ti" if value >= TIB else gib(value)


def _percent(used: int, total: int) -> str:
    return f"{used / total:.0%}" if total else "-"


def totals_line(totals: ClusterTotals) -> Text:
    unhealthy = f" ({totals.unhealthy_gpus} unhealthy)" if totals.unhealthy_gpus else ""
    line = Text(
        f"Cluster: {totals.nodes} nodes, {totals.gpus} GPUs{unhealthy}; memory "
        f"{size(totals.allocated_memory_bytes)}/{size(totals.memory_bytes)} "
        f"({_percent(totals.allocated_memory_bytes, totals.memory_bytes)}), cores "
        f"{totals.allocated_cores}/{totals.cores} "
        f"({_percent(totals.allocated_cores, totals.cores)}); {totals.holders} holders"
    )
    if totals.limits_off:
        line.append(f", {totals.limits_off} shares with {LIMITS_OFF}", style="bold red")
    line.append(f"; {totals.pending} pending claims")
    return line


def pending_summary(pending: Sequence[PendingClaimView]) -> Table:
    shown = pending[:PENDING_SHOWN]
    title = f"Pending claims: {len(pending)}"
    if len(pending) > len(shown):
        title += f" (first {len(shown)}; all of them: -o wide)"
    table = Table(title=title, expand=False)
    for column in ("namespace", "claim", "pods", "last reason"):
        table.add_column(column, overflow="fold")
    for claim in shown:
        table.add_row(claim.namespace, claim.name, ",".join(claim.pods) or "-", claim.reason)
    return table


def render_summary(status: ClusterStatus, console: Console) -> None:
    nodes = summarize_nodes(status.gpus)
    totals = cluster_totals(nodes, status.pending)
    parts: list[Table | Text] = [nodes_table(nodes), totals_line(totals)]
    if status.pending:
        parts.append(pending_summary(status.pending))
    console.print(Group(*parts), no_wrap=True, crop=False, overflow="ignore")
