"""A cluster whose driver components are processes of a chosen release, against the API
emulator served over loopback HTTP: each node's kubelet plugin and the controller run
as `dra-driver` commands, of the working tree or of an earlier release's tree
(`release_trees`), and can be replaced by another release's while the node's kubelet
stand-in, the emulator and every pod's files stay.

A mock card's MIG instances live in the plugin process's memory, a real card's outlive
the plugin: before a MIG node's plugin is replaced, the instances its checkpoint records
are written into the node's mock GPU file, as the card would still hold them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Awaitable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from release_trees import REPOSITORY, release_command, release_environment
from upgrade_cluster import DRIVER

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from kubeletplugin.checkpoint import Checkpoint, CheckpointFile, read_boot_id
from simulator.apiserver import APIServer
from simulator.deviceclasses import device_classes
from simulator.nodes import install_libvgpu_files, register_node
from simulator.standins.kubelet_dra import KubeletDRA, KubeletDRASettings

WAIT_S = 60.0
"""Bound on every wait (a component start, an allocation, a process exit)."""
LOG_TAIL_BYTES = 4000
T = TypeVar("T")


class ComponentFailedError(AssertionError):
    """A component process ended while the test waited on it; its log's tail says why."""


@dataclass(frozen=True)
class Release:
    """Where a release's code is: `tree` None is the working tree."""

    name: str
    tree: Path | None = None

    async def spawn(self, log: Path, *arguments: str) -> Component:
        """`dra-driver <arguments>` of this release, its output appended to `log`."""
        if self.tree is None:
            cwd = REPOSITORY
            environment = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        else:
            cwd, environment = self.tree, release_environment(self.tree)
        with log.open("ab") as output:
            process = await asyncio.create_subprocess_exec(
                *release_command(*arguments),
                cwd=cwd,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
            )
        return Component(self, process, log)


@dataclass
class Component:
    release: Release
    process: asyncio.subprocess.Process
    log: Path

    def failure(self, what: str) -> ComponentFailedError:
        tail = self.log.read_bytes()[-LOG_TAIL_BYTES:].decode(errors="replace")
        return ComponentFailedError(f"{self.log.stem} ({self.release.name}) {what}:\n{tail}")

    async def until(self, awaitable: Awaitable[T]) -> T:
        """`awaitable`'s result within `WAIT_S`; a failure with the component's log when it
        exits first or the wait runs out."""
        waiting = asyncio.ensure_future(awaitable)
        exited = asyncio.ensure_future(self.process.wait())
        try:
            async with asyncio.timeout(WAIT_S):
                await asyncio.wait({waiting, exited}, return_when=asyncio.FIRST_COMPLETED)
        except TimeoutError:
            raise self.failure(f"did not get there in {WAIT_S:g} s") from None
        finally:
            exited.cancel()
            if not waiting.done():
                waiting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiting
        if waiting.cancelled():
            raise self.failure(f"exited {self.process.returncode}")
        return waiting.result()

    async def stop(self) -> None:
        """SIGTERM, as kubelet stops a pod's container, and its exit."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
        async with asyncio.timeout(WAIT_S):
            await self.process.wait()


@dataclass
class Node:
    """A node's host directories, its kubelet stand-in and its running plugin."""

    name: str
    root: Path
    kubelet: KubeletDRA
    kubeconfig: Path
    plugin: Component | None = None
    starts: int = 0

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def checkpoint_path(self) -> Path:
        return self.root / "plugin" / "state" / "checkpoint.json"

    @property
    def cache_dirs(self) -> Path:
        return self.root / "vgpu" / "claims"

    def checkpoint(self, scratch: Path) -> Checkpoint:
        """The checkpoint as the working tree's plugin loads it (journal replayed), read
        from a copy so the running plugin's directory is left as it is."""
        copy = Path(tempfile.mkdtemp(dir=scratch)) / "checkpoint.json"
        for source in self.checkpoint_path.parent.glob("checkpoint.json*"):
            shutil.copyfile(source, copy.with_name(source.name))
        return CheckpointFile(copy, read_boot_id()).load()

    async def run(self, release: Release) -> None:
        """Replace the node's plugin with `release`'s (stop the running one first, as a
        DaemonSet's rolling update does); return once kubelet registered it."""
        before = self.kubelet.plugins.get(DRIVER)
        if self.plugin is not None:
            await self.plugin.stop()
            self._keep_mig_instances()
        self.starts += 1
        self.plugin = await release.spawn(
            self.root / f"plugin-{self.starts}.log", "kubelet-plugin",
            "--node-name", self.name, "--mock-gpus", str(self.root / "gpus.yaml"),
            "--controller-allocated", "--registry-dir", str(self.root / "registry"),
            "--plugin-dir", str(self.root / "plugin"), "--cdi-dir", str(self.cdi_dir),
            "--vgpu-dir", str(self.root / "vgpu"), "--lock-dir", str(self.root / "vgpulock"),
            "--metrics-port", "0", "--kubeconfig", str(self.kubeconfig), "--log-level", "WARNING",
        )  # fmt: skip
        await self.plugin.until(
            self.kubelet.wait_for(lambda: self.kubelet.plugins.get(DRIVER) not in (None, before))
        )

    def _keep_mig_instances(self) -> None:
        """The instances the stopped plugin's checkpoint records, into the mock file."""
        gpus_file = self.root / "gpus.yaml"
        document = yaml.safe_load(gpus_file.read_text())
        records = [m for r in self.checkpoint(self.root).claims.values() for m in r.mig]
        for card in document["gpus"]:
            if "mig" not in card:
                continue
            made = sorted(
                (m.gpu_instance_id, m.profile, m.start)
                for m in records
                if m.gpu_uuid == card["uuid"] and m.created
            )
            card["mig"]["instances"] = [{"profile": p, "start": s} for _, p, s in made]
        gpus_file.write_text(yaml.safe_dump(document, sort_keys=False))


