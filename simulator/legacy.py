"""The legacy (device-plugin) path, assembled: webhook -> extender /filter and /bind -> Allocate.

Each NVIDIA node runs the real device plugin (mock GPUs) under the kubelet device-plugin
stand-in, which registers it, reports the split-count replicas as the node's
allocatable `nvidia.com/gpu`, and calls Allocate over the plugin's socket. A node of
another family gets the stand-in for its vendor's own plugin
(`simulator.legacy_vendors`): its register annotation or capacity, and after /bind the
bind-phase and lock release that plugin's Allocate writes. The real
legacy scheduler serves the webhook and the extender over TLS with caller
authentication on, as deploy/ runs it: /filter and /bind only for kube-scheduler's
client certificate, /webhook open (`--open-webhook`). The admission stand-in sends
each pod through the webhook as kube-apiserver would, the kube-scheduler stand-in
calls /filter and /bind presenting that certificate, and the kubelet stand-in admits
the bound pod. Every component runs as the identity deploy/ gives it, under the
legacy overlay's admission policies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controller.legacy.config import CallerAuthSettings, LegacySettings
from controller.legacy.server import LegacyServer, ServeSettings
from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.kube.rest import ApiError, KubeClient, object_path
from dra_driver.status.command import StatusSettings, fetch_status
from kubeletplugin.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from kubeletplugin.gpus import MockBackend
from kubeletplugin.slices import SliceSettings
from simulator.apiserver import APIServer
from simulator.apiserver.authentication import KUBECONFIG_TOKEN
from simulator.attempts import Call, Credentials, Identity
from simulator.identities import (
    KUBE_SCHEDULER_CLIENT_NAME,
    LEGACY_SCHEDULER,
    Identities,
    device_plugin,
    kubelet,
)
from simulator.legacy_calls import call_arguments, call_context, post_call
from simulator.legacy_tls import LOOPBACK, LegacyTLS, write_legacy_tls
from simulator.legacy_vendors import (
    ENABLED_FLAGS,
    device_config,
    legacy_backend,
    managed_resources,
    pod_devices,
    start_vendor_node,
)
from simulator.nodes import dump_yaml, install_libvgpu_files, mock_gpu_file, register_node
from simulator.policies import install_policies
from simulator.progress import Steps
from simulator.report import ContainerReport, PodReport, SimulationReport
from simulator.settings import FamilyNode, SimulationSettings, work_root
from simulator.standins.admission import AdmissionClient, WebhookConfig
from simulator.standins.kubelet_deviceplugin import ContainerRequest, KubeletDevicePlugin
from simulator.standins.scheduler_extender import (
    ExtenderConfig,
    ExtenderTLSConfig,
    SchedulerExtenderClient,
)
from simulator.standins.vendor_deviceplugin import VendorDevicePlugin
from simulator.tamper import CallAnswer, PlacedPod, run_attempts
from simulator.workloads import Scenario, apply_workloads

RESOURCE = "nvidia.com/gpu"
WAIT_S = 30.0


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
    stack: AsyncExitStack,
    identities: Identities,
    settings: SimulationSettings,
    node: FamilyNode,
    root: Path,
) -> KubeletDevicePlugin:
    """An NVIDIA node (registered by its kubelet), its kubelet stand-in and the device
    plugin, whose token is bound to the node; kubelet's allocatable reported."""
    name = node.name
    base = root / name
    base.mkdir(parents=True)
    (base / "gpus.yaml").write_text(dump_yaml(mock_gpu_file(settings.shape, node.index)))
    await register_node(await identities.client(kubelet(name)), name)
    return await start_device_plugin(stack, identities, settings, name, base)


async def start_device_plugin(
    stack: AsyncExitStack,
    identities: Identities,
    settings: SimulationSettings,
    name: str,
    base: Path,
    *,
    mixed_mode: bool = False,
) -> KubeletDevicePlugin:
    """The device plugin of registered node `name` over the mock GPUs in `base/gpus.yaml`,
    under its kubelet's device-plugin stand-in; kubelet's allocatable reported.
    `mixed_mode`: a kubelet plugin serves the same GPUs, Allocate counts its claims."""
    node_client = await identities.client(kubelet(name))
    plugin_settings = DevicePluginSettings(
        node_name=name,
        plugin_dir=base / "dp",
        sharing=SliceSettings(split_count=settings.shape.split_count),
        mock_gpus=base / "gpus.yaml",
        libvgpu=install_libvgpu_files(base),
        mixed_mode=mixed_mode,
    )
    kubelet_stand_in = await stack.enter_async_context(
        KubeletDevicePlugin(plugin_settings.plugin_dir)
    )
    plugin = DevicePlugin(
        plugin_settings,
        await identities.client(device_plugin(name)),
        MockBackend(base / "gpus.yaml"),
    )
    await stack.enter_async_context(plugin)
    await asyncio.wait_for(kubelet_stand_in.wait_update(RESOURCE), WAIT_S)
    allocatable = {RESOURCE: str(kubelet_stand_in.allocatable(RESOURCE))}
    await node_client.patch(
        f"{object_path('/api/v1/nodes', name)}/status",
        {"status": {"capacity": allocatable, "allocatable": allocatable}},
    )
    return kubelet_stand_in


