"""A mixed node for the mixed-mode tests: one GPU served both ways, both allocators running.

The node's kubelet plugin publishes a ResourceSlice device with the GPU's uuid
(2 shares, 16 GiB, 100 cores, the controller-allocated taint) and the node
carries the same card in `hami.io/node-nvidia-register` with `nvidia.com/gpu`
allocatable, as HAMi's device plugin writes them. The real DRA controller
(standalone claims allocated, short retries) and the real legacy scheduler
(extender + webhook on loopback, callers not authenticated) run against the
API emulator, each in mixed mode or not as asked; the context yields once both
have read the node.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

from controller_cluster import CONTROLLER_TAINT, DRIVER, WAIT_S, Cluster, cluster, controller, gpu
from legacy_fixtures import legacy_scheduler, register_value

from api.hami_annotations import NODE_NVIDIA_REGISTER
from controller.controller import Controller
from controller.legacy.config import LegacySettings
from controller.legacy.server import LegacyServer
from controller.settings import ControllerSettings
from dra_driver.kube.rest import object_path
from kubeletplugin.slices import SliceSettings

NODE = "mixed-node"
NS = "mixed"
UUID = f"GPU-{NODE}-0"
MEMORY_GIB = 16
MEMORY_MIB = MEMORY_GIB * 1024
SHARES = 2
CORES = 100
SLICES = SliceSettings(driver=DRIVER, allocation_taint=CONTROLLER_TAINT, split_count=SHARES)
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims"


def claim_path(name: str) -> str:
    return object_path(CLAIMS.format(ns=NS), name)


@contextlib.asynccontextmanager
async def mixed_cluster(
    tmp_path: Path, mixed: bool, legacy: LegacySettings | None = None
) -> AsyncIterator[tuple[Cluster, Controller, LegacyServer]]:
    async with cluster(tmp_path) as c:
        client = c.client
        await client.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        await c.add_class()
        await c.add_node(NODE, [gpu(NODE, 0, memory_gib=MEMORY_GIB)], slices=SLICES)
        register = register_value(NODE, gpus=1, count=SHARES, memory=MEMORY_MIB)
        await client.patch(
            object_path("/api/v1/nodes", NODE),
            {"metadata": {"annotations": {NODE_NVIDIA_REGISTER: register}}},
        )
        await client.patch(
            object_path("/api/v1/nodes", NODE) + "/status",
            {"status": {"allocatable": {"nvidia.com/gpu": str(SHARES)}}},
        )
        settings = ControllerSettings(
            retry_initial_s=0.02,
            retry_max_s=0.2,
            allocate_standalone_claims=True,
            mixed_mode=mixed,
        )
        legacy_settings = replace(legacy or LegacySettings(), mixed_mode=mixed)
        async with (
            controller(client, settings) as ctl,
            legacy_scheduler(client, legacy_settings) as server,
        ):
            async with asyncio.timeout(WAIT_S):
                await server.state.nodes.wait_for(lambda _: NODE in server.state.usable)
                for informer in server.state.dra.informers:
                    if informer.path.endswith("resourceslices"):
                        await informer.wait_for(bool)
                await ctl.view.slices.wait_for(bool)
            yield c, ctl, server
