"""`dra-driver simulate --mode dra`: start, apply, wait until each pod runs or is refused.

A scenario's phases (simulator.phases) are applied one after the other, each once
the pods before it have settled; a pod the controller preempted is gone by then
and the report's preemptions name it.

Mixed mode reuses the waiting and the per-pod report; `simulator.run` picks the mode.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any

from controller.allocation_gate import blocking_gates
from controller.object_state import STALE_CYCLE_MESSAGES
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient
from dra_driver.objects.pod_claims import pod_claim_names
from dra_driver.objects.pod_scheduling import scheduling_gate_names
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.status.command import StatusSettings, fetch_status
from dra_driver.status.model import newest_warning
from simulator.attempts import Call, Identity
from simulator.dra import DraCluster, dra_cluster
from simulator.failures import run_as
from simulator.mig_report import holds_partition, pod_partitions, published_partitions
from simulator.phases import remove_gate
from simulator.progress import Steps
from simulator.report import (
    PodReport,
    SimulationReport,
    container_report,
    load_specs,
    preemption_reports,
    spec_files,
)
from simulator.settings import SimulationSettings, work_root
from simulator.tamper import CallAnswer, PlacedPod, run_attempts
from simulator.workloads import Phase, Scenario, apply_workloads

SETTLE_POLL_S = 0.1
SCHEDULING_GATED = "SchedulingGated"
"""The PodScheduled reason of a pod created with gates (the pod strategy's)."""
ADMIN_WORKLOADS = "simulate, applying the workloads as admin"
ADMIN_WATCHING = "simulate, reading the pods as admin"
ADMIN_STATUS = "simulate, reading the cluster status as admin"
"""How the simulation's own requests are named when one fails."""


def _reason(
    pod: Mapping[str, Any],
    claims: Sequence[str],
    events: list[dict[str, Any]],
    *,
    controller_allocated: bool,
) -> str:
    """The newest Warning on the pod or its claims, else kube-scheduler's verdict. Where
    the controller allocates, a verdict from a cycle that saw the claims unallocated
    (`cannot allocate all claims`) only says the controller has not written yet: the
    controller's own FilteringFailed event is the reason when nothing fits."""
    namespace = pod["metadata"]["namespace"]
    reason = newest_warning(events, "Pod", namespace, {pod["metadata"]["name"]})
    reason = reason or newest_warning(events, "ResourceClaim", namespace, set(claims))
    if reason:
        return reason
    if scheduling_gate_names(pod):
        # Held by the controller's own gate alone: it is on its way, like a stale cycle.
        return gated_reason(pod) if blocking_gates(pod) or not controller_allocated else ""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            if condition.get("reason") == SCHEDULING_GATED:
                # Written at creation; the gates have gone since, kube-scheduler is next.
                return ""
            message = str(condition.get("message", ""))
            if controller_allocated and any(text in message for text in STALE_CYCLE_MESSAGES):
                return ""
            return f"{condition.get('reason', '')}: {message}"
    return ""


def gated_reason(pod: Mapping[str, Any]) -> str:
    """Why a pod with scheduling gates waits, naming them (empty without gates)."""
    gates = scheduling_gate_names(pod)
    if not gates:
        return ""
    return f"{SCHEDULING_GATED}: the pod keeps its scheduling gates {', '.join(gates)}"


def _settled(pod: Mapping[str, Any], reason: str, allocated: bool) -> bool:
    """Running, or refused: a reason, every claim made (until its template's claims exist
    a pod only waits for them), none allocated (an allocated one is on its way) and no
    node nominated (its preemption's victims are on their way out)."""
    status = pod.get("status") or {}
    if status.get("phase") == "Running":
        return True
    if status.get("nominatedNodeName"):
        return False
    return bool(reason) and not allocated and all(pod_claim_names(pod).values())


def _preemptions_done(cluster: DraCluster) -> float | None:
    """The controller's count of finished preemption decisions, None while one is carried
    out. A refusal's event can be read before the preemption it started nominates a
    node; the same count before and after a read of the pods, none in flight, says
    no preemption began or ended unseen around that read."""
    controller = cluster.controller
    if controller is None:
        return 0.0
    if controller.preemptions.tasks:
        return None
    (metric,) = controller.metrics.preemption_attempts.collect()
    return sum(sample.value for sample in metric.samples if sample.name.endswith("_total"))


class DraTarget:
    """Where tamper attempts go in DRA: pods created as the tenant, then scheduled and
    prepared by the stand-ins; the CDI spec's env replaces the container's."""

    driver_env_wins = True

    def __init__(self, cluster: DraCluster, timeout_s: float) -> None:
        self.cluster = cluster
        self.admin = cluster.client
        self.identities = cluster.identities
        self.timeout_s = timeout_s

    async def place_pod(self, pod: dict[str, Any], namespace: str, identity: Identity) -> PlacedPod:
        client = await self.identities.client(identity)
        body = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": namespace}}
        try:
            admitted = await self.cluster.admission.admit(
                body, namespace, self.identities.token(identity)
            )
        except InvalidParameterError as error:
            return PlacedPod(refusal=error.reason)
        try:
            await client.create(f"/api/v1/namespaces/{namespace}/pods", admitted)
        except ApiError as error:
            return PlacedPod(refusal=error.message)
        key = (namespace, body["metadata"]["name"])
        deadline = time.monotonic() + self.timeout_s
        while True:
            self.cluster.check_running()
            ((stored, reason, allocated),) = await pods_and_reasons(
                self.admin, {key}, controller_allocated=self.cluster.controller is not None
            )
            prepared = [n.pods.prepared.get("/".join(key)) for n in self.cluster.nodes]
            failed = any(record is not None and record.error for record in prepared)
            if failed or _settled(stored, reason, allocated) or time.monotonic() >= deadline:
                break
            await asyncio.sleep(SETTLE_POLL_S)
        # Only the pod's node holds its CDI specs (reading every node's: 1,000 directories).
        on_node = (stored.get("spec") or {}).get("nodeName")
        registry = load_specs(n.cdi_dir for n in self.cluster.nodes if n.name == on_node)
        return PlacedPod(stored=stored, report=pod_report(self.cluster, stored, reason, registry))

    async def call(self, call: Call, identity: Identity | None, namespace: str) -> CallAnswer:
        raise InvalidParameterError("spec.call", "DRA mode runs no legacy scheduler to call")


async def pods_and_reasons(
    client: KubeClient, names: set[tuple[str, str]], *, controller_allocated: bool = True
) -> list[tuple[dict[str, Any], str, bool]]:
    """Each pod, why it waits (if it does), and whether any of its claims is allocated."""
    pods = (await client.list("/api/v1/pods")).get("items") or []
    events = (await client.list("/api/v1/events")).get("items") or []
    claims = (await client.list("/apis/resource.k8s.io/v1/resourceclaims")).get("items") or []
    allocated = {
        (c["metadata"]["namespace"], c["metadata"]["name"])
        for c in claims
        if (c.get("status") or {}).get("allocation")
    }
    view = []
    for pod in pods:
        namespace = pod["metadata"]["namespace"]
        if (namespace, pod["metadata"]["name"]) not in names:
            continue
        claim_names = [c for c in pod_claim_names(pod).values() if c]
        any_allocated = any((namespace, name) in allocated for name in claim_names)
        reason = _reason(pod, claim_names, events, controller_allocated=controller_allocated)
        view.append((pod, reason, any_allocated))
    return view


async def wait_settled(
    cluster: DraCluster, names: set[tuple[str, str]], timeout_s: float, on_progress: Any
) -> list[tuple[dict[str, Any], str]]:
    """Until every pod runs, has a reason not to or is gone (preempted), and no preemption
    is under way, or the timeout; the last view either way. A component's task that
    died ends the wait with its error."""
    deadline = time.monotonic() + timeout_s
    while True:
        cluster.check_running()
        controller_allocated = cluster.controller is not None
        before = _preemptions_done(cluster)
        view = await run_as(
            ADMIN_WATCHING,
            pods_and_reasons(cluster.client, names, controller_allocated=controller_allocated),
        )
        quiet = before is not None and _preemptions_done(cluster) == before
        settled = sum(_settled(*entry) for entry in view) + len(names) - len(view)
        on_progress(settled, len(names))
        if (quiet and settled == len(names)) or time.monotonic() >= deadline:
            return [(pod, reason) for pod, reason, _ in view]
        await asyncio.sleep(SETTLE_POLL_S)


def pod_report(
    cluster: DraCluster, pod: Mapping[str, Any], reason: str, registry: Mapping[str, Any]
) -> PodReport:
    metadata, spec = pod["metadata"], pod.get("spec") or {}
    key = f"{metadata['namespace']}/{metadata['name']}"
    node = spec.get("nodeName") or ""
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    report = PodReport(
        metadata["namespace"],
        metadata["name"],
        node,
        phase,
        reason=reason or gated_reason(pod),
        gates=scheduling_gate_names(pod),
        created_gates=cluster.admission.created_gates.get(
            (metadata["namespace"], metadata["name"]), []
        ),
    )
    prepared = next((n.pods.prepared.get(key) for n in cluster.nodes if n.name == node), None)
    if prepared is None:
        report.claims = {k: v for k, v in pod_claim_names(pod).items() if v}
        return report
    report.claims = dict(prepared.claims)
    if prepared.error:
        report.reason = report.reason or prepared.error
        return report
    report.containers = {
        name: container_report(ids, registry) for name, ids in prepared.containers.items()
    }
    report.spec_files = spec_files((i for ids in prepared.cdi_ids.values() for i in ids), registry)
    return report


async def add_partitions(
    client: KubeClient, view: Sequence[tuple[dict[str, Any], str]], reports: Sequence[PodReport]
) -> None:
    """Each report gains the MIG partitions its pod's claims hold (`view` in its order),
    read from the claims' allocations and the slices that publish the partitions (read
    only when a claim holds one: a run of 1,000 nodes has thousands of slices)."""
    claims = (await client.list(f"{RESOURCE_API}/resourceclaims")).get("items") or []
    if not any(holds_partition(claim) for claim in claims):
        return
    slices = (await client.list(f"{RESOURCE_API}/resourceslices")).get("items") or []
    published = published_partitions(slices)
    by_name = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    for (pod, _), report in zip(view, reports, strict=True):
        report.partitions = pod_partitions(pod, by_name, published)


async def simulate(
    settings: SimulationSettings, scenario: Scenario, progress: Any
) -> SimulationReport:
    started = time.monotonic()
    step = Steps(progress)
    with work_root(settings) as root:
        async with dra_cluster(settings, root, step) as cluster:
            names: set[tuple[str, str]] = set()
            for phase in scenario.phases:
                view = await _apply_phase(cluster, settings, phase, names, step)
            step("reading the result")
            registry = load_specs(node.cdi_dir for node in cluster.nodes)
            pods = [pod_report(cluster, pod, reason, registry) for pod, reason in view]
            await run_as(ADMIN_STATUS, add_partitions(cluster.client, view, pods))
            events = await run_as(ADMIN_STATUS, cluster.client.list("/api/v1/events"))
            preemptions = preemption_reports(events.get("items") or [], [p for p, _ in view])
            target = DraTarget(cluster, settings.settle_timeout_s)
            attempts = await run_attempts(target, scenario.attempts, settings.namespace, step)
            step("reading the cluster's status")
            status = await run_as(ADMIN_STATUS, fetch_status(cluster.client, StatusSettings()))
    return SimulationReport(
        settings.mode.value,
        status,
        sorted(pods, key=lambda p: (p.namespace, p.name)),
        time.monotonic() - started,
        kept=settings.work_dir is not None,
        attempts=attempts,
        preemptions=preemptions,
    )


async def _apply_phase(
    cluster: DraCluster,
    settings: SimulationSettings,
    phase: Phase,
    names: set[tuple[str, str]],
    step: Steps,
) -> list[tuple[dict[str, Any], str]]:
    """The phase's gate removals, then its objects; wait until its pods and every
    earlier one settle. `names` gains the phase's pods."""
    title = f"phase {phase.start.name}: " if phase.start.name else ""
    for removal in phase.start.removals:
        step(f"{title}removing gate {removal.gate} from pod {removal.pod}")
        await run_as(ADMIN_WORKLOADS, remove_gate(cluster.client, removal, settings.namespace))
    step(f"{title}applying {len(phase.workloads)} objects")
    await run_as(
        ADMIN_WORKLOADS,
        apply_workloads(cluster.client, phase.workloads, settings.namespace, cluster.admission),
    )
    names.update(
        (w.namespace or settings.namespace, w.name) for w in phase.workloads if w.kind == "Pod"
    )
    return await wait_settled(
        cluster,
        names,
        settings.settle_timeout_s,
        lambda done, total: step.count(f"{title}pods settled", done, total),
    )
