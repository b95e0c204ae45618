"""The legacy (device-plugin) path, assembled: webhook -> extender /filter and /bind -> Allocate.

Each node runs the real device plugin (mock GPUs) under the kubelet device-plugin
stand-in, which registers it, reports the split-count replicas as the node's
allocatable `nvidia.com/gpu`, and calls Allocate over the plugin's socket. The real
legacy scheduler serves the webhook and the extender; the admission stand-in sends
each pod through the webhook as kube-apiserver would, the kube-scheduler stand-in
calls /filter and /bind, and the kubelet stand-in admits the bound pod.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import yaml

from controller.legacy.config import CallerAuthSettings, LegacySettings
from controller.legacy.server import LegacyServer, ServeSettings
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.status.command import StatusSettings, fetch_status
from kubeletplugin.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from kubeletplugin.gpus import MockBackend
from kubeletplugin.slices import SliceSettings
from simulator.apiserver import APIServer
from simulator.nodes import install_libvgpu_files, mock_gpu_file, register_node
from simulator.report import ContainerReport, PodReport, SimulationReport
from simulator.settings import SimulationSettings, work_root
from simulator.standins.admission import AdmissionClient, WebhookConfig
from simulator.standins.kubelet_deviceplugin import ContainerRequest, KubeletDevicePlugin
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient
from simulator.workloads import Workload, apply_workloads

RESOURCE = "nvidia.com/gpu"
ADMIN = {"username": "simulator", "groups": ["system:masters", "system:authenticated"]}
WAIT_S = 30.0
PIPED_WIDTH = 160


def _count(container: Mapping[str, Any]) -> int:
    limits = (container.get("resources") or {}).get("limits") or {}
    return int(str(limits.get(RESOURCE, 0)) or 0)


def container_requests(pod: Mapping[str, Any]) -> list[ContainerRequest]:
    """What kubelet asks the device plugin for: each container's `nvidia.com/gpu` count."""
    spec = pod.get("spec") or {}
    requests = [
        ContainerRequest(c["name"], _count(c), init=True) for c in spec.get("initContainers") or []
    ]
    requests += [ContainerRequest(c["name"], _count(c)) for c in spec.get("containers") or []]
    return [request for request in requests if request.count]


async def _start_node(
    stack: AsyncExitStack, client: KubeClient, settings: SimulationSettings, index: int, root: Path
) -> KubeletDevicePlugin:
    """The node, its kubelet stand-in and the device plugin; kubelet's allocatable reported."""
    name = settings.shape.node_name(index)
    base = root / name
    base.mkdir(parents=True)
    (base / "gpus.yaml").write_text(yaml.safe_dump(mock_gpu_file(settings.shape, index)))
    await register_node(client, name)
    plugin_settings = DevicePluginSettings(
        node_name=name,
        plugin_dir=base / "dp",
        sharing=SliceSettings(split_count=settings.shape.split_count),
        mock_gpus=base / "gpus.yaml",
        libvgpu=install_libvgpu_files(base),
    )
    kubelet = await stack.enter_async_context(KubeletDevicePlugin(plugin_settings.plugin_dir))
    plugin = DevicePlugin(plugin_settings, client, MockBackend(base / "gpus.yaml"))
    await stack.enter_async_context(plugin)
    await asyncio.wait_for(kubelet.wait_update(RESOURCE), WAIT_S)
    allocatable = {RESOURCE: str(kubelet.allocatable(RESOURCE))}
    await client.patch(
        f"{object_path('/api/v1/nodes', name)}/status",
        {"status": {"capacity": allocatable, "allocatable": allocatable}},
    )
    return kubelet


async def _place_pod(
    client: KubeClient,
    workload: Workload,
    namespace: str,
    webhook: AdmissionClient,
    scheduler: SchedulerExtenderClient,
    kubelets: Mapping[str, KubeletDevicePlugin],
) -> PodReport:
    name = workload.name
    report = PodReport(namespace, name, "", "Pending")
    body = dict(workload.body)
    body["metadata"] = {**(body.get("metadata") or {}), "namespace": namespace}
    review = await webhook.review(webhook.build_review(body, namespace=namespace, user_info=ADMIN))
    if not review.allowed:
        report.reason = f"webhook denied: {(review.status or {}).get('message', '')}"
        return report
    pod = await client.create(f"/api/v1/namespaces/{namespace}/pods", review.object)
    nodes = (await client.list("/api/v1/nodes")).get("items") or []
    cycle = await scheduler.schedule_once(pod, nodes)
    if cycle.node is None:
        report.reason = f"{cycle.reason}: {cycle.message}"
        return report
    report.node = cycle.node
    admission = await kubelets[cycle.node].admit_pod(
        pod["metadata"]["uid"], RESOURCE, container_requests(pod)
    )
    for container, response in admission.responses.items():
        report.containers[container] = ContainerReport(
            cdi_devices=[],
            env=dict(sorted(response.envs.items())),
            mounts={m.container_path: m.host_path for m in response.mounts},
        )
    await client.patch(
        f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {"phase": "Running"}}
    )
    report.phase = "Running"
    return report


async def simulate_legacy(
    settings: SimulationSettings, workloads: list[Workload], progress: Any
) -> SimulationReport:
    started = time.monotonic()
    task = progress.add_task("starting", total=None)
    kubelets: dict[str, KubeletDevicePlugin] = {}
    with work_root(settings) as root:
        async with APIServer() as server, AsyncExitStack() as stack:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            stack.push_async_callback(client.aclose)
            for index in range(settings.shape.nodes):
                node = settings.shape.node_name(index)
                progress.update(task, description=f"starting device plugin on {node}")
                kubelets[node] = await _start_node(stack, client, settings, index, root)
            progress.update(task, description="starting the legacy scheduler")
            # Loopback and every caller is the simulator itself: who may call is not simulated.
            open_callers = LegacySettings(caller_auth=CallerAuthSettings(enabled=False))
            legacy = LegacyServer(client, open_callers, ServeSettings(port=0))
            await stack.enter_async_context(legacy)
            names = set(kubelets)
            await asyncio.wait_for(
                legacy.state.nodes.wait_for(
                    lambda _: all(n in legacy.state.inventory for n in names)
                ),
                WAIT_S,
            )
            base = f"http://127.0.0.1:{legacy.port}"
            webhook = await stack.enter_async_context(
                AdmissionClient(WebhookConfig(url=f"{base}/webhook"))
            )
            scheduler = await stack.enter_async_context(
                SchedulerExtenderClient(ExtenderConfig(url_prefix=base, node_cache_capable=True))
            )
            others = [w for w in workloads if w.kind != "Pod"]
            await apply_workloads(client, others, settings.namespace)
            pods = []
            for workload in (w for w in workloads if w.kind == "Pod"):
                progress.update(task, description=f"placing pod {workload.name}")
                namespace = workload.namespace or settings.namespace
                pods.append(
                    await _place_pod(client, workload, namespace, webhook, scheduler, kubelets)
                )
            status = await fetch_status(client, StatusSettings())
    return SimulationReport(
        settings.mode.value,
        status,
        sorted(pods, key=lambda p: (p.namespace, p.name)),
        time.monotonic() - started,
        kept=settings.work_dir is not None,
    )
