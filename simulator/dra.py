"""The DRA path, assembled: emulator, plugins per node, stand-ins, and the real controller.

In the controller-allocated mode the plugins taint their devices so only the
controller allocates them, the kube-scheduler stand-in places each pod on its
claims' node and reserves them, and the kubelet stand-ins prepare the claims
over the plugins' sockets. In the scheduler-allocated mode there is no
controller and the kube-scheduler stand-in allocates from consumable capacity.
The mixed mode is the controller-allocated one with `--mixed-mode` on the
controller and the NVIDIA nodes' plugins (`simulator.mixed` adds the legacy half).
The controller runs as one replica without election; the Lease its election
would write names it (`hold_controller_lease`), so deploy/'s lease-holder policy
admits its claim writes as it admits a real leader's. In the controller-allocated
mode it also serves the allocation-gate webhook deploy/overlays/dra installs, and
`DraCluster.admission` sends each pod the simulation creates through it
(simulator.gate_admission); the mixed mode does not call it yet.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import config as sync_config
from prometheus_client import CollectorRegistry

from controller.command import LEASE_NAME
from controller.controller import Controller
from controller.metrics import ControllerMetrics
from controller.settings import ControllerSettings
from dra_driver.errors import DriverError
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.api_time import micro_time
from dra_driver.process.runtime import cancel_and_wait
from simulator.apiserver import APIServer
from simulator.deviceclasses import device_classes
from simulator.failures import ComponentError, failure_text, first_of, run_as
from simulator.gate_admission import (
    NoGateAdmission,
    PodAdmission,
    start_gate_admission,
)
from simulator.identities import (
    CONTROLLER,
    CONTROLLER_POD,
    DRIVER_NAMESPACE,
    KUBE_CONTROLLER_MANAGER,
    KUBE_SCHEDULER,
    Identities,
)
from simulator.nodes import START_WAIT_S, SimNode, start_nodes, stop_nodes
from simulator.policies import install_policies
from simulator.settings import Mode, SimulationSettings
from simulator.standins.claim_templates import ClaimTemplateController
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings
from simulator.standins.kubelet_pods import PodFeed

SCHEDULER_POLL_S = 0.05
SCHEDULER_INITIAL_BACKOFF_S = 0.1
SCHEDULER_MAX_BACKOFF_S = 1.0
CONTROLLER_RETRY_S = 0.2
CONTROLLER_READY_S = 120.0
"""Longest wait for the controller's first sync (its informers list every node's slices)."""
CONTROLLER_COMPONENT = "controller"
"""Its User-Agent's component, as `dra-driver controller` sends it (the write audit's name)."""


@dataclass
class DraCluster:
    """What is running; `nodes` in order, for the report. `client` is the administrator's
    (workloads, the report); each component runs as its own identity."""

    server: APIServer
    client: KubeClient
    identities: Identities
    nodes: list[SimNode] = field(default_factory=list)
    controller: Controller | None = None
    admission: PodAdmission = field(default_factory=NoGateAdmission)
    """What kube-apiserver's admission does to a pod before it is stored."""
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    """The components that run as tasks (kube-scheduler, the controller), named for them."""

    def check_running(self) -> None:
        """Raise what a component's task ended with: a dead scheduler or controller
        would otherwise show only as pods that never settle."""
        for task in self.tasks:
            if task.done() and not task.cancelled():
                error = task.exception()
                if error is None:
                    raise ComponentError(task.get_name(), "stopped while the run went on")
                failure = failure_text(error) if isinstance(error, DriverError) else repr(error)
                raise ComponentError(task.get_name(), f"stopped: {failure}")


async def hold_controller_lease(admin: KubeClient, controller: KubeClient) -> None:
    """deploy/base's namespace, and in it the Lease as the controller's first election
    writes it, naming its replica; the replica runs alone, so nobody takes it over."""
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}}
    await admin.create("/api/v1/namespaces", namespace)
    now = micro_time()
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": LEASE_NAME, "namespace": DRIVER_NAMESPACE},
        "spec": {
            "holderIdentity": CONTROLLER_POD,
            "leaseDurationSeconds": 15,
            "acquireTime": now,
            "renewTime": now,
            "leaseTransitions": 0,
        },
    }
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{DRIVER_NAMESPACE}/leases"
    await controller.create(leases, lease)


