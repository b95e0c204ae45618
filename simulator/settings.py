"""What a simulation runs: the cluster's shape, the workloads, how to report."""

from __future__ import annotations

import contextlib
import os
import re
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
    MIXED = "mixed"
    """Both on the same NVIDIA GPUs (`--mixed-mode` everywhere): claims through the
    controller, legacy pods through the extender, opted-in namespaces through `/migrate`."""


DEFAULT_VENDORS = (
    "nvidia",
    "mlu",
    "dcu",
    "ascend",
    "iluvatar",
    "metax",
    "mthreads",
    "gcu",
    "xpu",
    "neuron",
    "amd",
    "vastai",
    "biren",
)
"""The default cluster, in every mode: every family of `dra_driver.objects.dra_vendors`
(legacy mode: each served by its legacy backend, `simulator.legacy_vendors`)."""


@dataclass(frozen=True, slots=True)
class FamilyNode:
    """One emulated node: its family and its place."""

    vendor: str
    index: int
    """Its number among the family's nodes."""
    position: int
    """Its number among all nodes (keeps mock uuids unique across families)."""
    mig: bool = False
    """An NVIDIA node whose cards are in MIG mode (`ClusterShape.mig_nodes`)."""

    @property
    def name(self) -> str:
        """NVIDIA nodes keep the names they always had (`sim-node-<i>`), their MIG nodes are
        `sim-mig-<i>`; others `sim-<id>-<i>`."""
        if self.mig:
            return f"sim-mig-{self.index}"
        if self.vendor == "nvidia":
            return f"sim-node-{self.index}"
        return f"sim-{self.vendor}-{self.index}"


@dataclass(frozen=True, slots=True)
class ClusterShape:
    nodes: int = 3
    """NVIDIA nodes."""
    vendors: tuple[str, ...] = DEFAULT_VENDORS
    """The families whose nodes the cluster has, NVIDIA's first."""
    vendor_nodes: int = 1
    """Nodes of each family other than NVIDIA."""
    gpus_per_node: int = 4
    gpu_memory_bytes: int = 80 * GIB
    """Memory of each mock GPU (the default is an 80 GiB card)."""
    gpu_product: str = "NVIDIA A100-SXM4-80GB"
    split_count: int = 10
    """Shares per GPU."""
    mig_nodes: int = 0
    """NVIDIA nodes whose cards are in MIG mode, published as partitions (DRA modes; only
    with `nvidia` among the vendors). The command gives a DRA run of the bundled examples one."""
    mig_gpus_per_node: int = 2
    mig_product: str = "NVIDIA H100 80GB HBM3"
    """The MIG nodes' cards: H100 80GB, whose profiles come from NVIDIA's table
    (`dra_driver.objects.mig_profiles.H100_80GB`)."""

    def node_name(self, index: int) -> str:
        return f"sim-node-{index}"

    def family_nodes(self) -> tuple[FamilyNode, ...]:
        """The cluster's nodes: `nodes` of NVIDIA, `vendor_nodes` of each other family, then
        the `mig_nodes` (last, so the other nodes keep their positions and mock uuids)."""
        found: list[FamilyNode] = []
        for vendor in dict.fromkeys(self.vendors):
            count = self.nodes if vendor == "nvidia" else self.vendor_nodes
            found += [FamilyNode(vendor, i, len(found) + i) for i in range(count)]
        if "nvidia" in self.vendors:
            found += [
                FamilyNode("nvidia", i, len(found) + i, mig=True) for i in range(self.mig_nodes)
            ]
        return tuple(found)


SCRATCH_DIRS = ("/dev/shm", "/tmp")
"""Where a temporary run goes, the first that is a writable directory: memory first
(making and removing 1,000 nodes' files took 7 s on a disk, 0.5 s in tmpfs); both
keep the nodes' unix socket paths short."""


def scratch_dir() -> str:
    return next((d for d in SCRATCH_DIRS if os.path.isdir(d) and os.access(d, os.W_OK)), "/tmp")


@contextlib.contextmanager
def work_root(settings: SimulationSettings) -> Iterator[Path]:
    """The simulation's host directory: `settings.work_dir` (kept), or a temporary one."""
    if settings.work_dir is not None:
        settings.work_dir.mkdir(parents=True, exist_ok=True)
        yield Path(tempfile.mkdtemp(prefix="run-", dir=settings.work_dir))
        return
    root = Path(tempfile.mkdtemp(prefix="vgpu-sim-", dir=scratch_dir()))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


DRA_ALLOCATORS = frozenset({Mode.DRA, Mode.DRA_SCHEDULER})
"""The two DRA modes, one per allocator: the controller and kube-scheduler."""
EXAMPLE_MODE_MARKS: dict[str, frozenset[Mode]] = {
    "both": DRA_ALLOCATORS,
    "controller-allocated": frozenset({Mode.DRA}),
    "scheduler-allocated": frozenset({Mode.DRA_SCHEDULER}),
}
"""What the first line of a DRA example says (`# Mode: both. ...`): which allocator it
is for. kube-scheduler reads no VGPUConfig, so an example that sizes or filters with
one is the controller's, and the scheduler-allocated overlay refuses it."""
_EXAMPLE_MODE_MARK = re.compile(r"# Mode: (" + "|".join(EXAMPLE_MODE_MARKS) + r")\b")


def example_modes(path: Path) -> frozenset[Mode] | None:
    """The DRA modes the example at `path` is for, from its first line; None when the
    line does not say."""
    with path.open(encoding="utf-8") as lines:
        found = _EXAMPLE_MODE_MARK.match(lines.readline())
    return EXAMPLE_MODE_MARKS[found.group(1)] if found else None


def default_scenario(mode: Mode) -> tuple[Path, ...]:
    """The bundled examples of the mode's kind of workload; of the DRA examples, those
    for the mode (or that do not say)."""
    folder = EXAMPLES / {Mode.LEGACY: "legacy", Mode.MIXED: "mixed"}.get(mode, "dra")
    files = sorted(folder.glob("*.yaml"))
    if mode not in DRA_ALLOCATORS:
        return tuple(files)
    return tuple(path for path in files if mode in (example_modes(path) or {mode}))


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
