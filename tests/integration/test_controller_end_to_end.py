"""The headline DRA flow with every real part: two nodes whose kubelet plugins (mock GPUs,
`--controller-allocated`) publish their slices and register with a kubelet stand-in; the
controller allocates, the kube-scheduler stand-in binds the pod to the chosen node, and
kubelet's NodePrepareResources there writes the CDI spec with the share's limits."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from controller_cluster import (
    CONTROLLER_TAINT,
    DRIVER,
    NAMESPACE,
    capacity,
    cluster,
    controller,
    node_of,
    request,
    results,
    scheduler,
)
from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import KubeClient
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin, PluginSettings
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings

MOCK_GPUS = """
gpus:
  - {{uuid: GPU-{node}-0, index: 0, minor: 0, memory: 16Gi}}
  - {{uuid: GPU-{node}-1, index: 1, minor: 1, memory: 16Gi, numa: 1}}
"""


@pytest.fixture
def root() -> Iterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ctle2e", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def plugin_settings(root: Path, node: str) -> PluginSettings:
    base = root / node
    (base / "vgpu").mkdir(parents=True)
    (base / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF")
    (base / "vgpu" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    (base / "vgpulock").mkdir(mode=0o1777)
    (base / "gpus.yaml").write_text(MOCK_GPUS.format(node=node))
    (base / "boot_id").write_text("boot-1\n")
    (base / "mountinfo").write_text("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n")
    return PluginSettings(
        node_name=node,
        slices=SliceSettings(driver=DRIVER, allocation_taint=CONTROLLER_TAINT),
        registry_dir=base / "registry",
        plugin_dir=base / "plugin",
        cdi_dir=base / "cdi",
        boot_id_file=base / "boot_id",
        mock_gpus=base / "gpus.yaml",
        libvgpu=LibvgpuPaths(
            host_dir=str(base / "vgpu"),
            cache_root=str(base / "vgpu"),
            lock_dir=str(base / "vgpulock"),
        ),
        cache_dirs=CacheDirSettings(
            self_mountinfo=str(base / "mountinfo"), mountinfo_glob=str(base / "none-*")
        ),
    )


@contextlib.asynccontextmanager
async def kubelet_node(
    client: KubeClient, root: Path, node: str
) -> AsyncIterator[tuple[KubeletDRA, PluginSettings]]:
    """A node's kubelet stand-in and its real kubelet plugin, registered."""
    settings = plugin_settings(root, node)
    kubelet = KubeletDRA(KubeletDRASettings(node, settings.registry_dir), None)
    async with kubelet:
        plugin = KubeletPlugin(
            settings, client, MockBackend(settings.mock_gpus), CollectorRegistry()
        )
        async with plugin:
            await kubelet.wait_registered(DRIVER)
            yield kubelet, settings


async def test_a_pod_gets_its_share_prepared_on_the_node_the_controller_chose(
    root: Path,
) -> None:
    try:
        async with cluster(root) as c:
            await c.add_class()
            for node in ("node-a", "node-b"):
                await c.add_node(node, None, cpu="8")
            async with (
                kubelet_node(c.client, root, "node-a") as (kubelet_a, settings_a),
                kubelet_node(c.client, root, "node-b") as (kubelet_b, settings_b),
            ):
                await c.add_pod_with_claim("infer", request(**capacity(memory="4Gi", cores="30")))
                async with controller(c.client), scheduler(c, root):
                    [claim] = await c.wait_allocated("infer-claim")
                    bound = await c.wait_bound("infer")
                kubelet, settings = (
                    (kubelet_a, settings_a) if bound == "node-a" else (kubelet_b, settings_b)
                )
                reference = ClaimRef(NAMESPACE, claim["metadata"]["uid"], "infer-claim")
                response = await kubelet.prepare(DRIVER, [reference])
                specs = list(settings.cdi_dir.glob("*"))
                spec_text = specs[0].read_text() if specs else ""
    finally:
        await settle_cancelled_grpc_calls()
    assert node_of(claim) == bound
    [result] = results(claim)
    assert result["consumedCapacity"] == {"memory": "4Gi", "cores": "30", "shares": "1"}
    assert response.claims[reference.uid].error == ""
    assert kubelet.cdi_ids[reference.uid]
    assert "CUDA_DEVICE_MEMORY_LIMIT_0=4096m" in spec_text
    assert "CUDA_DEVICE_SM_LIMIT_0=30" in spec_text
    assert result["pool"] == bound
