"""The full cluster view, every GPU and share (`--node`, `-o wide`), or JSON/YAML for scripts.

The GPU lines are aligned columns (`columns.py`), since they grow with the
cluster; `gpu_table` keeps the bordered rich Table for the simulator's report of
a few nodes. The one-row-per-node default is `render_summary.py`'s.

A share whose limits do not hold is tagged `limits off` beside its holder, and
a table below lists, for each share with an opt-out, whether its limits hold
and why: a reader sizing a card must see which shares are accounting only. A
share not enforced by HAMi-core (another vendor's card) is tagged with who
enforces it instead (`[Ascend runtime (vNPU template)]`, `[accounting only]`),
so "enforced" is never read in libvgpu's sense where libvgpu is not there.
On a card served both ways (`mixed`) each holder says its mode, `(dra)` or
`(legacy)`: one bar, and the reader still sees which allocator gave what.
"""

from __future__ import annotations

import json
from typing import Any

import yaml
from rich.console import Console, Group
from rich.table import Table
from rich.text import Span, Text

from dra_driver.objects.dra_vendors import LIBVGPU
from dra_driver.status.columns import aligned
from dra_driver.status.model import MIXED, ClusterStatus
from dra_driver.status.views import GpuView, ShareView

GIB = 1 << 30
BAR_WIDTH = 20
LIMITS_OFF = "limits off"
GPU_SHARES = "GPU shares"
GPU_COLUMNS = ("node", "gpu", "vendor", "type", "mode", "memory", "cores", "shares", "holders")


def usage_bar(used: int, total: int, width: int = BAR_WIDTH) -> Text:
    """`[#####.....] 50%`, red past 90 %, so a full card stands out."""
    ratio = used / total if total else 0.0
    filled = min(width, round(ratio * width))
    style = "red" if ratio > 0.9 else "yellow" if ratio > 0.6 else "green"
    return Text(
        f"[{'#' * filled}{'.' * (width - filled)}] {ratio:4.0%}",
        spans=[Span(1, 1 + filled, style), Span(1 + filled, 1 + width, "dim")],
    )


def gib(value: int) -> str:
    return f"{value / GIB:.1f}Gi"


def _holder(gpu: GpuView, share: ShareView) -> Text:
    pods = ",".join(share.pods) or "-"
    line = Text(f"{share.namespace}/{share.holder}", style="bold")
    if gpu.mode == MIXED:
        line.append(f" ({share.mode})")
    if share.enforced_by != LIBVGPU:
        line.append(f" [{share.enforced_by}]", style="yellow" if share.enforced else "red")
    elif not share.enforced:
        line.append(f" [{LIMITS_OFF}]", style="bold red")
    line.append(f" {gib(share.memory_bytes)} {share.cores}% pods={pods}")
    return line


def _holders(gpu: GpuView) -> Text:
    return Text("\n").join(_holder(gpu, share) for share in gpu.shares)


def _gpu_cells(gpu: GpuView) -> list[Text | str]:
    name = gpu.device if gpu.healthy else f"{gpu.device} (unhealthy)"
    memory = usage_bar(gpu.allocated_memory_bytes, gpu.memory_bytes)
    memory.append(f" {gib(gpu.allocated_memory_bytes)}/{gib(gpu.memory_bytes)}")
    cores = usage_bar(gpu.allocated_cores, gpu.cores)
    shares = f"{len(gpu.shares)}/{gpu.shares_total}"
    return [gpu.node, name, gpu.vendor or "-", gpu.type, gpu.mode, memory, cores, shares]


def gpu_table(status: ClusterStatus) -> Table:
    """Every GPU and its holders as a bordered table: the simulator's report, a few nodes."""
    table = Table(title=GPU_SHARES, expand=False)
    for column in GPU_COLUMNS:
        table.add_column(column, overflow="fold")
    for gpu in status.gpus:
        table.add_row(*_gpu_cells(gpu), _holders(gpu))
    return table


def gpu_lines(status: ClusterStatus) -> Text:
    """Every GPU, one line per holder (the GPU's columns on its first): `-o wide` and
    `--node`, whose row counts grow with the cluster (`columns.py` says why not a Table)."""
    rows: list[list[Text | str]] = []
    for gpu in status.gpus:
        cells = _gpu_cells(gpu)
        holders = [_holder(gpu, share) for share in gpu.shares] or [Text("-")]
        rows.append([*cells, holders[0]])
        rows.extend([*([""] * len(cells)), holder] for holder in holders[1:])
    return aligned(GPU_SHARES, [column.upper() for column in GPU_COLUMNS], rows)


def _noted_shares(status: ClusterStatus) -> list[tuple[GpuView, ShareView]]:
    """HAMi-core shares with an opt-out; other vendors' shares carry their tag instead."""
    return [
        (gpu, share)
        for gpu in status.gpus
        for share in gpu.shares
        if share.enforced_by == LIBVGPU and (not share.enforced or share.enforcement_note)
    ]


def enforcement_table(status: ClusterStatus) -> Table:
    """Each share that opted out of HAMi-core's limits: whether they hold, and why."""
    table = Table(title="Enforcement opt-outs", expand=False)
    for column in ("holder", "gpu", "limits", "why"):
        table.add_column(column, overflow="fold")
    for gpu, share in _noted_shares(status):
        table.add_row(
            f"{share.namespace}/{share.holder}",
            f"{gpu.node}/{gpu.device}",
            Text("off", style="bold red") if not share.enforced else Text("on"),
            share.enforcement_note,
        )
    return table


def pending_table(status: ClusterStatus) -> Table:
    table = Table(title="Pending claims", expand=False)
    for column in ("namespace", "claim", "pods", "last reason"):
        table.add_column(column, overflow="fold")
    for claim in status.pending:
        table.add_row(claim.namespace, claim.name, ",".join(claim.pods) or "-", claim.reason)
    return table


def render_text(status: ClusterStatus, console: Console) -> None:
    parts: list[Any] = [gpu_lines(status)]
    if _noted_shares(status):
        parts.append(enforcement_table(status))
    if status.pending:
        parts.append(pending_table(status))
    console.print(Group(*parts), no_wrap=True, crop=False, overflow="ignore")


def render_data(status: ClusterStatus, output: str) -> str:
    data = status.to_dict()
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False)
    return json.dumps(data, indent=2)
