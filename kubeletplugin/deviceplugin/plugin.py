"""`dra-driver device-plugin`: the legacy node half, assembled.

Discovery (NVML or the mock file, node config overrides) feeds two outputs:
the replica list kubelet watches over ListAndWatch and the node annotations
HAMi's scheduler reads (the register list and the GPUs' pair scores). The
plugin serves its socket in kubelet's device-plugins directory, then
registers (kubelet calls back on the socket before Register returns). A
restarted kubelet deletes the plugin's socket and creates a new
`kubelet.sock`; either one is noticed and the plugin serves again and
re-registers.

On a node with a MIG-capable card, the MIG reconciler (`mig_reconcile`) also runs:
it watches the node's pods and destroys the instances Allocate created for pods
that have ended, and only those (`mig_journal` records them across restarts).

The handshake: HAMi's scheduler writes `hami.io/node-handshake:
Requesting_<time>` and, since HAMi PR #1499, takes a node's devices as gone
when that request is over 60 s old and the node's allocatable `nvidia.com/gpu`
is 0. HAMi's current NVIDIA plugin answers by staying registered, so kubelet
reports allocatable replicas, and by keeping the register annotation current;
it no longer writes `Reported_`. This plugin answers the same way and never
writes the handshake annotation (reference hami-protocol.md §5).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from watchfiles import awatch

from api.generated import deviceplugin_v1beta1_pb2 as pb2
from api.generated import deviceplugin_v1beta1_pb2_grpc as pb2_grpc
from api.hami_annotations import NODE_NVIDIA_REGISTER, NODE_NVIDIA_SCORE
from dra_driver.errors import DriverError
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.mig_allowlist import MigAllowlist, load_mig_allowlist
from dra_driver.process.grpc_tasks import stop_grpc_server
from dra_driver.process.runtime import cancel_and_wait, wait_event
from kubeletplugin.deviceplugin.allocator import NODES, PodAllocator
from kubeletplugin.deviceplugin.devices import (
    kubelet_devices,
    register_annotation,
    score_annotation,
    topology_scores,
)
from kubeletplugin.deviceplugin.mig_allocate import MigAllocator
from kubeletplugin.deviceplugin.mig_journal import MigJournal
from kubeletplugin.deviceplugin.mig_reconcile import MigReconciler, MigReconcileSettings
from kubeletplugin.deviceplugin.service import OPTIONS, DeviceBoard, DevicePluginService
from kubeletplugin.gpu_sources import watch_files, watch_xids
from kubeletplugin.gpus import GpuBackend, GpuInfo, MigInstanceManager, NvmlBackend
from kubeletplugin.node_config import load_node_config
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
KUBELET_SOCKET = "kubelet.sock"
SOCKET_MODE = 0o600
EVENT_COMPONENT = "vgpu-device-plugin"
MIG_JOURNAL_NAME = "mig-instances.json"


@dataclass(frozen=True)
class DevicePluginSettings:
    """Every host path is configurable so tests run unprivileged in temp dirs."""

    node_name: str
    resource_name: str = "nvidia.com/gpu"
    plugin_dir: Path = Path("/var/lib/kubelet/device-plugins")
    """kubelet's device-plugins directory: kubelet.sock and the plugin's socket."""
    sharing: SliceSettings = field(default_factory=SliceSettings)
    """Split count (replicas per GPU), memory and core scaling; the node config overrides."""
    mock_gpus: Path | None = None
    config_file: Path | None = None
    device_config: Path | None = None
    """HAMi's `device-config.yaml`: its `nvidia.migProfileAllowlist` picks the MIG
    profiles registered per card model; None registers every discovered profile."""
    libvgpu: LibvgpuPaths = field(default_factory=LibvgpuPaths)
    cache_dirs: CacheDirSettings = field(default_factory=CacheDirSettings)
    disable_core_limit: bool = False
    """HAMi's `--disable-core-limit`: `GPU_CORE_UTILIZATION_POLICY=disable` for every container."""
    register_interval_s: float = 30.0
    """How often the register annotation is checked without a device change (HAMi: 30 s)."""
    retry_interval_s: float = 5.0
    """Pause after a failed annotation write (HAMi: 5 s)."""
    kubelet_check_s: float = 1.0
    """Longest time a vanished socket or a new kubelet.sock goes unnoticed."""
    register_timeout_s: float = 10.0
    mixed_mode: bool = False
    """The kubelet DRA plugin serves these GPUs too: Allocate counts the claims on them."""
    driver: str = "vgpu.hami.io"
    """In mixed mode, the DRA driver whose ResourceSlices and claims share these GPUs."""
    mig_journal: Path | None = None
    """The record of the MIG instances Allocate created (`mig_journal`); None:
    `mig-instances.json` in libvgpu's host directory, a hostPath the DaemonSet mounts
    that outlives the plugin's pod (as the record must)."""
    boot_id_file: Path = Path("/proc/sys/kernel/random/boot_id")
    """The node's boot id: the MIG record of another boot names no instance."""
    mig_reconcile: MigReconcileSettings = field(default_factory=MigReconcileSettings)
    """How often the MIG reconciler passes without a pod event."""

    @property
    def mig_journal_path(self) -> Path:
        if self.mig_journal is not None:
            return self.mig_journal
        return Path(self.libvgpu.host_dir) / MIG_JOURNAL_NAME

    @property
    def socket_name(self) -> str:
        return self.resource_name.replace("/", "-") + ".sock"

    @property
    def socket_path(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def kubelet_socket(self) -> Path:
        return self.plugin_dir / KUBELET_SOCKET


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_ctime_ns


class DevicePlugin:
    def __init__(self, settings: DevicePluginSettings, client: KubeClient, backend: GpuBackend):
        # Its own User-Agent: the RBAC audit checks these calls against its ClusterRole.
        client = client.for_component("device-plugin")
        self.settings = settings
        self.client = client
        self.backend = backend
        self.gpus: Sequence[GpuInfo] = ()
        self.sharing = settings.sharing
        self.mig_allowlist: MigAllowlist | None = None
        self.board = DeviceBoard()
        self.events = EventRecorder(
            client, EventSettings(component=EVENT_COMPONENT, instance=settings.node_name)
        )
        manages_mig = isinstance(backend, MigInstanceManager)
        journal = MigJournal(settings.mig_journal_path, settings.boot_id_file)
        self.allocator = PodAllocator(
            client,
            settings.node_name,
            lambda: self.gpus,
            lambda: self.sharing,
            settings.libvgpu,
            settings.cache_dirs,
            self.events,
            disable_core_limit=settings.disable_core_limit,
            mixed_driver=settings.driver if settings.mixed_mode else None,
            mig=MigAllocator(backend, journal=journal) if manages_mig else None,
            mig_allowlist=lambda: self.mig_allowlist,
        )
        self.mig_reconciler = (
            MigReconciler(
                client,
                settings.node_name,
                backend,
                journal,
                self.allocator.lock,
                settings.mig_reconcile,
            )
            if manages_mig
            else None
        )
        """Runs only where a card is MIG-capable (it watches the node's pods)."""
        self.registrations = 0
        """Successful Register calls; `wait_registered` on it in tests."""
        self._registered_with: tuple[int, int] | None = None
        self._registered = asyncio.Condition()
        self._server: grpc.aio.Server | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._devices_changed = asyncio.Event()
        self._annotation_due = asyncio.Event()
        self._stop_threads = threading.Event()

    async def start(self) -> None:
        try:
            self.events.start()
            await self.refresh_devices()
            await self._serve()
            await self._try_register()
            self._spawn(self._guard_kubelet(), "kubelet guard")
            self._spawn(self._refresh_worker(), "device refresh")
            self._spawn(self._annotate(), "register annotation")
            if self.mig_reconciler is not None and any(gpu.mig.capable for gpu in self.gpus):
                self._spawn(self.mig_reconciler.run(), "MIG reconciler")
            settings = self.settings
            files = (settings.mock_gpus, settings.config_file, settings.device_config)
            watched = [p for p in files if p]
            if watched:
                self._spawn(watch_files(watched, self._devices_changed.set), "file watch")
            if isinstance(self.backend, NvmlBackend):
                self._spawn(
                    watch_xids(self.backend, self._devices_changed.set, self._stop_threads),
                    "xid watch",
                )
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        self._stop_threads.set()
        await cancel_and_wait(self._tasks)
        self._tasks = []
        await self._stop_server()
        await self.events.aclose()

    async def __aenter__(self) -> DevicePlugin:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _spawn(self, coroutine, name: str) -> None:
        self._tasks.append(asyncio.create_task(coroutine, name=f"device-plugin {name}"))

    async def refresh_devices(self) -> bool:
        """Discover again and re-read the node config; on a change, tell kubelet
        and rewrite the register annotation. True when something changed."""
        config = await asyncio.to_thread(load_node_config, self.settings.config_file)
        allowlist = await asyncio.to_thread(load_mig_allowlist, self.settings.device_config)
        gpus = config.published(await asyncio.to_thread(self.backend.discover))
        sharing = config.slice_settings(self.settings.sharing)
        same = gpus == tuple(self.gpus) and sharing == self.sharing
        if same and allowlist == self.mig_allowlist and self.board.version:
            return False
        self.gpus, self.sharing, self.mig_allowlist = gpus, sharing, allowlist
        await self.board.publish(kubelet_devices(gpus, sharing))
        self._annotation_due.set()
        return True

    async def sync_register_annotation(self) -> bool:
        """Patch `hami.io/node-nvidia-register` and `hami.io/node-nvidia-score` only where
        the node's value differs from the devices' (also when someone else changed or
        removed it); a score no GPU reports links for any more is removed. True if patched."""
        path = object_path(NODES, self.settings.node_name)
        node = await self.client.get(path)
        current = (node.get("metadata") or {}).get("annotations") or {}
        scores = topology_scores(self.gpus)
        wanted = {
            NODE_NVIDIA_REGISTER: register_annotation(self.gpus, self.sharing, self.mig_allowlist),
            NODE_NVIDIA_SCORE: score_annotation(scores),
        }
        changed = {key: value for key, value in wanted.items() if current.get(key) != value}
        if not changed:
            return False
        await self.client.patch(path, {"metadata": {"annotations": changed}})
        log.info(
            "node register annotation written",
            extra={
                "node": self.settings.node_name,
                "gpus": len(self.gpus),
                "keys": sorted(changed),
            },
        )
        if scores is not None and scores.asymmetric:
            log.warning(
                "GPU pairs with asymmetric link data scored 0 (NVLink hardware or driver fault?)",
                extra={"node": self.settings.node_name, "pairs": scores.asymmetric},
            )
        return True

    async def wait_registered(self, count: int) -> None:
        """Wait until Register has succeeded `count` times."""
        async with self._registered:
            await self._registered.wait_for(lambda: self.registrations >= count)

    async def _serve(self) -> None:
        await self._stop_server()
        path = self.settings.socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        server = grpc.aio.server()
        pb2_grpc.add_DevicePluginServicer_to_server(
            DevicePluginService(self.board, self.allocator), server
        )
        server.add_insecure_port(f"unix://{path}")
        await server.start()
        os.chmod(path, SOCKET_MODE)
        self._server = server
        log.info("serving", extra={"socket": str(path), "resource": self.settings.resource_name})

    async def _stop_server(self) -> None:
        if self._server is not None:
            server, self._server = self._server, None
            await stop_grpc_server(server)

    async def _try_register(self) -> bool:
        """Register with the kubelet whose socket is there now; False (logged) if not."""
        kubelet = self.settings.kubelet_socket
        identity = _identity(kubelet)
        if identity is None:
            log.info("kubelet socket not there yet", extra={"socket": str(kubelet)})
            return False
        request = pb2.RegisterRequest(
            version=API_VERSION,
            endpoint=self.settings.socket_name,
            resource_name=self.settings.resource_name,
            options=OPTIONS,
        )
        try:
            async with grpc.aio.insecure_channel(f"unix://{kubelet}") as channel:
                await pb2_grpc.RegistrationStub(channel).Register(
                    request, timeout=self.settings.register_timeout_s
                )
        except grpc.aio.AioRpcError as error:
            log.warning(
                "registration with kubelet failed; retrying",
                extra={"code": error.code().name, "error": error.details()},
            )
            return False
        async with self._registered:
            self._registered_with = identity
            self.registrations += 1
            self._registered.notify_all()
        log.info("registered with kubelet", extra={"resource": self.settings.resource_name})
        return True

    def _kubelet_restarted(self) -> bool:
        if not self.settings.socket_path.exists():
            return True
        current = _identity(self.settings.kubelet_socket)
        return current is not None and current != self._registered_with

    async def _guard_kubelet(self) -> None:
        """Serve again when the socket is gone, register again with a new kubelet.sock.

        The watch also wakes every `kubelet_check_s`, so a directory that vanished
        (which ends inotify silently) is still noticed.
        """
        check_ms = max(1, int(self.settings.kubelet_check_s * 1000))
        while True:
            if not self._kubelet_restarted() and self.settings.plugin_dir.is_dir():
                with contextlib.suppress(RuntimeError, OSError):
                    async for _ in awatch(
                        str(self.settings.plugin_dir),
                        debounce=50,
                        step=10,
                        recursive=False,
                        rust_timeout=check_ms,
                        yield_on_timeout=True,
                    ):
                        if self._kubelet_restarted() or not self.settings.plugin_dir.is_dir():
                            break
            await self._reconnect()

    async def _reconnect(self) -> None:
        if not self.settings.socket_path.exists():
            log.info("plugin socket removed (kubelet restart?): serving again")
            await self._serve()
        if not await self._try_register():
            await asyncio.sleep(self.settings.kubelet_check_s)

    async def _refresh_worker(self) -> None:
        """One worker applies device changes in order, however many arrive."""
        while True:
            await self._devices_changed.wait()
            self._devices_changed.clear()
            try:
                await self.refresh_devices()
            except DriverError as error:
                log.error("devices not refreshed", extra={"error": str(error)})

    async def _annotate(self) -> None:
        while True:
            self._annotation_due.clear()
            delay = self.settings.register_interval_s
            try:
                await self.sync_register_annotation()
            except DriverError as error:
                log.warning(
                    "register annotation not written",
                    extra={"node": self.settings.node_name, "error": str(error)},
                )
                delay = self.settings.retry_interval_s
            await wait_event(self._annotation_due, delay)
