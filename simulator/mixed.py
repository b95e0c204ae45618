"""The mixed path, assembled: DRA claims and legacy pods on the same NVIDIA GPUs.

The DRA half is `simulator.dra` in controller-allocated mode with `--mixed-mode`
on the controller and on each NVIDIA node's kubelet plugin. Each NVIDIA node
then also runs the real device plugin (`--mixed-mode`) over the same mock GPU
file, so one card has one name in the slice and one uuid in the register, and
the real legacy scheduler (`--mixed-mode`) serves `/migrate`, `/webhook` and
the extender, over TLS, as in `simulator.legacy`. Both allocators count what
the other holds and serialise their writes on HAMi's node lock.

Each pod goes through the admission chain the deployed webhook configurations
make: `/migrate` first (a pod of a namespace labelled `vgpu.hami.io/migrate=true`
comes back asking for a claim from a template the webhook wrote), then the
legacy `/webhook`. A pod that still asks for `nvidia.com/gpu` takes the legacy
flow (/filter, /bind, Allocate); any other is created for the DRA flow
(kube-controller-manager's claim, the controller, kube-scheduler, prepare).
Claims are placed and settled first, then the legacy pods, so the legacy pods
meet GPUs the claims already hold: the report shows both on one bar.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from controller.controller import FILTERING_FAILED, INVALID_PARAMETERS
from dra_driver.status.command import StatusSettings, fetch_status
from simulator.dra import DraCluster, dra_cluster
from simulator.dra_simulation import SETTLE_POLL_S, DraTarget, pod_report, pods_and_reasons
from simulator.legacy import (
    LegacyCluster,
    container_requests,
    start_device_plugin,
    start_scheduler,
)
from simulator.legacy_tls import write_legacy_tls
from simulator.legacy_vendors import ENABLED_FLAGS, device_config, managed_resources
from simulator.progress import Steps
from simulator.report import PodReport, SimulationReport, load_specs
from simulator.settings import SimulationSettings, work_root
from simulator.standins.admission import AdmissionClient, WebhookConfig
from simulator.standins.kubelet_deviceplugin import KubeletDevicePlugin
from simulator.standins.scheduler_extender import (
    ExtenderConfig,
    ExtenderTLSConfig,
    SchedulerExtenderClient,
)
from simulator.tamper import run_attempts
from simulator.workloads import Scenario, apply_workloads

MIGRATE_WEBHOOK = "namespace.migrate.vgpu.hami.io"
"""The name deploy/components/migration gives the `/migrate` entry (shown in its refusals)."""


async def _legacy_half(
    stack: AsyncExitStack,
    cluster: DraCluster,
    settings: SimulationSettings,
    root: Path,
    step: Any,
) -> tuple[LegacyCluster, AdmissionClient]:
    """The device plugins on the NVIDIA nodes (over the files `start_node` wrote in
    `root/<node>`), the legacy scheduler and its callers; the legacy cluster to place
    pods with, and the `/migrate` caller."""
    kubelets: dict[str, KubeletDevicePlugin] = {}
    for node in settings.shape.family_nodes():
        if node.vendor != "nvidia":
            continue
        step(f"starting the device plugin on {node.name}")
        kubelets[node.name] = await start_device_plugin(
            stack, cluster.identities, settings, node.name, root / node.name, mixed_mode=True
        )
    step("starting the legacy scheduler")
    tls = write_legacy_tls(root / "tls")
    base_url = await start_scheduler(stack, cluster.identities, tls, set(kubelets), mixed_mode=True)
    webhook = await stack.enter_async_context(
        AdmissionClient(WebhookConfig(url=f"{base_url}/webhook", ca_file=tls.ca))
    )
    migrate = await stack.enter_async_context(
        AdmissionClient(
            WebhookConfig(url=f"{base_url}/migrate", name=MIGRATE_WEBHOOK, ca_file=tls.ca)
        )
    )
    backends = device_config().backends(ENABLED_FLAGS)
    extender_tls = ExtenderTLSConfig(
        ca_file=tls.ca, cert_file=tls.kube_scheduler.cert, key_file=tls.kube_scheduler.key
    )
    scheduler = await stack.enter_async_context(
        SchedulerExtenderClient(
            ExtenderConfig(
                url_prefix=base_url,
                node_cache_capable=True,
                managed_resources=managed_resources(backends),
                tls_config=extender_tls,
            )
        )
    )
    legacy = LegacyCluster(
        cluster.server,
        cluster.client,
        cluster.identities,
        tls,
        base_url,
        webhook,
        scheduler,
        backends,
        kubelets,
    )
    return legacy, migrate


async def _review(
    client: AdmissionClient, legacy: LegacyCluster, body: dict[str, Any], namespace: str
) -> tuple[dict[str, Any] | None, str]:
    """The pod as the webhook leaves it (as the administrator made it), or None and why not."""
    built = client.build_review(body, namespace=namespace, user_info=legacy.user_info(None))
    review = await client.review(built)
    if not review.allowed or review.object is None:
        return None, (review.status or {}).get("message", "webhook denied")
    return review.object, ""


REFUSED_BY_CONTROLLER = (f"{FILTERING_FAILED}:", f"{INVALID_PARAMETERS}:")
"""The controller's own refusals. Not settled yet: kube-scheduler's Unschedulable while
a claim awaits the controller, and a write the node guard held back (retried)."""


async def _wait_claims_settled(
    cluster: DraCluster, names: set[tuple[str, str]], settings: SimulationSettings, step: Any
) -> list[tuple[dict[str, Any], str]]:
    """Until each DRA pod runs or the controller refused its claims, or the timeout.

    Stricter than `dra_simulation.wait_settled`: the mixed controller takes the node lock
    before it writes, so kube-scheduler often reports a pod Unschedulable before its claim is
    allocated, and the legacy pods must meet the claims' allocations, not their absence.
    A component that died ends the wait with its error."""
    deadline = time.monotonic() + settings.settle_timeout_s
    while True:
        cluster.check_running()
        view = await pods_and_reasons(cluster.client, names)
        settled = [
            pod
            for pod, reason, allocated in view
            if (pod.get("status") or {}).get("phase") == "Running"
            or (reason.startswith(REFUSED_BY_CONTROLLER) and not allocated)
        ]
        step(f"DRA pods settled {len(settled)}/{len(names)}")
        if len(settled) == len(names) or time.monotonic() >= deadline:
            return [(pod, reason) for pod, reason, _ in view]
        await asyncio.sleep(SETTLE_POLL_S)


async def simulate_mixed(
    settings: SimulationSettings, scenario: Scenario, progress: Any
) -> SimulationReport:
    started = time.monotonic()
    step = Steps(progress)

    with work_root(settings) as root:
        async with dra_cluster(settings, root, step) as cluster, AsyncExitStack() as stack:
            legacy, migrate = await _legacy_half(stack, cluster, settings, root, step)
            workloads = scenario.workloads
            await apply_workloads(
                cluster.client, [w for w in workloads if w.kind != "Pod"], settings.namespace
            )
            pods: list[PodReport] = []
            legacy_pods: list[tuple[str, dict[str, Any]]] = []
            dra_names: set[tuple[str, str]] = set()
            for workload in (w for w in workloads if w.kind == "Pod"):
                step(f"admitting pod {workload.name}")
                namespace = workload.namespace or settings.namespace
                body: dict[str, Any] | None = {
                    **workload.body,
                    "metadata": {**(workload.body.get("metadata") or {}), "namespace": namespace},
                }
                body, refusal = await _review(migrate, legacy, body, namespace)
                if body is not None and container_requests(body):
                    # Still HAMi's: /webhook and the rest come with the legacy placement.
                    legacy_pods.append((namespace, body))
                    continue
                if body is not None:
                    body, refusal = await _review(legacy.webhook, legacy, body, namespace)
                if body is None:
                    pods.append(PodReport(namespace, workload.name, "", "Pending", reason=refusal))
                    continue
                await cluster.client.create(f"/api/v1/namespaces/{namespace}/pods", body)
                dra_names.add((namespace, workload.name))

            view = await _wait_claims_settled(cluster, dra_names, settings, step)
            for namespace, pod in legacy_pods:
                step(f"placing legacy pod {namespace}/{pod['metadata']['name']}")
                placed = await legacy.place_pod(pod, namespace, None)
                name = pod["metadata"]["name"]
                pods.append(
                    placed.report
                    or PodReport(namespace, name, "", "Pending", reason=placed.refusal)
                )
            step("reading the result")
            registry = load_specs(node.cdi_dir for node in cluster.nodes)
            pods += [pod_report(cluster, pod, reason, registry) for pod, reason in view]
            target = DraTarget(cluster, settings.settle_timeout_s)
            attempts = await run_attempts(target, scenario.attempts, settings.namespace, step)
            status = await fetch_status(cluster.client, StatusSettings())
    return SimulationReport(
        settings.mode.value,
        status,
        sorted(pods, key=lambda p: (p.namespace, p.name)),
        time.monotonic() - started,
        kept=settings.work_dir is not None,
        attempts=attempts,
    )
