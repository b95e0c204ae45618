"""`dra-driver monitor`: the exporter fed by live informers.

Claims (all namespaces) feed the claim index and this node's pods feed the
pod index, so cache dirs map to namespace/pod/claim labels as the cluster
changes, without a per-scrape API call. The same events feed the MIG users (legacy
pods' `hami.io/vgpu-mig-allocations`, claims' partitions in this node's pool).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from dra_driver.process.runtime import cancel_and_wait
from libvgpu.host_gpus import HostGpuBackend, open_host_backend
from libvgpu.mig_users import MigUsers
from libvgpu.monitor import MonitorSettings, VgpuMonitor
from libvgpu.owners import ClaimIndex, ClaimResolver, CombinedResolver, LegacyPodResolver, PodIndex

CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
PODS_PATH = "/api/v1/pods"


class MonitorService:
    """The monitor plus the two informers that name its series."""

    def __init__(
        self,
        settings: MonitorSettings,
        client: KubeClient,
        host: HostGpuBackend,
        registry: CollectorRegistry,
    ) -> None:
        # Its own User-Agent: the RBAC audit checks these calls against its ClusterRole.
        client = client.for_component("monitor")
        self.claims, self.pods = ClaimIndex(), PodIndex()
        self.mig_users = MigUsers(settings.node_name)
        node_selector = f"spec.nodeName={settings.node_name}" if settings.node_name else None
        self.informers = [
            Informer(
                client,
                CLAIMS_PATH,
                handlers=[self.claims.apply_event, self.mig_users.apply_claim_event],
            ),
            Informer(
                client,
                PODS_PATH,
                handlers=[self.pods.apply_event, self.mig_users.apply_pod_event],
                field_selector=node_selector,
            ),
        ]
        resolver = CombinedResolver(ClaimResolver(self.claims), LegacyPodResolver(self.pods))
        self.monitor = VgpuMonitor(settings, resolver, host, registry, self.mig_users)
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def port(self) -> int:
        return self.monitor.port

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(informer.run(), name=f"informer {informer.path}")
            for informer in self.informers
        ]
        await self.monitor.start()

    async def aclose(self) -> None:
        await self.monitor.aclose()
        await cancel_and_wait(self._tasks)
        self._tasks = []

    async def __aenter__(self) -> MonitorService:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def serve_monitor(
    settings: MonitorSettings, kubeconfig: Path | None, stop: asyncio.Event
) -> None:
    """Serve until `stop` is set (the CLI's entry point)."""
    client = await KubeClient.from_kubeconfig(kubeconfig, component="monitor")
    try:
        async with MonitorService(
            settings, client, open_host_backend(settings.mock_gpus), CollectorRegistry()
        ):
            await stop.wait()
    finally:
        await client.aclose()
