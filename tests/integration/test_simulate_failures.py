"""A failure while the simulation starts names the component and the request that failed.

Real parts: the in-process API emulator with an injected fault, a node started as
`dra-driver simulate` starts it (its real kubelet plugin, the kubelet stand-ins).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.apiserver import APIServer
from simulator.failures import ComponentError
from simulator.identities import Identities
from simulator.nodes import start_node, stop_nodes
from simulator.settings import ClusterShape, FamilyNode

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


async def test_a_refused_slice_write_names_the_nodes_plugin_and_its_request(tmp_path: Path):
    async with APIServer() as server:
        identities = Identities(server, tmp_path / "identities")
        rule = server.faults.fail(f"{SLICES}$", verb="POST", status=403, message="injected")
        try:
            with pytest.raises(ComponentError) as raised:
                await start_node(
                    identities,
                    ClusterShape(nodes=1, gpus_per_node=2),
                    FamilyNode("nvidia", 0, 0),
                    tmp_path / "node",
                    controller_allocated=True,
                )
        finally:
            await identities.aclose()
    assert rule.hits == 1
    error = raised.value
    assert error.component == "kubelet plugin on sim-node-0"
    assert str(error).startswith(f"kubelet plugin on sim-node-0: POST {SLICES}: 403 ")
    assert "injected" in str(error)


async def test_a_started_node_serves_until_stopped(tmp_path: Path):
    """The counterpart without a fault: the same start succeeds and its plugin registers."""
    async with APIServer() as server:
        identities = Identities(server, tmp_path / "identities")
        try:
            node = await start_node(
                identities,
                ClusterShape(nodes=1, gpus_per_node=2),
                FamilyNode("nvidia", 0, 0),
                tmp_path / "node",
                controller_allocated=True,
            )
            assert node.plugin.settings.driver in node.kubelet.plugins
            await stop_nodes([node])
        finally:
            await identities.aclose()
