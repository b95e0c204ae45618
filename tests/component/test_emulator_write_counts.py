"""The emulator's per-server write counts (server.audit): by client, resource and
subresource, refusals counted apart, reads not counted, and a reset.

The clients here send other user agents than the driver's components
(`vgpu-dra-driver/<component>`): the RBAC audit reads every such request as that
component's, and these writes are no component's."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.kube.rest import ConflictError, KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.apiserver.audit import client_name

PODS = "/api/v1/namespaces/default/pods"
POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}


async def test_writes_are_counted_per_client_and_subresource(tmp_path: Path) -> None:
    async with APIServer() as server:
        shared = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kc"))
        controller = KubeClient(
            shared.api_client,
            user_agent="kube-controller-manager/v1.36.2 (linux/amd64) simulator",
            owns_session=False,
        )
        scheduler = KubeClient(
            shared.api_client,
            user_agent="kube-scheduler/v1.36.2 (linux/amd64) simulator",
            owns_session=False,
        )
        try:
            await controller.create(PODS, POD)
            with pytest.raises(ConflictError):
                await controller.create(PODS, POD)
            await controller.get(object_path(PODS, "p"))
            await controller.list("/api/v1/pods")
            await controller.patch(f"{object_path(PODS, 'p')}/status", {"status": {}})
            binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
            await scheduler.create(f"{object_path(PODS, 'p')}/binding", binding)
            await controller.delete(object_path(PODS, "p"))
            assert server.audit.write_counts() == {
                "kube-controller-manager": {"pods": 3, "pods/status": 1},
                "kube-scheduler": {"pods/binding": 1},
            }
            assert server.audit.refused_counts() == {"kube-controller-manager": {"pods": 1}}
            server.audit.reset()
            assert server.audit.write_counts() == {}
            assert server.audit.refused_counts() == {}
            await controller.list("/api/v1/pods")
            assert server.audit.write_counts() == {}
        finally:
            await controller.aclose()
            await shared.aclose()


async def test_each_server_counts_only_its_own_writes(tmp_path: Path) -> None:
    async with APIServer() as first, APIServer() as second:
        client = await KubeClient.from_kubeconfig(first.write_kubeconfig(tmp_path / "kc"))
        try:
            probe = KubeClient(client.api_client, user_agent="probe/1.0", owns_session=False)
            await probe.create(PODS, POD)
        finally:
            await client.aclose()
        assert first.audit.write_counts() == {"probe": {"pods": 1}}
        assert second.audit.write_counts() == {}


def test_client_names() -> None:
    assert client_name("kube-scheduler/v1.36.2 (linux/amd64) simulator") == "kube-scheduler"
    assert client_name("vgpu-dra-driver/controller") == "vgpu-dra-driver/controller"
    assert client_name("OpenAPI-Generator/37.0.2/python") == "OpenAPI-Generator"
    assert client_name("") == "unknown"
