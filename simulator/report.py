"""What the simulation shows: who holds which share, what each container gets, what did not fit."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console, Group
from rich.table import Table

from cdi.resolve import SpecDevice, index_devices, resolve_container
from dra_driver.objects.mig_devices import parse_partition_device_name
from dra_driver.status.model import ClusterStatus, camel_case_keys
from dra_driver.status.render import gpu_table, pending_table
from dra_driver.status.render_summary import nodes_table, totals_line
from dra_driver.status.summary import cluster_totals, summarize_nodes
from dra_driver.version import build_info
from kubeletplugin.vendor_env import AMD_MEMORY_LIMIT_ENV, SHARE_ENV_PREFIX, VISIBLE_DEVICES_ENV
from simulator.attempts import AttemptReport, Outcome
from simulator.mig_report import PartitionReport, partitions_table

SHOWN_ENV_PREFIXES = (
    "CUDA_DEVICE_MEMORY_LIMIT",
    "CUDA_DEVICE_SM_LIMIT",
    "NVIDIA_VISIBLE_DEVICES",
    "CUDA_TASK_PRIORITY",
    *VISIBLE_DEVICES_ENV.values(),
    AMD_MEMORY_LIMIT_ENV,
    f"{SHARE_ENV_PREFIX}MEMORY_LIMIT",
    f"{SHARE_ENV_PREFIX}CORE_LIMIT",
)
"""The limits a container gets; the full env and mounts are in `-o json`."""

SUMMARY_ABOVE_GPUS = 64
"""Past this many GPUs the report summarises them per node (1,000 nodes x 8 GPUs made
8,000 rows); `-o json` keeps every GPU."""

UNSET_PIN = "0"
"""What the spec pins a limit the share does not set to (libvgpu: none of its own, so
the tenant cannot set one either); the table leaves those out."""


@dataclass
class ContainerReport:
    cdi_devices: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, str] = field(default_factory=dict)
    """Container path -> host path."""
    read_only_mounts: list[str] = field(default_factory=list)
    """The container paths mounted read-only (a tenant cannot replace the library there)."""


@dataclass
class DeviceReport:
    """One device a legacy pod's container holds, as the scheduler's pod keys say."""

    container: str
    vendor: str
    """HAMi's request type (`NVIDIA`, `DCU`, `Ascend910B3`, ...)."""
    uuid: str
    type: str
    memory_mib: int
    cores: int


@dataclass
class PodReport:
    namespace: str
    name: str
    node: str
    phase: str
    claims: dict[str, str] = field(default_factory=dict)
    spec_files: list[str] = field(default_factory=list)
    containers: dict[str, ContainerReport] = field(default_factory=dict)
    reason: str = ""
    devices: list[DeviceReport] = field(default_factory=list)
    """Legacy mode: each container's devices per vendor, from its allocated pod key."""
    pod_keys: dict[str, str] = field(default_factory=dict)
    """Legacy mode: the annotations the scheduler and the device plugin wrote on the pod
    (each vendor's pod keys, bind-phase, ...)."""
    created_gates: list[str] = field(default_factory=list)
    """DRA modes: the scheduling gates the pod was created with, admission's included
    (the allocation gate where the controller allocates)."""
    gates: list[str] = field(default_factory=list)
    """DRA modes: the scheduling gates it still has at the end (none once scheduled)."""
    partitions: list[PartitionReport] = field(default_factory=list)
    """DRA modes: the MIG partitions its claims hold (card, profile, placement)."""


PREEMPTION_REASONS = ("Preempting", "Preempted", "PreemptionFailed")
"""The controller's events of a preemption (controller/preemptor.py)."""


@dataclass
class EventReport:
    pod: str
    """namespace/name of the pod the event is on."""
    type: str
    reason: str
    message: str


@dataclass
class PreemptionReport:
    """One pod that preempted others: whom, where, and the events that say so."""

    preemptor: str
    """namespace/name."""
    node: str
    """Where it runs, else the node it is nominated to."""
    victims: list[str] = field(default_factory=list)
    """namespace/name of each pod deleted for it (its `Preempted` event names the
    preemptor's uid)."""
    events: list[EventReport] = field(default_factory=list)


