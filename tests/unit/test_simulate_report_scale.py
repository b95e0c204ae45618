"""The text report at scale: past SUMMARY_ABOVE_GPUS a row per node that holds a share,
the cluster totals, and how many nodes hold nothing; at the default size every GPU."""

from __future__ import annotations

import io

from rich.console import Console

from dra_driver.status.model import ClusterStatus
from dra_driver.status.views import GpuView, ShareView
from simulator.report import SUMMARY_ABOVE_GPUS, render_gpus

GIB = 1 << 30


def cluster(nodes: int, gpus_per_node: int) -> ClusterStatus:
    gpus = [
        GpuView(f"sim-node-{n}", f"gpu-{g}", f"GPU-{n}-{g}", "A100", "dra", 80 * GIB, 100, 10)
        for n in range(nodes)
        for g in range(gpus_per_node)
    ]
    gpus[0].shares.append(ShareView("dra", "default", "train-0", ["train"], 8 * GIB, 20))
    return ClusterStatus(gpus, [])


def rendered(status: ClusterStatus) -> str:
    out = io.StringIO()
    render_gpus(status, Console(file=out, width=200))
    return out.getvalue()


def test_a_large_cluster_shows_the_busy_node_and_counts_the_idle_ones():
    text = rendered(cluster(100, 8))
    assert SUMMARY_ABOVE_GPUS < 100 * 8
    assert "sim-node-0 " in text
    assert "sim-node-1 " not in text
    assert "99 more node(s) hold no share" in text
    assert "gpu-0" not in text


def test_a_small_cluster_shows_every_gpu():
    rows = [line for line in rendered(cluster(2, 4)).splitlines() if "sim-node-" in line]
    assert len(rows) == 8
    assert sum("sim-node-1" in row for row in rows) == 4
