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
A MIG-mode card's holders each say their partition (profile, `start:size`) and
are tagged `[MIG (hardware partition)]`; a last dim line lists the placements still
free, by profile. On a card served both ways (`mixed`) each holder says its mode, `(dra)` or
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
from dra_driver.version import build_info

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
    if share.partition:
        line.append(f" {share.partition}")
    line.append(f" {gib(share.memory_bytes)} {share.cores}% pods={pods}")
    return line


def free_placements(gpu: GpuView) -> Text | None:
    """A partitioned card's published placements that overlap no held one, by profile:
    `free 1g.10gb 0:1 1:1; ...` (None for a card with none published: a legacy card
    lists only what its pods hold)."""
    if not any(p.device for p in gpu.partitions):
        return None
    held = [_span(p.placement) for p in gpu.partitions if p.holder]
    free: dict[str, list[str]] = {}
    for partition in gpu.partitions:
        start, end = _span(partition.placement)
        if not any(start < other_end and other_start < end for other_start, other_end in held):
            free.setdefault(partition.profile, []).append(partition.placement)
    listed = "; ".join(f"{profile} {' '.join(starts)}" for profile, starts in free.items())
    return Text(f"free {listed or 'none'}", style="dim")


def _span(placement: str) -> tuple[int, int]:
    """`start:size` as [start, end) in memory slices."""
    start, size = (int(part) for part in placement.split(":"))
    return start, start + size


def _holder_lines(gpu: GpuView) -> list[Text]:
    lines = [_holder(gpu, share) for share in gpu.shares]
    free = free_placements(gpu)
    return lines if free is None else [*lines, free]


def _holders(gpu: GpuView) -> Text:
    return Text("\n").join(_holder_lines(gpu))


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
        holders = _holder_lines(gpu) or [Text("-")]
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
    """The view for scripts, led by the release and commit that read it."""
    data = {**build_info().fields(), **status.to_dict()}
    if output == "yaml":
        return yaml.safe_dump(data, sort_keys=False)
    return json.dumps(data, indent=2)
