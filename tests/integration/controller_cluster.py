"""A small cluster for the controller's integration tests: the API emulator, nodes whose
kubelet-plugin ResourceSlice publishers publish mock GPUs (with the controller-allocated
device taint), DeviceClasses, claims and pods, and the real controller running in a task."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import config
from prometheus_client import CollectorRegistry

from api.quantity import MIB, parse_quantity
from controller.cluster_view import CLAIMS
from controller.controller import Controller
from controller.metrics import ControllerMetrics
from controller.settings import ControllerSettings
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.publisher import SlicePublisher
from kubeletplugin.slices import SliceSettings, Taint
from simulator.apiserver import APIServer
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
NAMESPACE = "default"
GIB = 1 << 30
CONTROLLER_TAINT = Taint(f"{DRIVER}/allocation", "controller")
PLUGIN_SLICES = SliceSettings(driver=DRIVER, allocation_taint=CONTROLLER_TAINT)
CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.allowMultipleAllocations == true"
FAST = ControllerSettings(retry_initial_s=0.05, retry_max_s=0.5)
WAIT_S = 20.0


def gpu(
    node: str,
    index: int,
    memory_gib: int = 80,
    product: str = "NVIDIA A100-SXM4-80GB",
    numa: int = 0,
    healthy: bool = True,
) -> GpuInfo:
    return GpuInfo(
        uuid=f"GPU-{node}-{index}",
        index=index,
        minor=index,
        product_name=product,
        memory_bytes=memory_gib * GIB,
        numa_node=numa,
        healthy=healthy,
        unhealthy_reason="" if healthy else "xid-79",
    )


def request(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": CLASS, **exactly}}


def capacity(**amounts: str) -> dict[str, Any]:
    return {"capacity": {"requests": amounts}}


def vgpu_config(**parameters: Any) -> dict[str, Any]:
    return {
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "VGPUConfig", **parameters},
        }
    }


def results(claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


def node_of(claim: Mapping[str, Any]) -> str:
    term = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    return str(term["matchFields"][0]["values"][0])


def memory_mib(result: Mapping[str, Any]) -> int:
    return int(parse_quantity(result["consumedCapacity"]["memory"])) // MIB


def _ready(node: Mapping[str, Any] | None) -> bool:
    """Created, and kube-controller-manager lifted the not-ready taint every new node gets."""
    taints = ((node or {}).get("spec") or {}).get("taints") or []
    return node is not None and not any(t["key"] == "node.kubernetes.io/not-ready" for t in taints)


class Cluster:
    """The emulator plus helpers; `claims` is a live view of every ResourceClaim.

    `add_node(name, None)` creates the node only: its own kubelet plugin publishes."""

    def __init__(self, server: APIServer, client: KubeClient) -> None:
        self.server = server
        self.client = client
        self.publishers: list[SlicePublisher] = []
        self.claims = Informer(client, CLAIMS)
        self.events = Informer(client, "/api/v1/events")
        self.nodes = Informer(client, "/api/v1/nodes")
        self.pods = Informer(client, "/api/v1/pods")
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        for informer in (self.claims, self.events, self.nodes, self.pods):
            self._tasks.append(asyncio.create_task(informer.run(), name="test informer"))
            await informer.synced.wait()

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for publisher in self.publishers:
            await publisher.aclose()

    async def add_node(
        self,
        name: str,
        gpus: int | Sequence[GpuInfo] | None = 2,
        *,
        cpu: str = "8",
        labels: Mapping[str, str] | None = None,
        slices: SliceSettings = PLUGIN_SLICES,
        **spec: Any,
    ) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {"kubernetes.io/hostname": name, **(labels or {})},
            },
            "spec": spec,
            "status": {"allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"}},
        }
        await self.client.create("/api/v1/nodes", body)
        async with asyncio.timeout(WAIT_S):
            await self.nodes.wait_for(lambda store: _ready(store.get(name)))
        if gpus is None:
            return
        devices = [gpu(name, i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
        publisher = SlicePublisher(self.client, name, slices)
        await publisher.start()
        self.publishers.append(publisher)
        await publisher.publish(devices)

    async def add_class(
        self,
        name: str = CLASS,
        expression: str = CLASS_SELECTOR,
        config: Sequence[dict[str, Any]] = (),
    ) -> None:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}], "config": list(config)},
        }
        await self.client.create("/apis/resource.k8s.io/v1/deviceclasses", body)

    async def add_priority_class(
        self, name: str, value: int, preemption_policy: str | None = None
    ) -> None:
        """A PriorityClass pods name (`priorityClassName`): admission sets `spec.priority`
        (and `spec.preemptionPolicy`) from it and refuses a pod that gives one itself."""
        body: dict[str, Any] = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
        }
        if preemption_policy is not None:
            body["preemptionPolicy"] = preemption_policy
        await self.client.create("/apis/scheduling.k8s.io/v1/priorityclasses", body)

    async def add_claim(
        self,
        name: str,
        *requests: dict[str, Any],
        namespace: str = NAMESPACE,
        **devices: Any,
    ) -> dict[str, Any]:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": {"requests": list(requests) or [request()], **devices}},
        }
        return await self.client.create(
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", body
        )

    async def add_pod(
        self,
        name: str,
        claims: Sequence[str] | None = None,
        *,
        namespace: str = NAMESPACE,
        cpu: str = "1",
        annotations: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> dict[str, Any]:
        claim_names = [f"{name}-claim"] if claims is None else list(claims)
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": cpu}},
                    }
                ],
                "resourceClaims": [
                    {"name": f"c{i}", "resourceClaimName": n} for i, n in enumerate(claim_names)
                ],
                **spec,
            },
        }
        return await self.client.create(f"/api/v1/namespaces/{namespace}/pods", body)

    async def add_pod_with_claim(
        self, name: str, *requests: dict[str, Any], **pod: Any
    ) -> dict[str, Any]:
        namespace = pod.get("namespace", NAMESPACE)
        await self.add_claim(f"{name}-claim", *requests, namespace=namespace)
        return await self.add_pod(name, **pod)

    def claim(self, name: str, namespace: str = NAMESPACE) -> dict[str, Any]:
        return self.claims.store[f"{namespace}/{name}"]

    async def wait_claims(
        self,
        predicate: Callable[[Mapping[str, dict[str, Any]]], bool],
        limit_s: float = WAIT_S,
    ) -> None:
        async with asyncio.timeout(limit_s):
            await self.claims.wait_for(predicate)

    async def wait_allocated(
        self, *names: str, namespace: str = NAMESPACE, limit_s: float = WAIT_S
    ) -> list[dict[str, Any]]:
        keys = [f"{namespace}/{name}" for name in names]
        await self.wait_claims(
            lambda store: all(
                ((store.get(k) or {}).get("status") or {}).get("allocation") for k in keys
            ),
            limit_s,
        )
        return [self.claims.store[k] for k in keys]

    async def wait_bound(self, name: str, namespace: str = NAMESPACE) -> str:
        """The node kube-scheduler (the stand-in) bound the pod to."""
        key = f"{namespace}/{name}"
        async with asyncio.timeout(WAIT_S):
            await self.pods.wait_for(
                lambda store: bool(((store.get(key) or {}).get("spec") or {}).get("nodeName"))
            )
        return str(self.pods.store[key]["spec"]["nodeName"])

    async def wait_event(self, name: str, reason: str, limit_s: float = WAIT_S) -> dict[str, Any]:
        def found(store: Mapping[str, dict[str, Any]]) -> bool:
            return any(
                e.get("reason") == reason and e["involvedObject"].get("name") == name
                for e in store.values()
            )

        async with asyncio.timeout(limit_s):
            await self.events.wait_for(found)
        return next(
            e
            for e in self.events.store.values()
            if e.get("reason") == reason and e["involvedObject"].get("name") == name
        )


@contextlib.asynccontextmanager
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        running = Cluster(server, client)
        try:
            await running.start()
            yield running
        finally:
            await running.aclose()
            await client.aclose()


@contextlib.asynccontextmanager
async def scheduler(c: Cluster, tmp_path: Path, allocate: bool = False) -> AsyncIterator[None]:
    """The kube-scheduler stand-in, placing pods on their claims' nodes and reserving them."""
    api = config.new_client_from_config(config_file=str(tmp_path / "kubeconfig"))
    stop = asyncio.Event()
    settings = SchedulerSettings(allocate=allocate, initial_backoff=0.05, max_backoff=0.2)
    task = asyncio.create_task(DRAScheduler(api, settings=settings).run(stop), name="scheduler")
    try:
        yield
    finally:
        stop.set()
        await task
        api.close()


