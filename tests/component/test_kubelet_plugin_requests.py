"""Claims with several requests, over the plugin's real socket: each container gets what
kubelet hands it for the requests it names, applied the way a runtime applies CDI."""

from __future__ import annotations

from cdi_applier import apply_devices
from test_kubelet_plugin import CLAIMS, DRIVER, NODE, Node, allocation, node, reserve, result

from cdi.resolve import ResolvedEdits
from dra_driver.kube.rest import object_path
from dra_driver.objects.pod_claims import container_claim_entries
from simulator.standins.kubelet_dra import ClaimRef
from simulator.standins.kubelet_pods import container_cdi_ids

__all__ = ["node"]

GPU_A = "GPU-00000000-0000-0000-0000-00000000000a"
GPU_B = "GPU-00000000-0000-0000-0000-00000000000b"


async def claim_with_requests(node: Node, name: str, requests: list[dict], results: list[dict]):
    created = await node.client.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {"devices": {"requests": requests}},
        },
    )
    await node.client.patch(
        object_path(CLAIMS, name) + "/status", {"status": {"allocation": allocation(results)}}
    )
    return ClaimRef("default", created["metadata"]["uid"], name)


def exactly(name: str) -> dict:
    return {"name": name, "exactly": {"deviceClassName": "nvidia.vgpu.hami.io"}}


async def pod_naming(node: Node, name: str, claim: str, containers: dict[str, list[str]]) -> dict:
    """A pod whose containers name requests of one claim (container -> requests; [] = all)."""
    return await node.client.create(
        "/api/v1/namespaces/default/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {
                        "name": container,
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {
                            "claims": [{"name": "gpu", "request": r} for r in requests]
                            or [{"name": "gpu"}]
                        },
                    }
                    for container, requests in containers.items()
                ],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            },
        },
    )


async def prepare_pod(node: Node, claim: ClaimRef, pod: dict) -> dict[str, ResolvedEdits]:
    """Prepare the claim for the pod and start each container as kubelet and a runtime would."""
    await reserve(node, claim, pod)
    entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
    assert entry.error == ""
    return {
        container: apply_devices(
            [i for _, request in named for i in container_cdi_ids(entry.devices, request)],
            [node.cdi_dir],
        )
        for container, named in container_claim_entries(pod).items()
    }


def gpu_limits(edits: ResolvedEdits) -> dict[str, str]:
    """The limits that limit: without the pins of ordinals and limits the share leaves free."""
    return {
        key: value
        for key, value in edits.env.items()
        if ("_LIMIT_" in key and value != "0") or key == "NVIDIA_VISIBLE_DEVICES"
    }


async def test_each_container_naming_one_request_gets_only_its_gpu_and_limit(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await claim_with_requests(
            node,
            "split",
            [exactly("a"), exactly("b")],
            [result("gpu-0", "1Gi", "10", request="a"), result("gpu-1", "2Gi", "20", request="b")],
        )
        pod = await pod_naming(node, "p", "split", {"only-a": ["a"], "only-b": ["b"]})
        started = await prepare_pod(node, claim, pod)
        assert gpu_limits(started["only-a"]) == {
            "NVIDIA_VISIBLE_DEVICES": GPU_A,
            "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
            "CUDA_DEVICE_SM_LIMIT_0": "10",
        }
        assert gpu_limits(started["only-b"]) == {
            "NVIDIA_VISIBLE_DEVICES": GPU_B,
            "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
            "CUDA_DEVICE_SM_LIMIT_0": "20",
        }
        caches = [started[c].env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] for c in ("only-a", "only-b")]
        assert caches[0] != caches[1]
        assert all(c.startswith(f"{node.root}/vgpu/claims/{claim.uid}/") for c in caches)


async def test_two_requests_on_one_gpu_keep_their_own_limits(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await claim_with_requests(
            node,
            "same-gpu",
            [exactly("a"), exactly("b")],
            [result("gpu-0", "1Gi", request="a"), result("gpu-0", "2Gi", request="b")],
        )
        pod = await pod_naming(node, "p", "same-gpu", {"only-a": ["a"], "only-b": ["b"]})
        started = await prepare_pod(node, claim, pod)
        assert gpu_limits(started["only-a"]) == {
            "NVIDIA_VISIBLE_DEVICES": GPU_A,
            "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
        }
        assert gpu_limits(started["only-b"]) == {
            "NVIDIA_VISIBLE_DEVICES": GPU_A,
            "CUDA_DEVICE_MEMORY_LIMIT_0": "2048m",
        }


async def test_containers_naming_the_whole_claim_get_every_gpu_numbered_in_order(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await claim_with_requests(
            node,
            "whole",
            [exactly("a"), exactly("b")],
            [result("gpu-1", "2Gi", request="a"), result("gpu-0", "1Gi", request="b")],
        )
        pod = await pod_naming(node, "p", "whole", {"x": [], "y": ["a", "b"]})
        started = await prepare_pod(node, claim, pod)
        for container in ("x", "y"):
            assert gpu_limits(started[container]) == {
                "NVIDIA_VISIBLE_DEVICES": f"{GPU_A},{GPU_B}",
                "CUDA_DEVICE_MEMORY_LIMIT_0": "1024m",
                "CUDA_DEVICE_MEMORY_LIMIT_1": "2048m",
            }


async def test_first_available_results_go_to_containers_naming_the_parent_request(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await claim_with_requests(
            node,
            "prioritized",
            [
                {
                    "name": "a",
                    "firstAvailable": [
                        {"name": "big", "deviceClassName": "nvidia.vgpu.hami.io"},
                        {"name": "small", "deviceClassName": "nvidia.vgpu.hami.io"},
                    ],
                },
                exactly("b"),
            ],
            [result("gpu-0", "4Gi", request="a/big"), result("gpu-1", "2Gi", request="b")],
        )
        pod = await pod_naming(node, "p", "prioritized", {"only-a": ["a"], "only-b": ["b"]})
        started = await prepare_pod(node, claim, pod)
        entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
        assert [list(d.request_names) for d in entry.devices] == [["a"], ["b"]]
        assert gpu_limits(started["only-a"]) == {
            "NVIDIA_VISIBLE_DEVICES": GPU_A,
            "CUDA_DEVICE_MEMORY_LIMIT_0": "4096m",
        }


async def test_a_whole_claim_container_beside_one_naming_a_request_is_refused(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await claim_with_requests(
            node,
            "mixed",
            [exactly("a"), exactly("b")],
            [result("gpu-0", "1Gi", request="a"), result("gpu-1", "2Gi", request="b")],
        )
        pod = await pod_naming(node, "p", "mixed", {"whole": [], "only-a": ["a"]})
        await reserve(node, claim, pod)
        error = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error
        assert "pod default/p container only-a" in error
        assert "(request a) and pod default/p container whole (the whole claim)" in error
        assert "name the whole claim in every container" in error
        assert list(node.cdi_dir.glob("*.json")) == []
