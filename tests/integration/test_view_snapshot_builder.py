"""The metrics snapshot built over and over by one SnapshotBuilder: a claim whose object did
not change keeps its share records, only devices holding something have a usage record, and
every snapshot equals one built afresh."""

from __future__ import annotations

from pathlib import Path

from controller_cluster import NAMESPACE, capacity, cluster, controller, request

from controller.view_snapshot import SnapshotBuilder, build_view_snapshot
from dra_driver.engine.model import DeviceUsage


async def test_unchanged_claims_keep_their_records_and_changes_show(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        await c.add_pod_with_claim("first", request(**capacity(memory="10Gi", cores="30")))
        async with controller(c.client) as running:
            view = running.view
            await c.wait_allocated("first-claim")
            # The watch's copy of the allocated claim must be in the view before the first
            # build: a later echo of the same write is a new object, rightly read afresh.
            stored = await c.client.get(
                f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/first-claim"
            )
            version = stored["metadata"]["resourceVersion"]
            await view.claims.wait_for(
                lambda store: (
                    (store.get(f"{NAMESPACE}/first-claim") or {})
                    .get("metadata", {})
                    .get("resourceVersion")
                    == version
                )
            )
            builder = SnapshotBuilder()
            before = builder.build(view)
            assert [share.pod for share in before.shares] == ["first"]
            assert before.shares == build_view_snapshot(view).shares
            # Of node-a's two devices only the one holding the share has a usage record.
            assert list(before.usage) == ["node-a"]
            assert list(before.usage["node-a"].values()) == [DeviceUsage(1, 10 * 1024, 30)]

            await c.add_pod_with_claim("second", request(**capacity(memory="20Gi", cores="20")))
            await c.wait_allocated("second-claim")
            await view.claims.wait_for(lambda store: f"{NAMESPACE}/second-claim" in store)
            grown = builder.build(view)
            assert sorted(share.pod for share in grown.shares) == ["first", "second"]
            assert set(grown.shares) == set(build_view_snapshot(view).shares)
            kept = next(share for share in grown.shares if share.pod == "first")
            assert kept is before.shares[0]

            await c.client.delete(
                f"/api/v1/namespaces/{NAMESPACE}/pods/first", gracePeriodSeconds=0
            )
            await c.client.delete(
                f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/first-claim"
            )
            await view.claims.wait_for(lambda store: f"{NAMESPACE}/first-claim" not in store)
            shrunk = builder.build(view)
    assert [share.pod for share in shrunk.shares] == ["second"]
    assert shrunk.shares == build_view_snapshot(view).shares
    assert shrunk.shares[0].memory_bytes == 20 * 2**30