@dataclass
class ReleaseCluster:
    server: APIServer
    root: Path
    admin: KubeClient
    claims: Informer
    nodes: dict[str, Node] = field(default_factory=dict)
    controller: Component | None = None
    controller_starts: int = 0

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def kubelets(self) -> Mapping[str, KubeletDRA]:
        return {name: node.kubelet for name, node in self.nodes.items()}

    async def add_node(self, name: str, gpus: dict[str, Any], release: Release) -> Node:
        """A Ready node with its host files (`install-libvgpu`'s), the kubelet stand-in and
        `release`'s plugin."""
        root = self.root / name
        root.mkdir()
        (root / "gpus.yaml").write_text(yaml.safe_dump(gpus, sort_keys=False))
        install_libvgpu_files(root)
        await register_node(self.admin, name)
        kubelet = KubeletDRA(KubeletDRASettings(name, root / "registry"), None)
        await kubelet.start()
        node = Node(name, root, kubelet, self.kubeconfig)
        self.nodes[name] = node
        await node.run(release)
        return node

    async def run_controller(self, release: Release, *flags: str) -> None:
        """Replace the controller with `release`'s (one replica, no election)."""
        if self.controller is not None:
            await self.controller.stop()
        self.controller_starts += 1
        self.controller = await release.spawn(
            self.root / f"controller-{self.controller_starts}.log", "controller",
            "--no-leader-elect", "--metrics-port", "0", "--kubeconfig", str(self.kubeconfig),
            "--log-level", "WARNING", *flags,
        )  # fmt: skip

    async def aclose(self) -> None:
        for component in [self.controller, *(n.plugin for n in self.nodes.values())]:
            if component is not None:
                with contextlib.suppress(TimeoutError):
                    await component.stop()
        for node in self.nodes.values():
            await node.kubelet.aclose()


@contextlib.asynccontextmanager
async def release_cluster() -> AsyncIterator[ReleaseCluster]:
    """The emulator with the deployment's DeviceClasses and a claims informer; the
    nodes and the controller are added by the test. A short root: unix socket paths."""
    root = Path(tempfile.mkdtemp(prefix="vgpu-roll-", dir="/tmp"))
    try:
        async with APIServer() as server:
            admin = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            claims = Informer(admin, "/apis/resource.k8s.io/v1/resourceclaims")
            informer = asyncio.create_task(claims.run(), name="claims informer")
            cluster = ReleaseCluster(server, root, admin, claims)
            try:
                await claims.synced.wait()
                for device_class in device_classes():
                    await admin.create("/apis/resource.k8s.io/v1/deviceclasses", device_class)
                yield cluster
            finally:
                await cluster.aclose()
                informer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await informer
                await admin.aclose()
    finally:
        shutil.rmtree(root, ignore_errors=True)
