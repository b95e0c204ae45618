"""`dra-driver kubelet-plugin`: the node half of the DRA path, assembled.

Discovery -> ResourceSlices (publisher) and the gRPC sockets kubelet uses:
`<registry dir>/<driver>-reg.sock` (registration) and `<plugin dir>/dra.sock`
(DRAPlugin v1 + v1beta1, DRAResourceHealth, grpc.health.v1). Sockets are
re-created when kubelet wipes their directories; the mock GPU file is
watched so edits republish the slices.

The sockets serve before the API server is first reached: while it is away the
plugin waits for it (`dra_driver.kube.api_wait`, logged, and /readyz says why)
with its liveness probe passing, then publishes; an exit would put it into
CrashLoopBackOff and keep the node's GPUs unserved long after the server is back.
A checkpoint it must not use (from a newer release, or damaged) does not stop it
either: it serves, refuses every claim, reports why, and publishes nothing
(`state_refusal`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry
from watchfiles import awatch

from api.generated import pluginregistration_pb2_grpc
from cdi.naming import DEFAULT_CDI_DIR
from cdi.writer import CdiSpecWriter
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.kube.api_wait import ApiWait
from dra_driver.kube.events import WARNING, EventRecorder, EventSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.mig_profiles import Placement
from dra_driver.process.grpc_tasks import stop_grpc_server
from dra_driver.process.runtime import cancel_and_wait
from kubeletplugin.checkpoint import CheckpointFile, read_boot_id
from kubeletplugin.file_poll import poll_files
from kubeletplugin.gpu_sources import open_gpu_backend, watch_files, watch_xids
from kubeletplugin.gpus import GpuBackend, GpuInfo, NvmlBackend
from kubeletplugin.grpc_services import HealthWatch, RegistrationService, add_dra_services
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.mig_prepare import MigPartitions
from kubeletplugin.mig_slices import is_shared, withheld_reason, without_instances
from kubeletplugin.node_config import load_node_config
from kubeletplugin.prepare_plan import DeviceCapacity
from kubeletplugin.preparer import CLAIM_READ_TIMEOUT_S, ClaimPreparer, PreparerSettings
from kubeletplugin.publisher import SlicePublisher
from kubeletplugin.slices import SliceSettings, build_device, device_name
from kubeletplugin.state_refusal import EVENT_REASON_STATE_REFUSED
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths

log = logging.getLogger(__name__)

SOCKET_MODE = 0o600
FALLBACK_POLL_S = 1.0
"""How often the sockets and watched files are looked at when inotify cannot start."""
EVENT_COMPONENT = "vgpu-dra-kubelet-plugin"
COMPONENT = "kubelet-plugin"
"""Its name in the User-Agent (the RBAC audit checks its calls against its ClusterRole)."""
MIXED_NEEDS_CONTROLLER = (
    "needs --controller-allocated: in mixed mode the device plugin also serves these GPUs, "
    "and kube-scheduler cannot see legacy usage (HAMi annotations on pods), so if it "
    "allocated claims it would over-commit GPUs the device plugin also serves; run the "
    "HAMi-policy controller (which counts legacy pods) and --controller-allocated"
)


@dataclass(frozen=True)
class PluginSettings:
    """Every host path is configurable so tests run unprivileged in temp dirs."""

    node_name: str
    slices: SliceSettings = field(default_factory=SliceSettings)
    registry_dir: Path = Path("/var/lib/kubelet/plugins_registry")
    plugin_dir: Path | None = None
    """Holds dra.sock and the checkpoint; default `/var/lib/kubelet/plugins/<driver>`."""
    dev_dir: Path = Path("/dev")
    """The host's device nodes; the CDI spec lists only the NVIDIA nodes found here."""
    cdi_dir: Path = DEFAULT_CDI_DIR
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    mock_gpus: Path | None = None
    """A mock GPU file; None = NVML (or `gpu_backend`)."""
    gpu_backend: str | None = None
    """`nvml`, `amdsmi` or `mock` (`gpu_sources.GPU_BACKENDS`); None = mock when
    `mock_gpus` is set, else NVML."""
    config_file: Path | None = None
    """Node config overrides (split count, scaling, hidden GPUs), watched."""
    libvgpu: LibvgpuPaths = field(default_factory=LibvgpuPaths)
    cache_dirs: CacheDirSettings = field(default_factory=CacheDirSettings)
    with_device_nodes: bool = True
    nvidia_cdi_prefix: str | None = None
    claim_read_timeout_s: float = CLAIM_READ_TIMEOUT_S
    """Longest wait for one claim read while preparing, seconds (why 20: preparer.py)."""
    allow_claim_opt_out: bool = False
    """Honour a claim's own enforcement opt-out; by default only a DeviceClass's is."""
    mixed_mode: bool = False
    """The device plugin serves these GPUs too: prepare also counts the node's legacy pods."""
    host_poll_s: float | None = None
    """Look at the sockets and the watched files every this many seconds instead of
    through inotify (None): a host allows a user 128 inotify instances and a plugin
    takes two, so `dra-driver simulate`, a plugin per emulated node, polls."""

    def __post_init__(self) -> None:
        if self.mixed_mode and self.slices.allocation_taint is None:
            raise InvalidParameterError("--mixed-mode", MIXED_NEEDS_CONTROLLER)

    @property
    def driver(self) -> str:
        return self.slices.driver

    @property
    def service_dir(self) -> Path:
        return self.plugin_dir or Path("/var/lib/kubelet/plugins") / self.driver

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.service_dir / "dra.sock"

    @property
    def checkpoint_path(self) -> Path:
        """In a subdirectory: every write in the socket's directory would wake
        the watcher that re-creates sockets kubelet wiped."""
        return self.service_dir / "state" / "checkpoint.json"


