"""The cluster of the upgrade fixtures and the rolling-upgrade test: its nodes' mock cards,
the claims and pods they run, and the steps kube-scheduler and kubelet take for one pod
once the controller allocated its claim.

Shared by `tests/fixtures/upgrade/record_release.py`, which runs it on a release's own
code, and `tests/integration/test_rolling_upgrade.py`, which runs it on the working
tree's: so it uses only what 0.1.0 has (the API client, the informer, the kubelet
stand-in), like the recording script.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient, object_path
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA

GIB = 1 << 30
DRIVER = "vgpu.hami.io"
SHARED_CLASS = "nvidia.vgpu.hami.io"
MIG_CLASS = "mig.nvidia.vgpu.hami.io"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
PODS = "/api/v1/namespaces/{namespace}/pods"
ALL_CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


class PodStepError(RuntimeError):
    """A pod could not be placed: its claim's prepare (or unprepare) failed."""


def gpu_uuid(node_number: int, index: int) -> str:
    return f"GPU-0000000{node_number:x}-0000-4000-8000-{index:012d}"


def shared_gpus(node_number: int) -> dict[str, Any]:
    """A mock GPU file: two 80 GiB A100s on one NUMA node, shared."""
    return {
        "gpus": [
            {
                "uuid": gpu_uuid(node_number, index),
                "index": index,
                "productName": "NVIDIA A100-SXM4-80GB",
                "memory": 80 * GIB,
                "numa": 0,
                "pciBusID": f"0000:{0x10 + index:02x}:00.0",
            }
            for index in range(2)
        ]
    }


def mig_gpus(node_number: int) -> dict[str, Any]:
    """A mock GPU file: one H100 80GB in MIG mode, no instance yet."""
    card = {
        "uuid": gpu_uuid(node_number, 0),
        "index": 0,
        "productName": "NVIDIA H100 80GB HBM3",
        "memory": 80 * GIB,
        "numa": 0,
        "pciBusID": "0000:10:00.0",
        "mig": {"mode": "enabled"},
    }
    return {"gpus": [card]}


def share(memory: str, cores: str, count: int = 1) -> dict[str, Any]:
    """A request for `count` shares sized by capacity requests."""
    exactly: dict[str, Any] = {
        "deviceClassName": SHARED_CLASS,
        "capacity": {"requests": {"memory": memory, "cores": cores}},
    }
    if count != 1:
        exactly["count"] = count
    return {"name": "gpu", "exactly": exactly}


def share_by_config(**parameters: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """A request for one share and the claim config (`VGPUConfig`) that sizes it."""
    request = {"name": "gpu", "exactly": {"deviceClassName": SHARED_CLASS}}
    config = {
        "requests": ["gpu"],
        "opaque": {
            "driver": DRIVER,
            "parameters": {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "VGPUConfig", **parameters},
        },
    }
    return request, config


def partition(profile: str) -> dict[str, Any]:
    """A request for one MIG partition of the profile."""
    expression = f'device.attributes["{DRIVER}"].profile == "{profile}"'
    return {
        "name": "gpu",
        "exactly": {
            "deviceClassName": MIG_CLASS,
            "selectors": [{"cel": {"expression": expression}}],
        },
    }


def claim_body(
    name: str,
    namespace: str,
    requests: Sequence[Mapping[str, Any]],
    config: Sequence[Mapping[str, Any]] | None = None,
    constraints: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if config:
        devices["config"] = list(config)
    if constraints:
        devices["constraints"] = list(constraints)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


def pod_body(name: str, namespace: str, claim: str) -> dict[str, Any]:
    """A pod whose one container uses the claim."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [
                {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
            ],
        },
    }


def node_of(claim: Mapping[str, Any]) -> str:
    """The node this driver's allocation names (its nodeSelector's one matchFields)."""
    term = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]
    return str(term["matchFields"][0]["values"][0])


def claim_ref(claim: Mapping[str, Any]) -> ClaimRef:
    metadata = claim["metadata"]
    return ClaimRef(metadata["namespace"], metadata["uid"], metadata["name"])


async def prepare(kubelet: KubeletDRA, claim: Mapping[str, Any]) -> list[dict[str, Any]]:
    """NodePrepareResources for the claim; the devices kubelet got, as plain data."""
    reference = claim_ref(claim)
    entry = (await kubelet.prepare(DRIVER, [reference])).claims[reference.uid]
    if entry.error:
        raise PodStepError(f"prepare of {reference.namespace}/{reference.name}: {entry.error}")
    return [
        {
            "request_names": list(device.request_names),
            "pool_name": device.pool_name,
            "device_name": device.device_name,
            "cdi_device_ids": list(device.cdi_device_ids),
        }
        for device in entry.devices
    ]


async def unprepare(kubelet: KubeletDRA, claim: Mapping[str, Any]) -> None:
    reference = claim_ref(claim)
    entry = (await kubelet.unprepare(DRIVER, [reference])).claims[reference.uid]
    if entry.error:
        raise PodStepError(f"unprepare of {reference.namespace}/{reference.name}: {entry.error}")


async def wait_allocated(
    claims: Informer, namespace: str, name: str, limit_s: float
) -> dict[str, Any]:
    """The claim once it has an allocation (`claims` watches every ResourceClaim)."""
    key = f"{namespace}/{name}"

    def allocated(store: Mapping[str, Mapping[str, Any]]) -> bool:
        return bool(((store.get(key) or {}).get("status") or {}).get("allocation"))

    async with asyncio.timeout(limit_s):
        await claims.wait_for(allocated)
    return claims.store[key]


async def run_pod(
    admin: KubeClient,
    claims: Informer,
    kubelets: Mapping[str, KubeletDRA],
    pod: Mapping[str, Any],
    claim: Mapping[str, Any],
    limit_s: float,
) -> tuple[str, list[dict[str, Any]]]:
    """Once the controller allocated the pod's claim: reserve it for the pod and bind the
    pod (kube-scheduler's PreBind and Bind), prepare it on the node and report the pod
    Running (kubelet). The node and the devices NodePrepareResources answered."""
    namespace, name = claim["metadata"]["namespace"], claim["metadata"]["name"]
    node = node_of(await wait_allocated(claims, namespace, name, limit_s))
    pod_name = pod["metadata"]["name"]
    reserved = {"resource": "pods", "name": pod_name, "uid": pod["metadata"]["uid"]}
    claim = await admin.patch(
        object_path(CLAIMS.format(namespace=namespace), name) + "/status",
        {"status": {"reservedFor": [reserved]}},
    )
    pods = PODS.format(namespace=namespace)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await admin.create(object_path(pods, pod_name) + "/binding", binding)
    devices = await prepare(kubelets[node], claim)
    await admin.patch(object_path(pods, pod_name) + "/status", {"status": {"phase": "Running"}})
    return node, devices