@contextlib.asynccontextmanager
async def controller(
    client: KubeClient,
    settings: ControllerSettings = FAST,
    registry: CollectorRegistry | None = None,
    release_memory: Callable[[], bool] | None = None,
) -> AsyncIterator[Controller]:
    recorder = EventRecorder(
        client.for_component("controller"), EventSettings(component="vgpu-dra-controller")
    )
    recorder.start()
    running = Controller(
        client,
        settings,
        ControllerMetrics(registry or CollectorRegistry()),
        recorder,
        release_memory=release_memory,
    )
    task = asyncio.create_task(running.run(), name="controller")
    try:
        async with asyncio.timeout(WAIT_S):
            ready = asyncio.create_task(running.ready.wait(), name="controller ready")
            await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
            if not ready.done():
                ready.cancel()
            if task.done():
                task.result()
        yield running
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await recorder.aclose()


def overcommitted(
    claims: Sequence[Mapping[str, Any]], slices: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Invariant checker: every device whose allocated shares exceed a published capacity."""
    limits: dict[tuple[str, str, str], dict[str, Any]] = {}
    for item in slices:
        spec = item["spec"]
        for device in spec.get("devices") or []:
            limits[(spec["driver"], spec["pool"]["name"], device["name"])] = {
                name: parse_quantity(str(entry["value"]))
                for name, entry in (device.get("capacity") or {}).items()
            }
    used: dict[tuple[str, str, str], dict[str, Any]] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            totals = used.setdefault((result["driver"], result["pool"], result["device"]), {})
            for name, quantity in (result.get("consumedCapacity") or {}).items():
                totals[name] = totals.get(name, 0) + parse_quantity(str(quantity))
    return [
        f"{'/'.join(key)} {name}: {amount} > {limits.get(key, {}).get(name)}"
        for key, totals in sorted(used.items())
        for name, amount in sorted(totals.items())
        if amount > limits.get(key, {}).get(name, 0)
    ]
