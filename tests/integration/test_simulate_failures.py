"""A failure while the simulation starts names the component and the request that failed.

Real parts: the in-process API emulator with an injected fault, a node started as
`dra-driver simulate` starts it (its real kubelet plugin, the kubelet stand-ins).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from dra_driver.errors import DriverError
from dra_driver.kube.rest import KubeClient
from simulator import dra_simulation, mixed
from simulator.apiserver import APIServer
from simulator.dra import DraCluster
from simulator.failures import ComponentError
from simulator.identities import Identities
from simulator.nodes import start_node, stop_nodes
from simulator.settings import ClusterShape, FamilyNode, SimulationSettings
from simulator.standins.kubelet_pods import PodFeed

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


async def start_one(server: APIServer, root: Path) -> list[str]:
    """Start sim-node-0 as `simulate` does and stop it; the drivers its kubelet had
    registered once it was up."""
    admin = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
    identities = Identities(server, root / "identities")
    feed = PodFeed(admin)
    try:
        await feed.start()
        node = await start_node(
            identities,
            ClusterShape(nodes=1, gpus_per_node=2),
            FamilyNode("nvidia", 0, 0),
            root / "node",
            feed=feed,
            controller_allocated=True,
        )
        registered = sorted(node.kubelet.plugins)
        await stop_nodes([node])
        return registered
    finally:
        await feed.aclose()
        await identities.aclose()
        await admin.aclose()


async def test_a_refused_slice_write_names_the_nodes_plugin_and_its_request(tmp_path: Path):
    async with APIServer() as server:
        rule = server.faults.fail(f"{SLICES}$", verb="POST", status=403, message="injected")
        with pytest.raises(ComponentError) as raised:
            await start_one(server, tmp_path)
    assert rule.hits == 1
    error = raised.value
    assert error.component == "kubelet plugin on sim-node-0"
    assert str(error).startswith(f"kubelet plugin on sim-node-0: POST {SLICES}: 403 ")
    assert "injected" in str(error)


async def test_without_the_fault_the_same_start_registers_the_plugin(tmp_path: Path):
    async with APIServer() as server:
        assert await start_one(server, tmp_path) == ["vgpu.hami.io"]


async def crashed_component() -> None:
    raise DriverError("lost its watch for good")


@pytest.mark.parametrize("mode", ["dra", "mixed"])
async def test_a_component_that_died_ends_the_wait_for_pods_with_its_error(
    tmp_path: Path, mode: str
):
    """Without this, the run would wait out its settle timeout and report pods that
    never settled, naming no component."""
    async with APIServer() as server:
        admin = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        identities = Identities(server, tmp_path / "identities")
        task = asyncio.create_task(crashed_component(), name="controller")
        await asyncio.wait([task])
        cluster = DraCluster(server, admin, identities, tasks=[task])
        names = {("default", "waits")}
        try:
            with pytest.raises(ComponentError) as raised:
                if mode == "dra":
                    await dra_simulation.wait_settled(cluster, names, 0.0, lambda *_: None)
                else:
                    settings = SimulationSettings(settle_timeout_s=0.0)
                    await mixed._wait_claims_settled(cluster, names, settings, lambda *_: None)
        finally:
            await identities.aclose()
            await admin.aclose()
    assert raised.value.component == "controller"
    assert "lost its watch for good" in str(raised.value)