def preemption_reports(
    events: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> list[PreemptionReport]:
    """Each pod with a preemption event, its victims matched by the uid the victims'
    `Preempted` events name; in the order of their names."""
    on_pod = [
        e
        for e in events
        if e.get("reason") in PREEMPTION_REASONS
        and (e.get("involvedObject") or {}).get("kind") == "Pod"
    ]
    by_uid = {pod["metadata"].get("uid"): pod for pod in pods}
    reports: dict[str, PreemptionReport] = {}
    for event in on_pod:
        subject = event["involvedObject"]
        pod = by_uid.get(subject.get("uid"))
        if pod is None or event["reason"] == "Preempted":
            continue
        status, spec = pod.get("status") or {}, pod.get("spec") or {}
        key = f"{subject.get('namespace')}/{subject.get('name')}"
        report = reports.setdefault(
            subject.get("uid"),
            PreemptionReport(key, spec.get("nodeName") or status.get("nominatedNodeName") or ""),
        )
        report.events.append(_event_report(event))
    for event in on_pod:
        if event["reason"] != "Preempted":
            continue
        for uid, report in reports.items():
            if f"pod {uid} " in str(event.get("message", "")):
                report.victims.append(_event_report(event).pod)
                report.events.append(_event_report(event))
    for report in reports.values():
        report.victims.sort()
    return sorted(reports.values(), key=lambda r: r.preemptor)


def _event_report(event: Mapping[str, Any]) -> EventReport:
    subject = event.get("involvedObject") or {}
    return EventReport(
        f"{subject.get('namespace')}/{subject.get('name')}",
        str(event.get("type", "")),
        str(event.get("reason", "")),
        str(event.get("message", "")),
    )


VERBATIM_FIELDS = frozenset({"containers", "pod_keys"})
"""PodReport fields whose keys are names of things, kept as they are in JSON."""


@dataclass
class SimulationReport:
    mode: str
    status: ClusterStatus
    pods: list[PodReport]
    elapsed_s: float
    kept: bool = False
    """Whether the nodes' files (CDI specs, cache dirs) outlive the run (`--work-dir`)."""
    attempts: list[AttemptReport] = field(default_factory=list)
    """The scenario's tamper attempts, in the order they ran."""
    preemptions: list[PreemptionReport] = field(default_factory=list)
    """DRA modes: the pods that preempted others (their victims are gone from `pods`)."""

    @property
    def bypasses(self) -> list[AttemptReport]:
        """Attempts that worked, or whose outcome nobody explained: each one is a bug."""
        return [a for a in self.attempts if a.outcome is Outcome.ALLOWED or not a.reason]

    @property
    def running(self) -> list[PodReport]:
        return [pod for pod in self.pods if pod.phase == "Running"]

    @property
    def refused(self) -> list[PodReport]:
        return [pod for pod in self.pods if pod.phase != "Running"]

    def to_dict(self) -> dict[str, Any]:
        return {
            **build_info().fields(),
            "mode": self.mode,
            "elapsedSeconds": round(self.elapsed_s, 3),
            **self.status.to_dict(),
            "pods": [
                {
                    **camel_case_keys(
                        {k: v for k, v in asdict(pod).items() if k not in VERBATIM_FIELDS}
                    ),
                    # Annotation keys are data, not field names.
                    "podKeys": pod.pod_keys,
                    # Container names and env var names are data, not field names.
                    "containers": {
                        name: {
                            "cdiDevices": container.cdi_devices,
                            "env": container.env,
                            "mounts": container.mounts,
                            "readOnlyMounts": container.read_only_mounts,
                        }
                        for name, container in pod.containers.items()
                    },
                }
                for pod in self.pods
            ],
            "attempts": [
                camel_case_keys({**asdict(attempt), "outcome": attempt.outcome.value})
                for attempt in self.attempts
            ],
            "preemptions": [camel_case_keys(asdict(p)) for p in self.preemptions],
        }


def load_specs(spec_dirs: Iterable[Path]) -> dict[str, SpecDevice]:
    """Every CDI device in the dirs (later dirs win, as for the runtime)."""
    specs = []
    for directory in spec_dirs:
        for path in sorted(directory.glob("*.json")) if directory.is_dir() else []:
            specs.append((str(path), json.loads(path.read_text(encoding="utf-8"))))
    return index_devices(specs)


def container_report(cdi_ids: Sequence[str], registry: Mapping[str, SpecDevice]) -> ContainerReport:
    if not cdi_ids:
        return ContainerReport()
    edits = resolve_container(cdi_ids, registry)
    return ContainerReport(
        cdi_devices=list(cdi_ids),
        env=dict(sorted(edits.env.items())),
        mounts={target: mount.host_path for target, mount in edits.mounts.items()},
        read_only_mounts=sorted(t for t, mount in edits.mounts.items() if "ro" in mount.options),
    )


def spec_files(cdi_ids: Iterable[str], registry: Mapping[str, SpecDevice]) -> list[str]:
    return sorted({registry[i].source for i in cdi_ids if i in registry})


def shared_cards(status: ClusterStatus) -> ClusterStatus:
    """The status without the MIG partition devices: it lists each published placement
    as a device (an H100 in MIG mode is 25 of them); the partitions table shows those
    that are held, and `-o json` keeps them all."""
    gpus = [gpu for gpu in status.gpus if parse_partition_device_name(gpu.device) is None]
    return status if len(gpus) == len(status.gpus) else replace(status, gpus=gpus)


def render_gpus(status: ClusterStatus, console: Console) -> None:
    """Every GPU and its shares; past `SUMMARY_ABOVE_GPUS`, a row per node that holds a
    share and the cluster's totals instead (`dra-driver status`'s summary)."""
    status = shared_cards(status)
    if len(status.gpus) <= SUMMARY_ABOVE_GPUS:
        console.print(gpu_table(status))
        return
    nodes = summarize_nodes(status.gpus)
    busy = [node for node in nodes if node.holders]
    totals = totals_line(cluster_totals(nodes, status.pending))
    console.print(Group(nodes_table(busy), totals), no_wrap=True, crop=False, overflow="ignore")
    console.print(
        f"{len(nodes) - len(busy)} more node(s) hold no share; every GPU and share: -o json"
    )


def render_report(report: SimulationReport, console: Console) -> None:
    render_gpus(report.status, console)
    pods = Table(title="Pods and what their containers get", expand=False)
    for column in ("pod", "node", "container", "CDI devices", "limits (env; all of it in -o json)"):
        pods.add_column(column, overflow="fold")
    for pod in report.running:
        for name, container in pod.containers.items():
            env = "\n".join(
                f"{key}={value}"
                for key, value in container.env.items()
                if key.startswith(SHOWN_ENV_PREFIXES) and value != UNSET_PIN
            )
            pods.add_row(
                f"{pod.namespace}/{pod.name}",
                pod.node,
                name,
                "\n".join(container.cdi_devices) or "-",
                env or "-",
            )
    if report.running:
        console.print(pods)
    held = [(f"{p.namespace}/{p.name}", part) for p in report.pods for part in p.partitions]
    if held:
        console.print(partitions_table(held))
    if any(pod.devices for pod in report.running):
        console.print(devices_table(report.running))
    if any(pod.spec_files for pod in report.running):
        files = Table(title="CDI spec files written", expand=False)
        files.add_column("pod")
        files.add_column("spec file", overflow="fold")
        for pod in report.running:
            for path in pod.spec_files:
                files.add_row(f"{pod.namespace}/{pod.name}", path)
        console.print(files)
    if report.status.pending:
        console.print(pending_table(report.status))
    if report.refused:
        refused = Table(title="Pods that did not start", expand=False)
        for column in ("pod", "phase", "why (as events show it)"):
            refused.add_column(column, overflow="fold")
        for pod in report.refused:
            refused.add_row(f"{pod.namespace}/{pod.name}", pod.phase, pod.reason or "-")
        console.print(refused)
    if report.attempts:
        console.print(attempts_table(report.attempts))
    if report.preemptions:
        console.print(preemptions_table(report.preemptions))
    console.print(
        f"{len(report.running)} pod(s) running, {len(report.refused)} not started, "
        f"in {report.elapsed_s:.1f} s ({report.mode} mode)"
    )
    if report.attempts:
        console.print(
            f"{len(report.attempts)} tamper attempt(s), "
            f"{len(report.bypasses)} got through (ALLOWED or unexplained)"
        )
    if not report.kept:
        console.print("The nodes' files went with the run; --work-dir DIR keeps them.")


def devices_table(pods: Sequence[PodReport]) -> Table:
    """Legacy mode: which vendor's devices each container holds (the pod keys' entries)."""
    table = Table(title="Devices each container holds (the scheduler's pod keys)", expand=False)
    for column in ("pod", "node", "container", "vendor", "device", "type", "MiB", "cores %"):
        table.add_column(column, overflow="fold")
    for pod in pods:
        for device in pod.devices:
            table.add_row(
                f"{pod.namespace}/{pod.name}",
                pod.node,
                device.container,
                device.vendor,
                device.uuid,
                device.type,
                str(device.memory_mib),
                str(device.cores),
            )
    return table


OUTCOME_STYLES = {
    Outcome.REFUSED: "green",
    Outcome.NEUTRALISED: "cyan",
    Outcome.ALLOWED: "bold red",
}


def attempts_table(attempts: Sequence[AttemptReport]) -> Table:
    """One row per attempt: who tried what, how it came out, and the message that says why."""
    table = Table(title="Tamper attempts", expand=False)
    for column in ("attempt", "as", "action", "outcome", "reason"):
        table.add_column(column, overflow="fold")
    for attempt in attempts:
        reason = attempt.reason or "(no reason: nothing said why it did not happen)"
        if attempt.details and attempt.outcome is not Outcome.REFUSED:
            reason = "\n".join(attempt.details)
        table.add_row(
            f"{attempt.name}\n{attempt.description}" if attempt.description else attempt.name,
            attempt.identity,
            attempt.action,
            f"[{OUTCOME_STYLES[attempt.outcome]}]{attempt.outcome.value}[/]",
            reason,
        )
    return table


def preemptions_table(preemptions: Sequence[PreemptionReport]) -> Table:
    """One row per preempting pod: where it went, whom it preempted, and the events."""
    table = Table(title="Preemptions (victims deleted to make room)", expand=False)
    for column in ("pod", "node", "victims", "events"):
        table.add_column(column, overflow="fold")
    for preemption in preemptions:
        table.add_row(
            preemption.preemptor,
            preemption.node or "-",
            "\n".join(preemption.victims) or "-",
            "\n".join(f"{e.pod} {e.type} {e.reason}: {e.message}" for e in preemption.events),
        )
    return table