@dataclass
class LegacyCluster:
    """What is running: the API server, the scheduler's address and its callers."""

    server: APIServer
    admin: KubeClient
    identities: Identities
    tls: LegacyTLS
    base_url: str
    webhook: AdmissionClient
    scheduler: SchedulerExtenderClient
    backends: BackendRegistry
    kubelets: dict[str, KubeletDevicePlugin] = field(default_factory=dict)
    vendor_plugins: dict[str, VendorDevicePlugin] = field(default_factory=dict)

    def user_info(self, identity: Identity | None) -> dict[str, Any]:
        """`userInfo` of an AdmissionReview: who the API server says made the request."""
        token = KUBECONFIG_TOKEN if identity is None else self.identities.token(identity)
        return self.server.tokens.user(token).status()

    async def place_pod(
        self, pod: dict[str, Any], namespace: str, identity: Identity | None
    ) -> PlacedPod:
        """Webhook, create (as `identity`; None: the administrator), schedule, Allocate."""
        name = (pod.get("metadata") or {}).get("name", "")
        report = PodReport(namespace, name, "", "Pending")
        body = {**pod, "metadata": {**(pod.get("metadata") or {}), "namespace": namespace}}
        review = await self.webhook.review(
            self.webhook.build_review(body, namespace=namespace, user_info=self.user_info(identity))
        )
        if not review.allowed:
            return PlacedPod(refusal=(review.status or {}).get("message", "webhook denied"))
        client = self.admin if identity is None else await self.identities.client(identity)
        try:
            stored = await client.create(f"/api/v1/namespaces/{namespace}/pods", review.object)
        except ApiError as error:
            return PlacedPod(refusal=error.message)
        nodes = (await self.admin.list("/api/v1/nodes")).get("items") or []
        cycle = await self.scheduler.schedule_once(stored, nodes)
        if cycle.node is None:
            report.reason = f"{cycle.reason}: {cycle.message}"
            return PlacedPod(stored=stored, report=report)
        report.node = cycle.node
        if cycle.node in self.kubelets:
            admission = await self.kubelets[cycle.node].admit_pod(
                stored["metadata"]["uid"], RESOURCE, container_requests(stored)
            )
            for container, response in admission.responses.items():
                report.containers[container] = ContainerReport(
                    cdi_devices=[],
                    env=dict(sorted(response.envs.items())),
                    mounts={m.container_path: m.host_path for m in response.mounts},
                    read_only_mounts=sorted(
                        m.container_path for m in response.mounts if m.read_only
                    ),
                )
        else:
            await self.vendor_plugins[cycle.node].allocate(namespace, name)
        bound = await self.admin.get(object_path(f"/api/v1/namespaces/{namespace}/pods", name))
        report.devices = pod_devices(self.backends, bound)
        submitted = (stored.get("metadata") or {}).get("annotations") or {}
        written = (bound.get("metadata") or {}).get("annotations") or {}
        report.pod_keys = {k: v for k, v in sorted(written.items()) if k not in submitted}
        for container in {device.container for device in report.devices}:
            report.containers.setdefault(container, ContainerReport())
        node_client = await self.identities.client(kubelet(cycle.node))
        await node_client.patch(
            f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": {"phase": "Running"}}
        )
        report.phase = "Running"
        return PlacedPod(stored=stored, report=report)


class LegacyTarget:
    """Where tamper attempts go in legacy mode; the container's env wins over Allocate's."""

    driver_env_wins = False

    def __init__(self, cluster: LegacyCluster) -> None:
        self.cluster = cluster
        self.admin = cluster.admin
        self.identities = cluster.identities

    async def place_pod(self, pod: dict[str, Any], namespace: str, identity: Identity) -> PlacedPod:
        return await self.cluster.place_pod(pod, namespace, identity)

    async def call(self, call: Call, identity: Identity | None, namespace: str) -> CallAnswer:
        arguments = await call_arguments(self.admin, call, namespace)
        token = None
        if call.credentials is Credentials.OTHER_IDENTITY and identity is not None:
            token = self.identities.token(identity)
        context = call_context(self.cluster.tls, call.credentials)
        return await post_call(f"{self.cluster.base_url}{call.path}", arguments, context, token)


