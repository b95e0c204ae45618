"""A claim pinned by VGPUConfig, allocated by kube-scheduler (which cannot read it),
prepared over the plugin's real socket: prepare refuses the GPU the pin excludes.

Where the scheduler-allocated overlay's admission policy is missing, this is what
stands between a `useUUIDs` claim and a container on another GPU."""

from __future__ import annotations

from kubernetes import config
from test_kubelet_plugin import CLAIMS, DRIVER, NODE, Node, claim_manifest, node

from dra_driver.kube.rest import object_path
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings
from simulator.standins.kubelet_dra import ClaimRef

__all__ = ["node"]

GPU_B = "GPU-00000000-0000-0000-0000-00000000000b"
PINNED = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig", "useUUIDs": [GPU_B]}


async def test_a_pinned_claim_kube_scheduler_put_on_another_gpu_is_not_prepared(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        await node.client.create(
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "metadata": {"name": "nvidia.vgpu.hami.io"},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            },
        )
        manifest = claim_manifest("pinned")
        manifest["spec"]["devices"]["config"] = [
            {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": PINNED}}
        ]
        created = await node.client.create(CLAIMS, manifest)
        await node.client.patch(
            f"/api/v1/nodes/{NODE}/status",
            {"status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}},
        )
        await node.client.create(
            "/api/v1/namespaces/default/pods",
            {
                "metadata": {"name": "pinned"},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "pinned"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        )
        with config.new_client_from_config(config_file=str(node.root / "kubeconfig")) as api:
            scheduler = DRAScheduler(api, settings=SchedulerSettings(allocate=True))
            outcome = await scheduler.schedule("default", "pinned")
        assert outcome.node == NODE, outcome
        allocated = await node.client.get(object_path(CLAIMS, "pinned"))
        (given,) = allocated["status"]["allocation"]["devices"]["results"]
        assert given["device"] == "gpu-0", "kube-scheduler took the first GPU, not the pinned one"
        claim = ClaimRef("default", created["metadata"]["uid"], "pinned")
        entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
        assert entry.error.startswith(
            "status.allocation.devices.config[0].opaque.parameters.useUUIDs: claim default/pinned "
            f"({claim.uid}): device gpu-0 of request 'gpu': "
            f"GPU-00000000-0000-0000-0000-00000000000a is not one of {GPU_B}; the allocation "
            "breaks the filter, so it is not prepared (kube-scheduler reads no VGPUConfig"
        ), entry.error
        assert not entry.devices
        assert not list(node.cdi_dir.glob(f"*{claim.uid}*"))
