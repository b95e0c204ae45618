"""`dra-driver controller` as a process: check the API, elect a leader, serve metrics, allocate.

The allocation-gate webhook (controller/gate_webhook.py), when configured, is served
beside the metrics from the start, on every replica: the API server calls any
endpoint of its Service, and the webhook only reads.

At start the controller waits for the API server while it does not answer
(`dra_driver.kube.api_wait`: logged, and /readyz says so), then checks that it
offers what the controller needs and refuses to run, with a message that says
what is missing, otherwise:
resource.k8s.io/v1 with resourceclaims/status, resourceslices and
deviceclasses (Kubernetes >= 1.34), and coordination.k8s.io/v1 leases. Once
this driver's slices are published it also checks that the server kept the
fields the sole-allocator mechanism relies on: a server with
DRAConsumableCapacity off drops `allowMultipleAllocations`, one with
DRADeviceTaints off drops device `taints`, and then kube-scheduler would
allocate the same devices in parallel.

Only the Lease holder allocates; it starts from a fresh list of everything.
Each claim write passes the leader's fence first (dra_driver/kube/leader.py):
a replica whose last renewal is older than the renew deadline writes nothing.
If it cannot renew the Lease, or a write finds it stale, it stops allocating at
once and stands as a candidate again (no exit: under kubelet that would be
CrashLoopBackOff, keeping the controller down long after the API is back).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from controller.cluster_view import SLICES
from controller.controller import Controller
from controller.gate_webhook import GateWebhookServer, GateWebhookSettings
from controller.metrics import ControllerMetrics
from controller.settings import ControllerSettings
from dra_driver.errors import DriverError
from dra_driver.kube.api_wait import ApiWait
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.leader import NO_FENCE, LeaderElector, LeaderSettings, WriteFence
from dra_driver.kube.rest import KubeClient, NotFoundError, forget_request_urls
from dra_driver.process.allocator import release_free_memory
from dra_driver.process.build_info import register_build_info
from dra_driver.process.runtime import cancel_and_wait, finished_before_stop
from libvgpu.monitor import MetricsServer

log = logging.getLogger(__name__)

COMPONENT = "vgpu-dra-controller"
REQUIRED_RESOURCES: Mapping[str, frozenset[str]] = {
    "/apis/resource.k8s.io/v1": frozenset(
        {"resourceclaims", "resourceclaims/status", "resourceslices", "deviceclasses"}
    ),
    "/apis/coordination.k8s.io/v1": frozenset({"leases"}),
}
WHY = {
    "/apis/resource.k8s.io/v1": "Kubernetes >= 1.34 (DRA GA; the controller writes "
    "resource.k8s.io/v1 allocations with shareID and consumedCapacity)",
    "/apis/coordination.k8s.io/v1": "leader election on a Lease",
}
IDLE_CONNECTION_KEEPALIVE_S = 3.0
"""A pooled API connection idle this long closes: past a burst the pool shrinks back to
what the lease renewals (every 2 s) and event writes use, and the burst's connections
stop pinning memory the controller has freed."""


class ApiUnsupportedError(DriverError):
    """The API server lacks something the controller needs; the message says what."""


@dataclass(frozen=True, slots=True)
class ServiceSettings:
    controller: ControllerSettings = field(default_factory=ControllerSettings)
    leader: LeaderSettings | None = None
    """None: no leader election (a single replica, or tests)."""

    metrics_address: tuple[str, int] | None = None
    gate_webhook: GateWebhookSettings | None = None
    """None: no /allocation-gate (no `--tls-cert`); else served on every replica."""


async def check_api(client: KubeClient) -> None:
    """Refuse to run (ApiUnsupportedError) unless the API serves what the controller uses."""
    for path, needed in REQUIRED_RESOURCES.items():
        try:
            listing = await client.get(path)
        except NotFoundError:
            raise ApiUnsupportedError(
                f"the API server does not serve {path.removeprefix('/apis/')}: "
                f"needed for {WHY[path]}"
            ) from None
        served = {resource.get("name") for resource in listing.get("resources") or []}
        missing = sorted(needed - served)
        if missing:
            raise ApiUnsupportedError(
                f"{path.removeprefix('/apis/')} lacks {', '.join(missing)}: needed for {WHY[path]}"
            )


def slice_feature_problems(slices: Iterable[Mapping[str, Any]], driver: str) -> list[str]:
    """What the server dropped from this driver's published slices (feature gates off)."""
    problems = []
    devices = [
        device
        for item in slices
        if (item.get("spec") or {}).get("driver") == driver
        for device in (item.get("spec") or {}).get("devices") or []
    ]
    if devices and not any(d.get("allowMultipleAllocations") for d in devices):
        problems.append(
            "ResourceSlices lost allowMultipleAllocations: enable the DRAConsumableCapacity "
            "feature gate (beta, on by default from Kubernetes 1.36)"
        )
    if devices and not any(d.get("taints") for d in devices):
        problems.append(
            "ResourceSlices carry no device taints: run the kubelet plugin with "
            "--controller-allocated and enable DRADeviceTaints (beta in 1.36, GA in 1.37); "
            "without the taint kube-scheduler allocates the same devices in parallel"
        )
    return problems


