"""`dra-driver monitor`: the vGPU monitor's HTTP server and its lifecycle.

`VgpuMonitor.start` scans and starts watching the cache root, then serves
`/metrics` with aiohttp: the injected registry's metrics followed by the vGPU
series, which are rendered straight to text (`libvgpu.metrics`); `aclose`
undoes it in reverse. A scrape renders in a worker thread so reading hundreds
of cache files never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from dra_driver.process.build_info import register_build_info
from libvgpu.cache_files import CacheFiles
from libvgpu.cache_watcher import CacheWatcher, WatchSettings
from libvgpu.host_gpus import HostGpuBackend, open_host_backend
from libvgpu.metrics import VgpuMetrics
from libvgpu.mig_users import MigUsers
from libvgpu.owners import (
    ClaimIndex,
    ClaimResolver,
    CombinedResolver,
    LegacyPodResolver,
    OwnerResolver,
    PodIndex,
)

DEFAULT_PORT = 9394
"""HAMi's vGPU monitor port."""


@dataclass(frozen=True)
class MonitorSettings:
    host: str = "0.0.0.0"
    port: int = DEFAULT_PORT
    """TCP port for `/metrics`; 0 picks a free one (tests)."""

    cache_root: str = "/usr/local/vgpu"
    """Root holding `claims/<uid>/` and `containers/<podUID>_<ctr>/` cache dirs."""

    node_name: str = ""
    """`node` label of the host GPU series (HAMi reads NODE_NAME); empty exports none."""

    legacy_metrics: bool = False
    """Also export HAMi's pre-v2.9 names (`HostGPUMemoryUsage`, `vGPU_device_memory_*`, ...)."""

    mock_gpus: Path | None = None
    """A mock GPU file (the kubelet plugin's `--mock-gpus`): host series for its cards, of any
    vendor, instead of NVML's."""

    watch: WatchSettings = field(default_factory=WatchSettings)


class MetricsServer:
    """Serves one registry, then any text sources, at `/metrics` (and `/healthz`, `/readyz`).

    A text source returns ready-made exposition text for families the registry
    does not hold (the monitor's vGPU series). `readiness` says why the process is
    not ready (None when it is): `/readyz` answers 503 with that reason, so a
    component waiting for the API server is seen waiting, not dead.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        host: str,
        port: int,
        text_sources: Sequence[Callable[[], str]] = (),
        readiness: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._registry = registry
        self._readiness = readiness
        self._text_sources = tuple(text_sources)
        self._host = host
        self._port = port
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        if self._runner is None:
            raise RuntimeError("server not started")
        return int(self._runner.addresses[0][1])

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> MetricsServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _metrics(self, request: web.Request) -> web.Response:
        body = await asyncio.to_thread(self._render)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    def _render(self) -> bytes:
        texts = [source() for source in self._text_sources]
        return generate_latest(self._registry) + "".join(texts).encode()

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.Response:
        problem = self._readiness()
        if problem is None:
            return web.Response(text="ok")
        return web.Response(text=problem, status=503)


class VgpuMonitor:
    """Watcher, series and server for one cache root; owns (and closes) the host backend.
    `mig_users` names the MIG series' containers (none without it)."""

    def __init__(
        self,
        settings: MonitorSettings,
        resolver: OwnerResolver,
        host: HostGpuBackend,
        registry: CollectorRegistry,
        mig_users: MigUsers | None = None,
    ) -> None:
        self.files = CacheFiles()
        self.watcher = CacheWatcher(settings.cache_root, self.files, settings.watch)
        self._settings = settings
        self._host = host
        self.metrics = VgpuMetrics(
            self.files,
            resolver,
            host,
            settings.node_name,
            legacy_metrics=settings.legacy_metrics,
            mig_users=mig_users,
        )
        register_build_info(registry)
        self._server = MetricsServer(
            registry, settings.host, settings.port, text_sources=[self.metrics.render]
        )

    @property
    def port(self) -> int:
        return self._server.port

    async def start(self) -> None:
        os.makedirs(self._settings.cache_root, exist_ok=True)
        try:
            await self.watcher.start()
            await self._server.start()
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        await self._server.aclose()
        await self.watcher.aclose()
        self.files.close()
        self._host.close()

    async def __aenter__(self) -> VgpuMonitor:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


async def run_monitor(
    settings: MonitorSettings,
    stop_event: asyncio.Event,
    *,
    resolver: OwnerResolver | None = None,
    host: HostGpuBackend | None = None,
    registry: CollectorRegistry | None = None,
) -> None:
    """Serve until `stop_event` is set. Without a resolver, owners come from empty indexes
    (the CLI feeds a `ClaimIndex` and `PodIndex` from informers and passes their resolvers)."""
    if resolver is None:
        resolver = CombinedResolver(ClaimResolver(ClaimIndex()), LegacyPodResolver(PodIndex()))
    monitor = VgpuMonitor(
        settings,
        resolver,
        host if host is not None else open_host_backend(settings.mock_gpus),
        registry if registry is not None else CollectorRegistry(),
    )
    async with monitor:
        await stop_event.wait()
