"""What a simulation runs: the cluster's shape, the workloads, how to report."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

GIB = 1 << 30
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


class Mode(StrEnum):
    DRA = "dra"
    """Controller-allocated DRA: the controller allocates, kube-scheduler places."""
    DRA_SCHEDULER = "dra-scheduler-allocated"
    """kube-scheduler allocates from consumable capacity; no controller."""
    LEGACY = "legacy"
    """Device-plugin path: webhook, extender /filter and /bind, device plugin Allocate."""


@dataclass(frozen=True, slots=True)
class ClusterShape:
    nodes: int = 3
    gpus_per_node: int = 4
    gpu_memory_bytes: int = 80 * GIB
    """Memory of each mock GPU (the default is an 80 GiB card)."""
    gpu_product: str = "NVIDIA A100-SXM4-80GB"
    split_count: int = 10
    """Shares per GPU."""

    def node_name(self, index: int) -> str:
        return f"sim-node-{index}"


@contextlib.contextmanager
def work_root(settings: SimulationSettings) -> Iterator[Path]:
    """The simulation's host directory: `settings.work_dir` (kept), or a temporary one."""
    if settings.work_dir is not None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        yield Path(tempfile.mkdtemp(prefix="run-", dir=settings.work_dir))
        return
    root = Path(tempfile.mkdtemp(prefix="vgpu-sim-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def default_scenario(mode: Mode) -> tuple[Path, ...]:
    """The bundled examples of the mode's kind of workload."""
    folder = EXAMPLES / ("legacy" if mode is Mode.LEGACY else "dra")
    return tuple(sorted(folder.glob("*.yaml")))


@dataclass(frozen=True, slots=True)
class SimulationSettings:
    mode: Mode = Mode.DRA
    shape: ClusterShape = field(default_factory=ClusterShape)
    scenario: tuple[Path, ...] = ()
    """Workload files; empty = the bundled examples of the mode."""
    namespace: str = "default"
    """Where objects without a namespace go."""
    settle_timeout_s: float = 30.0
    """How long to wait for every pod to run or to be refused with a reason."""
    gpu_policy: str = "spread"
    node_policy: str = "binpack"
    work_dir: Path | None = None
    """Where the nodes' sockets, CDI specs and cache dirs go, kept afterwards; None = a
    temporary directory removed at the end. Keep it short: unix socket paths are limited
    to 107 bytes."""

    def workload_files(self) -> tuple[Path, ...]:
        return self.scenario or default_scenario(self.mode)
