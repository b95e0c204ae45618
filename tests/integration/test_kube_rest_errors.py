"""A request that gets no answer says which request it was (not a bare `TimeoutError()`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.kube.rest import ApiError, KubeClient, TransientApiError
from simulator.apiserver import APIServer


async def test_a_refused_connection_names_the_method_and_path(tmp_path: Path):
    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        with pytest.raises(TransientApiError) as raised:
            await client.get("/api/v1/nodes/sim-node-7")
    finally:
        await client.aclose()
    error = raised.value
    assert error.reason == "ConnectionError"
    assert error.request == "GET /api/v1/nodes/sim-node-7"
    assert str(error).startswith("ConnectionError: GET /api/v1/nodes/sim-node-7: ")
    assert "TimeoutError()" not in str(error)


async def test_a_refused_request_keeps_its_method_and_path(tmp_path: Path):
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            server.faults.fail("/configmaps/held$", verb="PUT", status=403, message="no")
            with pytest.raises(ApiError) as raised:
                await client.replace(
                    "/api/v1/namespaces/default/configmaps/held",
                    {"metadata": {"name": "held"}},
                )
        finally:
            await client.aclose()
    assert raised.value.request == "PUT /api/v1/namespaces/default/configmaps/held"
    assert str(raised.value).startswith("403 ")
