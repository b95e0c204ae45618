"""The kubelet plugin with a MIG-mode card (mock backend), over real sockets and the API
emulator: a partition claim is prepared through the real plugin (its instance created),
and the partition stays published after rediscovery, where the instance now shows: only
an administrator's instances hide placements, the plugin's own are allocated ones."""

from __future__ import annotations

import uuid

from test_kubelet_plugin import DRIVER, NODE, Node, env_of, node, spec_of  # noqa: F401

from kubeletplugin.slices import build_resource_slices

MIG_GPUS = """
gpus:
  - uuid: GPU-00000000-0000-0000-0000-0000000000a1
    index: 0
    minor: 0
    productName: NVIDIA H100 80GB HBM3
    memory: 80Gi
    mig: {mode: enabled}
"""
PARTITION = "gpu-0-mig-3g-40gb-at-4"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def partition_result(device: str) -> dict:
    return {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}


async def published_devices(at: Node) -> set[str]:
    slices = await at.client.list(SLICES, field_selector=f"spec.nodeName={NODE}")
    return {d["name"] for s in slices["items"] for d in s["spec"].get("devices") or []}


async def test_a_prepared_partition_gets_its_instance_and_stays_published(
    node: Node,  # noqa: F811 (the fixture imported above)
) -> None:
    (node.root / "gpus.yaml").write_text(MIG_GPUS)
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        assert PARTITION in await published_devices(node)
        claim = await node.claim(f"part-{uuid.uuid4().hex[:6]}", [partition_result(PARTITION)])
        response = await node.kubelet.prepare(DRIVER, [claim])
        assert response.claims[claim.uid].error == ""
        assert env_of(spec_of(node, claim.uid))["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")

        await plugin.refresh_devices()
        (card,) = plugin.gpus
        assert [(i.profile, i.placement.start) for i in card.mig.instances] == [("3g.40gb", 4)]
        raw = build_resource_slices(NODE, "uid", plugin.gpus, plugin.slice_settings, 1)
        assert PARTITION not in {d["name"] for s in raw for d in s["spec"].get("devices") or []}

        await plugin.publisher.publish(plugin.publishable_gpus(), plugin.slice_settings)
        assert PARTITION in await published_devices(node)