async def check_slices(client: KubeClient, driver: str) -> None:
    listing = await client.list(SLICES, field_selector=f"spec.driver={driver}")
    problems = slice_feature_problems(listing.get("items") or [], driver)
    if problems:
        raise ApiUnsupportedError("; ".join(problems))


async def check_cluster(client: KubeClient, driver: str) -> None:
    """Both checks: the attempt the controller waits on at start."""
    await check_api(client)
    await check_slices(client, driver)


async def run_controller(
    client: KubeClient,
    settings: ServiceSettings,
    stop: asyncio.Event,
    *,
    after_sync: Callable[[], None] | None = None,
    release_memory: Callable[[], bool] | None = None,
    api_wait: ApiWait | None = None,
) -> None:
    """Check, then allocate while leader, until `stop` is set; `after_sync` is called
    each time a newly leading controller has listed everything, `release_memory` each
    time a burst's objects are gone; `api_wait` waits for the API server at start (and
    says so on /readyz)."""
    api_wait = api_wait or ApiWait(COMPONENT)
    registry = CollectorRegistry()
    register_build_info(registry)
    metrics = ControllerMetrics(registry)
    identity = settings.leader.identity if settings.leader else COMPONENT
    recorder = EventRecorder(client, EventSettings(component=COMPONENT, instance=identity))
    recorder.start()
    server = (
        MetricsServer(registry, *settings.metrics_address, readiness=api_wait.readiness)
        if settings.metrics_address
        else None
    )
    webhook = (
        GateWebhookServer(
            client,
            settings.controller.device_classes,
            settings.gate_webhook.serve,
            settings.gate_webhook.caller_auth,
        )
        if settings.gate_webhook
        else None
    )
    certified: asyncio.Task[None] | None = None
    try:
        if server is not None:
            await server.start()
        if webhook is not None and not await webhook.start_if_certified():
            poll_s = settings.gate_webhook.certificate_poll_s
            certified = asyncio.create_task(
                webhook.start_once_certified(stop, poll_s), name="gate webhook"
            )
        checked = api_wait.until_reachable(
            lambda: check_cluster(client, settings.controller.driver)
        )
        if not await finished_before_stop(stop, checked):
            return

        def allocator(fence: WriteFence) -> Callable[[], Awaitable[None]]:
            async def allocate() -> None:
                await Controller(
                    client,
                    settings.controller,
                    metrics,
                    recorder,
                    after_sync=after_sync,
                    release_memory=release_memory,
                    fence=fence,
                ).run()

            return allocate

        if settings.leader is not None:
            elector = LeaderElector(client, settings.leader)
            work = elector.campaign(allocator(elector))
        else:
            work = allocator(NO_FENCE)()
        worker = asyncio.create_task(work, name="controller")
        stopper = asyncio.create_task(stop.wait(), name="stop")
        await asyncio.wait({worker, stopper}, return_when=asyncio.FIRST_COMPLETED)
        for task in (worker, stopper):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopper
        with contextlib.suppress(asyncio.CancelledError):
            await worker
    finally:
        if webhook is not None:
            if certified is not None:
                await cancel_and_wait([certified])
            await webhook.aclose()
        if server is not None:
            await server.aclose()
        await recorder.aclose()


async def serve_controller(
    settings: ServiceSettings, kubeconfig: Path | None, stop: asyncio.Event
) -> None:
    client = await KubeClient.from_kubeconfig(
        kubeconfig, component="controller", idle_keepalive_s=IDLE_CONNECTION_KEEPALIVE_S
    )
    try:
        await run_controller(
            client,
            settings,
            stop,
            after_sync=freeze_collected,
            release_memory=release_after_burst,
        )
    finally:
        await client.aclose()


def release_after_burst() -> bool:
    """Drop the URL library's memos of the burst's request URLs, whose objects would keep
    arenas resident, then hand the C heap's free pages back; True if some went back."""
    forget_request_urls()
    return release_free_memory()


def freeze_collected() -> None:
    """Move everything alive after the first full list out of the collector's reach
    (`gc.freeze`): the modules, the cluster's nodes and slices and what else stays for
    the process's life are no longer walked by each full collection, whose pauses
    otherwise land inside decisions. Only the controller process does this: a test
    running the controller in-process keeps its collector as it was."""
    gc.collect()
    gc.freeze()
