"""KubeClient.for_component: requests carry `vgpu-dra-driver/<component>`, which the API
emulator records per component as RBAC verbs and (sub)resources for the RBAC audit."""

from __future__ import annotations

from pathlib import Path

from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.apiserver.audit import RECORDED, ApiCall


async def test_each_call_is_recorded_under_its_component_with_rbac_verbs(tmp_path: Path) -> None:
    async with APIServer() as server:
        shared = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kc"))
        probe = shared.for_component("ua-probe")
        RECORDED.pop("ua-probe", None)
        try:
            pods = "/api/v1/namespaces/default/pods"
            pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
            await probe.create(pods, pod)
            await probe.get(object_path(pods, "p"))
            await probe.list("/api/v1/pods")
            async for _ in probe.watch("/api/v1/pods", timeout_seconds=0):
                pass
            await probe.patch(f"{object_path(pods, 'p')}/status", {"status": {"phase": "Pending"}})
            binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
            await probe.create(f"{object_path(pods, 'p')}/binding", binding)
            await probe.delete(object_path(pods, "p"))
            # The same session, unnamed: not recorded; closing the named client keeps it open.
            await probe.aclose()
            before = {component: set(calls) for component, calls in RECORDED.items()}
            await shared.list("/api/v1/nodes")
            assert {component: set(calls) for component, calls in RECORDED.items()} == before
        finally:
            await shared.aclose()
    assert RECORDED.pop("ua-probe") == {
        ApiCall("create", "", "pods", ""),
        ApiCall("get", "", "pods", ""),
        ApiCall("list", "", "pods", ""),
        ApiCall("watch", "", "pods", ""),
        ApiCall("patch", "", "pods", "status"),
        ApiCall("create", "", "pods", "binding"),
        ApiCall("delete", "", "pods", ""),
    }


def test_rbac_resource_names_the_subresource() -> None:
    assert ApiCall("create", "", "pods", "binding").rbac_resource == "pods/binding"
    assert ApiCall("get", "", "pods", "").rbac_resource == "pods"
