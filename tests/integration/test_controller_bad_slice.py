"""A published device whose attributes CEL cannot read (a version that is no semantic
version): the controller builds every device's CEL view when its inventory changes, and
such a device must neither stop it nor go unreported; the decision that meets it names
the attribute in the claim's InvalidParameters event."""

from __future__ import annotations

import copy
from pathlib import Path

from controller_cluster import NAMESPACE, capacity, cluster, controller, request

from controller.controller import INVALID_PARAMETERS

SLICES = "/apis/resource.k8s.io/v1/resourceslices"


async def test_a_device_with_an_unreadable_attribute_is_reported_not_fatal(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", None)
        [published] = (await c.client.list(SLICES)).get("items") or []
        broken = copy.deepcopy(published)
        broken["metadata"] = {"name": "node-b-broken"}
        broken["spec"]["nodeName"] = "node-b"
        broken["spec"]["pool"]["name"] = "node-b"
        [device] = broken["spec"]["devices"]
        device["attributes"]["uuid"] = {"string": "GPU-node-b-0"}
        device["attributes"]["firmware"] = {"version": "not-a-version"}
        await c.client.create(SLICES, broken)
        async with controller(c.client) as running:
            await c.add_pod_with_claim("first", request(**capacity(memory="10Gi")))
            event = await c.wait_event("first-claim", INVALID_PARAMETERS)
            assert "firmware" in event["message"]
            assert not running.view.claims.store[f"{NAMESPACE}/first-claim"].get("status")
