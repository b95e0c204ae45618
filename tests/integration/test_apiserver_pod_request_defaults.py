"""A pod's requests default from its limits, as kube-apiserver's SetDefaults_Pod does when
it decodes a Pod: every limit with no request of the same name becomes that request,
in containers and init containers; requests given are kept; no limits, no requests."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient

IMAGE = "busybox:1.36"


def _container(name: str, **resources: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": IMAGE, "resources": resources}


def _read_back(api: ApiClient, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(ns, body)
    name = body["metadata"]["name"]
    return dict(json.loads(core.read_namespaced_pod(name, ns, _preload_content=False).data))


def test_limits_become_the_requests_they_lack(api: ApiClient, ns: str) -> None:
    body = {
        "metadata": {"name": "limited"},
        "spec": {
            "initContainers": [_container("setup", limits={"cpu": "2", "memory": "1Gi"})],
            "containers": [
                _container("gpu", limits={"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"}),
                _container(
                    "partial",
                    limits={"cpu": "2", "memory": "2Gi"},
                    requests={"cpu": "500m"},
                ),
                _container("plain"),
            ],
        },
    }

    spec = _read_back(api, ns, body)["spec"]

    assert spec["initContainers"][0]["resources"]["requests"] == {"cpu": "2", "memory": "1Gi"}
    gpu, partial, plain = (c["resources"] for c in spec["containers"])
    assert gpu["requests"] == {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "3k"}
    assert partial["requests"] == {"cpu": "500m", "memory": "2Gi"}
    assert partial["limits"] == {"cpu": "2", "memory": "2Gi"}
    assert plain == {}


def test_the_typed_client_reads_the_defaulted_requests(api: ApiClient, ns: str) -> None:
    """What a real client gets back from create: the same defaulted object."""
    body = client.V1Pod(
        metadata=client.V1ObjectMeta(name="typed"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main",
                    image=IMAGE,
                    resources=client.V1ResourceRequirements(limits={"nvidia.com/gpu": "2"}),
                )
            ]
        ),
    )

    created = client.CoreV1Api(api).create_namespaced_pod(ns, body)

    assert created.spec.containers[0].resources.requests == {"nvidia.com/gpu": "2"}
