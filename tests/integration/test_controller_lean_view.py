"""What the controller keeps and rebuilds at scale, checked small: its stores hold objects
without managedFields (an informer without the controller's transform keeps them), the
engine it brings in line in place after a pod ended equals one built from the claims,
and the metrics snapshot is built again only after the view changed."""

from __future__ import annotations

from pathlib import Path

from controller_cluster import NAMESPACE, capacity, cluster, controller, request

from controller.inventory import quota_ledger, usage_by_node
from controller.mixed_usage import add_holds
from dra_driver.engine.engine import Engine

FIRST = f"{NAMESPACE}/first-claim"
CLAIMS_PATH = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"
MANAGED = {
    "manager": "tests",
    "operation": "Update",
    "apiVersion": "v1",
    "time": "2026-01-01T00:00:00Z",
    "fieldsType": "FieldsV1",
    "fieldsV1": {"f:metadata": {"f:labels": {}}},
}


async def test_the_view_keeps_no_managed_fields_and_syncs_the_engine(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        await c.add_pod_with_claim("first", request(**capacity(memory="10Gi", cores="30")))
        await c.add_pod_with_claim("second", request(**capacity(memory="20Gi", cores="20")))
        for path in (f"{CLAIMS_PATH}/first-claim", f"{PODS_PATH}/first"):
            await c.client.patch(path, {"metadata": {"managedFields": [MANAGED]}})
        async with controller(c.client) as running:
            view = running.view
            await c.wait_allocated("first-claim", "second-claim")
            await view.claims.wait_for(
                lambda store: all(
                    (store.get(f"{NAMESPACE}/{n}-claim") or {}).get("status", {}).get("allocation")
                    for n in ("first", "second")
                )
            )
            assert c.claim("first-claim")["metadata"].get("managedFields") == [MANAGED]
            assert c.pods.store[f"{NAMESPACE}/first"]["metadata"].get("managedFields")
            kept = [*view.claims.store.values(), *view.pods.store.values()]
            assert kept and all("managedFields" not in o["metadata"] for o in kept)

            running.publish_view()
            published = running._snapshot
            running.publish_view()
            assert running._snapshot is published

            engine = view.engine
            await c.client.delete(f"{PODS_PATH}/first", gracePeriodSeconds=0)
            await view.pods.wait_for(lambda store: f"{NAMESPACE}/first" not in store)
            view.refresh()
            claims = view.effective_claims()
            assert FIRST not in {
                f"{cl['metadata']['namespace']}/{cl['metadata']['name']}" for cl in claims
            }
            rebuilt = Engine(
                view.inventory.nodes.values(),
                add_holds(usage_by_node(claims, view.inventory), view.legacy_holds.values()),
                quota=quota_ledger(
                    view.quotas.store.values(), claims, view.inventory, view.vendors
                ),
            )
            assert view.engine is engine
            for name in view.inventory.nodes:
                ours = [(s.used, s.memory, s.cores, s.tags) for s in engine.node_state(name).slots]
                fresh = [
                    (s.used, s.memory, s.cores, s.tags) for s in rebuilt.node_state(name).slots
                ]
                assert ours == fresh
            assert sum(s.used for s in engine.node_state("node-a").slots) == 1

            running.publish_view()
            assert running._snapshot is not published
            assert [share.pod for share in running._snapshot.shares] == ["second"]