def device_capacities(gpus: Sequence[GpuInfo], slices: SliceSettings) -> dict[str, DeviceCapacity]:
    """What each published shared device offers, read back from the slice device itself
    so prepare checks against exactly what was published. A card published as MIG
    partitions, or not at all, has none: a share of it is refused."""
    result = {}
    for gpu in filter(is_shared, gpus):
        capacity = build_device(gpu, slices)["capacity"]
        result[device_name(gpu)] = DeviceCapacity(
            gpu,
            int(capacity["memory"]["value"]),
            int(capacity["cores"]["value"]),
            int(capacity["shares"]["value"]),
            capacity,
        )
    return result


async def _stop_server(server: grpc.aio.Server, grace: float | None = None) -> None:
    await server.stop(grace)


def open_backend(settings: PluginSettings) -> GpuBackend:
    return open_gpu_backend(settings.mock_gpus, backend=settings.gpu_backend)


class KubeletPlugin:
    def __init__(
        self,
        settings: PluginSettings,
        client: KubeClient,
        backend: GpuBackend,
        registry: CollectorRegistry,
        api_wait: ApiWait | None = None,
    ) -> None:
        client = client.for_component(COMPONENT)
        self.settings = settings
        self.client = client
        self.api_wait = api_wait or ApiWait(COMPONENT)
        self.backend = backend
        self.metrics = PluginMetrics(registry)
        self.gpus: Sequence[GpuInfo] = ()
        self.slice_settings = settings.slices
        self._capacities: Mapping[str, DeviceCapacity] = {}
        self.publisher = SlicePublisher(client, settings.node_name, settings.slices)
        self.health_watch = HealthWatch(settings.node_name, lambda: self.gpus)
        self.registration = RegistrationService(settings.driver, str(settings.dra_socket))
        self.events = EventRecorder(
            client, EventSettings(component=EVENT_COMPONENT, instance=settings.node_name)
        )
        self.preparer = ClaimPreparer(
            PreparerSettings(
                driver=settings.driver,
                node_name=settings.node_name,
                libvgpu=settings.libvgpu,
                cache_dirs=settings.cache_dirs,
                with_device_nodes=settings.with_device_nodes and backend.has_device_nodes,
                dev_dir=settings.dev_dir,
                nvidia_cdi_prefix=settings.nvidia_cdi_prefix,
                claim_read_timeout_s=settings.claim_read_timeout_s,
                allow_claim_opt_out=settings.allow_claim_opt_out,
                mixed_mode=settings.mixed_mode,
            ),
            client,
            lambda: self._capacities,
            CheckpointFile(
                settings.checkpoint_path,
                read_boot_id(settings.boot_id_file),
                legacy_path=settings.service_dir / "checkpoint.json",
            ),
            CdiSpecWriter(settings.cdi_dir),
            self.metrics,
            self.events,
            mig=MigPartitions(
                backend,
                with_device_nodes=settings.with_device_nodes and backend.has_device_nodes,
                dev_dir=settings.dev_dir,
            ),
        )
        self._servers: dict[Path, grpc.aio.Server] = {}
        self._retired: list[grpc.aio.Server] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._devices_changed = asyncio.Event()
        self._stop_threads = threading.Event()
        self.socket_generation = 0
        """Bumped each time the sockets are (re)created; `wait_for` it in tests."""
        self._sockets_changed = asyncio.Condition()

    async def start(self) -> None:
        try:
            await self._start()
        except BaseException:
            await self.aclose()
            raise

    async def _start(self) -> None:
        self.events.start()
        await self.refresh_devices()
        await self.preparer.start()
        await self._serve_sockets()
        self._tasks.append(asyncio.create_task(self._guard_sockets(), name="socket guard"))
        refusal = self.preparer.refusal
        if refusal is not None:
            self.metrics.state_refused.labels(refusal.file, refusal.reason).set(1)
        await self.api_wait.until_serving(self.client)
        if refusal is not None:
            self._node_event(EVENT_REASON_STATE_REFUSED, refusal.message)
            return
        await self.publisher.start()
        await self.api_wait.until_reachable(
            lambda: self.publisher.publish(self.publishable_gpus(), self.slice_settings)
        )
        self._tasks.append(asyncio.create_task(self._republish(), name="republish"))
        if self._watched_files():
            self._tasks.append(asyncio.create_task(self._watch_files(), name="file watch"))
        if isinstance(self.backend, NvmlBackend):
            self._tasks.append(asyncio.create_task(self._watch_xids(), name="xid watch"))

    async def aclose(self, *, settle: bool = True) -> list[grpc.aio.Server]:
        """Stop; return the gRPC servers stopped. `settle=False` leaves their call tasks
        and grpc's cancelled client calls to the caller, who awaits them for many plugins
        at once (`await_server_calls`, then `settle_cancelled_grpc_calls`): each scans
        every task of the loop, and per plugin a thousand plugins in one process took
        minutes."""
        stop = stop_grpc_server if settle else _stop_server
        self._stop_threads.set()
        await cancel_and_wait(self._tasks)
        self._tasks = []
        stopped = []
        for path, server in list(self._servers.items()):
            await stop(server, grace=1.0)
            stopped.append(server)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._servers = {}
        for server in self._retired:
            await stop(server)
            stopped.append(server)
        self._retired = []
        await self.events.aclose()
        await self.publisher.aclose()
        return stopped

    def readiness(self) -> str | None:
        """None when ready, else why not: the refusal of the checkpoint, or the wait for
        the API server (the readiness endpoint's callback)."""
        if self.preparer.refusal is not None:
            return self.preparer.refusal.readiness()
        return self.api_wait.readiness()

    async def __aenter__(self) -> KubeletPlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def publishable_gpus(self) -> tuple[GpuInfo, ...]:
        """The cards as published: the MIG instances prepare made for claims are left out
        (their partitions stay published, allocated to those claims), so only an
        administrator's instances hide placements."""
        own: dict[str, set[Placement]] = {}
        for record in self.preparer.checkpoint.claims.values():
            for made in record.mig:
                own.setdefault(made.gpu_uuid, set()).add(Placement(made.start, made.size))
        return without_instances(self.gpus, own)

    async def refresh_devices(self) -> None:
        """Discover again and re-read the node config; tell kubelet's health
        stream when the devices changed."""
        config = await asyncio.to_thread(load_node_config, self.settings.config_file)
        gpus = config.published(await asyncio.to_thread(self.backend.discover))
        settings = config.slice_settings(self.settings.slices)
        if gpus == tuple(self.gpus) and settings == self.slice_settings:
            return
        self.gpus, self.slice_settings = gpus, settings
        self._capacities = device_capacities(gpus, settings)
        self._report_withheld(gpus)
        await self.health_watch.notify()

    def _report_withheld(self, gpus: Sequence[GpuInfo]) -> None:
        """A card published neither as shares nor as partitions (its MIG mode waits for a
        reset, or its profiles could not be read): logged and told on the Node."""
        node = self.settings.node_name
        for gpu in gpus:
            reason = withheld_reason(gpu)
            if reason is None:
                continue
            log.warning(
                "GPU not published", extra={"node": node, "gpu": gpu.uuid, "reason": reason}
            )
            self._node_event("GPUNotPublished", reason)

    def _node_event(self, reason: str, message: str) -> None:
        """A Warning Event on this node, where `kubectl describe node` shows it."""
        node = self.settings.node_name
        reference = {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node}
        self.events.emit(reference, WARNING, reason, message)

    async def wait_for_sockets(self, generation: int) -> None:
        """Wait until the sockets have been created `generation` times."""
        async with self._sockets_changed:
            await self._sockets_changed.wait_for(lambda: self.socket_generation >= generation)

    async def _serve_sockets(self) -> None:
        for path in (self.settings.dra_socket, self.settings.registration_socket):
            if path not in self._servers or not path.exists():
                await self._serve(path)
        async with self._sockets_changed:
            self.socket_generation += 1
            self._sockets_changed.notify_all()

    async def _serve(self, path: Path) -> None:
        old = self._servers.pop(path, None)
        if old is not None:
            # Kept running until aclose: grpc unlinks a unix socket when its
            # listener is torn down, which would remove the new socket here.
            self._retired.append(old)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        if path == self.settings.dra_socket:
            add_dra_services(server, self.preparer, self.health_watch)
        else:
            pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
                self.registration, server
            )
        # Both sockets answer grpc.health.v1: the liveness probe (`dra-driver
        # healthcheck`) asks each of them, as kubelet reaches them.
        checker = health.aio.HealthServicer()
        await checker.set("", health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(checker, server)
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        os.chmod(path, SOCKET_MODE)
        self._servers[path] = server
        log.info("serving", extra={"socket": str(path), "node": self.settings.node_name})

    async def _guard_sockets(self) -> None:
        """kubelet's restart wipes the plugin dirs: serve the sockets again."""
        while True:
            await self._until_socket_missing()
            await self._serve_sockets()

    async def _until_socket_missing(self) -> None:
        """Return once a socket may be gone. Through inotify on their directories, which
        also wakes every second (a watched directory that vanished ends inotify
        silently); else, or when inotify cannot start, by looking every poll interval."""
        directories = {p.parent for p in self._servers if p.parent.exists()}
        if self.settings.host_poll_s is None and len(directories) == 2:
            try:
                async for _ in awatch(
                    *map(str, directories),
                    debounce=50,
                    step=10,
                    recursive=False,
                    rust_timeout=1000,
                    yield_on_timeout=True,
                ):
                    if not all(path.exists() for path in self._servers):
                        return
            except (RuntimeError, OSError) as error:
                log.warning(
                    "cannot watch the socket directories, polling them",
                    extra={"node": self.settings.node_name, "error": str(error)},
                )
        interval = self.settings.host_poll_s or FALLBACK_POLL_S
        while True:
            if not all(path.exists() for path in self._servers):
                return
            await asyncio.sleep(interval)

    async def _republish(self) -> None:
        """One worker applies device changes in order, however many arrive."""
        while True:
            await self._devices_changed.wait()
            self._devices_changed.clear()
            try:
                await self.refresh_devices()
                await self.publisher.publish(self.publishable_gpus(), self.slice_settings)
            except DriverError as error:
                log.error("devices not republished", extra={"error": str(error)})

    def _watched_files(self) -> list[Path]:
        return [p for p in (self.settings.mock_gpus, self.settings.config_file) if p is not None]

    async def _watch_files(self) -> None:
        """The mock GPU file and the node config: any change republishes."""
        files = self._watched_files()
        if self.settings.host_poll_s is None:
            try:
                await watch_files(files, self._devices_changed.set)
                return
            except (RuntimeError, OSError) as error:
                log.warning(
                    "cannot watch the GPU and config files, polling them",
                    extra={"node": self.settings.node_name, "error": str(error)},
                )
        await poll_files(
            files, self._devices_changed.set, self.settings.host_poll_s or FALLBACK_POLL_S
        )

    async def _watch_xids(self) -> None:
        """NVML XID events (in a worker thread) mark GPUs unhealthy."""
        assert isinstance(self.backend, NvmlBackend)
        await watch_xids(self.backend, self._devices_changed.set, self._stop_threads)