async def start_scheduler(
    stack: AsyncExitStack,
    identities: Identities,
    tls: LegacyTLS,
    nodes: set[str],
    *,
    mixed_mode: bool = False,
) -> str:
    """The legacy scheduler as deploy/ runs it (its device config, every vendor switch
    on; `mixed_mode`: counting DRA claims too); its https base URL once it has read
    every node's devices."""
    client = await identities.client(LEGACY_SCHEDULER)
    callers = CallerAuthSettings(
        allowed_callers=frozenset({KUBE_SCHEDULER_CLIENT_NAME}), open_webhook=True
    )
    serve = ServeSettings(
        host=LOOPBACK,
        port=0,
        tls_cert=tls.serving.cert,
        tls_key=tls.serving.key,
        client_cas=(tls.ca,),
    )
    settings = LegacySettings(
        device_config=device_config(),
        caller_auth=callers,
        enabled_vendor_flags=ENABLED_FLAGS,
        mixed_mode=mixed_mode,
    )
    legacy = LegacyServer(client, settings, serve)
    await stack.enter_async_context(legacy)

    def every_node_read(_: object) -> bool:
        inventory = legacy.state.inventory
        return all(n in inventory and inventory[n].node.devices for n in nodes)

    await asyncio.wait_for(legacy.state.nodes.wait_for(every_node_read), WAIT_S)
    return f"https://{LOOPBACK}:{legacy.port}"


async def simulate_legacy(
    settings: SimulationSettings, scenario: Scenario, progress: Any
) -> SimulationReport:
    started = time.monotonic()
    step = Steps(progress)

    with work_root(settings) as root:
        async with APIServer() as server, AsyncExitStack() as stack:
            admin = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            stack.push_async_callback(admin.aclose)
            identities = Identities(server, root / "identities")
            stack.push_async_callback(identities.aclose)
            step("installing the admission policies")
            await install_policies(admin, settings.mode.value)
            backends = device_config().backends(ENABLED_FLAGS)
            kubelets: dict[str, KubeletDevicePlugin] = {}
            vendor_plugins: dict[str, VendorDevicePlugin] = {}
            for node in settings.shape.family_nodes():
                step(f"starting the {node.vendor} device plugin on {node.name}")
                if node.vendor == "nvidia":
                    kubelets[node.name] = await _start_node(stack, identities, settings, node, root)
                    continue
                backend = legacy_backend(backends, node.vendor)
                vendor_plugins[node.name] = await start_vendor_node(
                    identities, settings.shape, node, backend
                )
            step("starting the legacy scheduler")
            tls = write_legacy_tls(root / "tls")
            base = await start_scheduler(
                stack, identities, tls, set(kubelets) | set(vendor_plugins)
            )
            webhook = await stack.enter_async_context(
                AdmissionClient(WebhookConfig(url=f"{base}/webhook", ca_file=tls.ca))
            )
            extender_tls = ExtenderTLSConfig(
                ca_file=tls.ca, cert_file=tls.kube_scheduler.cert, key_file=tls.kube_scheduler.key
            )
            scheduler = await stack.enter_async_context(
                SchedulerExtenderClient(
                    ExtenderConfig(
                        url_prefix=base,
                        node_cache_capable=True,
                        managed_resources=managed_resources(backends),
                        tls_config=extender_tls,
                    )
                )
            )
            cluster = LegacyCluster(
                server,
                admin,
                identities,
                tls,
                base,
                webhook,
                scheduler,
                backends,
                kubelets,
                vendor_plugins,
            )
            workloads = scenario.workloads
            await apply_workloads(
                admin, [w for w in workloads if w.kind != "Pod"], settings.namespace
            )
            pods = []
            for workload in (w for w in workloads if w.kind == "Pod"):
                step(f"placing pod {workload.name}")
                namespace = workload.namespace or settings.namespace
                placed = await cluster.place_pod(workload.body, namespace, None)
                pods.append(
                    placed.report
                    or PodReport(namespace, workload.name, "", "Pending", reason=placed.refusal)
                )
            attempts = await run_attempts(
                LegacyTarget(cluster), scenario.attempts, settings.namespace, step
            )
            status = await fetch_status(admin, StatusSettings())
    return SimulationReport(
        settings.mode.value,
        status,
        sorted(pods, key=lambda p: (p.namespace, p.name)),
        time.monotonic() - started,
        kept=settings.work_dir is not None,
        attempts=attempts,
    )