@contextlib.asynccontextmanager
async def dra_cluster(
    settings: SimulationSettings, root: Path, on_step: Any = None
) -> AsyncIterator[DraCluster]:
    """Start everything, yield the running cluster, stop everything in reverse order.

    The mode's admission policies from deploy/ are in place before any component starts."""
    step = on_step or (lambda text: None)
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
        identities = Identities(server, root / "identities")
        cluster = DraCluster(server, client, identities)
        tasks = cluster.tasks
        stop = asyncio.Event()
        sync_client = sync_config.new_client_from_config(
            config_file=str(identities.kubeconfig(KUBE_SCHEDULER))
        )
        feed = PodFeed(client)
        templates = ClaimTemplateController(await identities.client(KUBE_CONTROLLER_MANAGER))
        recorder: EventRecorder | None = None
        webhooks = AsyncExitStack()
        try:
            step("installing the admission policies")
            await run_as("simulate (admin)", install_policies(client, settings.mode.value))
            for device_class in device_classes():
                await run_as(
                    "simulate (admin)",
                    client.create("/apis/resource.k8s.io/v1/deviceclasses", device_class),
                )
            controller_allocated = settings.mode in (Mode.DRA, Mode.MIXED)
            mixed = settings.mode is Mode.MIXED
            total = len(settings.shape.family_nodes())
            step(f"nodes started 0/{total}")
            await run_as(
                "kubelets' pod watch (admin)",
                feed.start(),
                timeout_s=START_WAIT_S,
                doing="listing the pods",
            )
            await start_nodes(
                identities,
                settings.shape,
                root,
                cluster.nodes,
                feed=feed,
                controller_allocated=controller_allocated,
                mixed_mode=mixed,
                on_started=lambda done, total: step(f"nodes started {done}/{total}"),
            )
            step("starting the claim-template controller")
            await run_as("claim-template controller", templates.start())
            scheduler = DRAScheduler(
                sync_client,
                settings=SchedulerSettings(
                    allocate=not controller_allocated,
                    poll_interval=SCHEDULER_POLL_S,
                    initial_backoff=SCHEDULER_INITIAL_BACKOFF_S,
                    max_backoff=SCHEDULER_MAX_BACKOFF_S,
                ),
            )
            tasks.append(asyncio.create_task(scheduler.run(stop), name="kube-scheduler"))
            if controller_allocated:
                step("starting the controller")
                controller_client = (await identities.client(CONTROLLER)).for_component(
                    CONTROLLER_COMPONENT
                )
                await run_as("controller", hold_controller_lease(client, controller_client))
                recorder = EventRecorder(
                    controller_client, EventSettings(component="vgpu-dra-controller")
                )
                recorder.start()
                controller_settings = ControllerSettings(
                    gpu_policy=settings.gpu_policy,
                    node_policy=settings.node_policy,
                    retry_initial_s=CONTROLLER_RETRY_S,
                    mixed_mode=mixed,
                )
                if not mixed:
                    step("serving the allocation-gate webhook")
                    cluster.admission = await run_as(
                        "controller's allocation-gate webhook",
                        start_gate_admission(
                            webhooks,
                            controller_client,
                            controller_settings.device_classes,
                            server.tokens,
                            root / "allocation-gate",
                        ),
                    )
                cluster.controller = Controller(
                    controller_client,
                    controller_settings,
                    ControllerMetrics(CollectorRegistry()),
                    recorder,
                )
                running = asyncio.create_task(cluster.controller.run(), name="controller")
                tasks.append(running)
                await run_as(
                    "controller",
                    first_of(running, cluster.controller.ready.wait()),
                    timeout_s=CONTROLLER_READY_S,
                    doing="syncing its informers",
                )
            yield cluster
        finally:
            stop.set()
            await cancel_and_wait(tasks)
            await webhooks.aclose()
            if recorder is not None:
                await recorder.aclose()
            await templates.aclose()
            await stop_nodes(cluster.nodes)
            await feed.aclose()
            await identities.aclose()
            await client.aclose()
            await asyncio.to_thread(sync_client.close)
