"""Prepare's second line behind admission: a claim reserved by a pod with a container
that could lift libvgpu's limits (privileged, CAP_SYS_ADMIN, a hostPath over the
vgpu dir, the lock dir or the preload list) is refused through the kubelet stand-in,
the error naming pod, container and field, and no CDI spec is written."""

from __future__ import annotations

from typing import Any

import pytest
from test_kubelet_plugin import DRIVER, NODE, Node, node, reserve, result

__all__ = ["node"]

SIDECARS: dict[str, tuple[dict[str, Any], list[dict[str, Any]], str]] = {
    "privileged": (
        {"securityContext": {"privileged": True}},
        [],
        "spec.containers[1].securityContext.privileged",
    ),
    "CAP_SYS_ADMIN": (
        {"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}},
        [],
        "spec.containers[1].securityContext.capabilities.add",
    ),
    "hostPath over the lock dir": (
        {"volumeMounts": [{"name": "locks", "mountPath": "/locks"}]},
        [{"name": "locks", "hostPath": {"path": "LOCK_DIR"}}],
        "spec.containers[1].volumeMounts[0]",
    ),
    "hostPath over the preload list": (
        {"volumeMounts": [{"name": "empty", "mountPath": "/etc/ld.so.preload"}]},
        [{"name": "empty", "hostPath": {"path": "/dev/null"}}],
        "spec.containers[1].volumeMounts[0]",
    ),
}


async def tampering_pod(node: Node, sidecar: dict[str, Any], volumes: list[dict]) -> dict:
    """`main` gets the claim; `side`, in the same pod, has no claim but could reach
    the shared regions or remount the preload list."""
    lock_dir = node.settings.libvgpu.lock_dir
    for volume in volumes:
        if volume["hostPath"]["path"] == "LOCK_DIR":
            volume["hostPath"]["path"] = lock_dir
    return await node.client.create(
        "/api/v1/namespaces/default/pods",
        {
            "metadata": {"name": "tamper"},
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}},
                    {"name": "side", "image": "busybox", **sidecar},
                ],
                "volumes": volumes,
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}],
            },
        },
    )


@pytest.mark.parametrize("case", SIDECARS, ids=list(SIDECARS))
async def test_a_pod_that_could_lift_the_limits_is_not_prepared(node: Node, case: str) -> None:
    sidecar, volumes, field = SIDECARS[case]
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("shared", [result("gpu-0", "2Gi")])
        pod = await tampering_pod(node, sidecar, volumes)
        await reserve(node, claim, pod)
        response = await node.kubelet.prepare(DRIVER, [claim])
        specs = list(node.cdi_dir.glob("*.json"))

    error = response.claims[claim.uid].error
    assert f"pod default/tamper container side {field}: " in error
    assert specs == []


async def test_an_ordinary_sidecar_does_not_stop_prepare(node: Node) -> None:
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("shared", [result("gpu-0", "2Gi")])
        pod = await tampering_pod(node, {"securityContext": {"privileged": False}}, [])
        await reserve(node, claim, pod)
        response = await node.kubelet.prepare(DRIVER, [claim])

    assert response.claims[claim.uid].error == ""
