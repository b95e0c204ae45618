"""kube-controller-manager's ResourceClaim controller makes a pod's template claims whether
or not the pod is gated (syncPod has no gate check, reference §10), and reserves none."""

from __future__ import annotations

from pathlib import Path

from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.standins.claim_templates import ClaimTemplateController

RESOURCE = "/apis/resource.k8s.io/v1/namespaces/default"
PODS = "/api/v1/namespaces/default/pods"
TEMPLATE = {
    "metadata": {"name": "gpu"},
    "spec": {
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}}
    },
}
GATED_POD = {
    "metadata": {"name": "held"},
    "spec": {
        "schedulingGates": [{"name": "kueue.x-k8s.io/admission"}],
        "containers": [{"name": "main", "image": "i", "resources": {"claims": [{"name": "g"}]}}],
        "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpu"}],
    },
}


async def test_a_gated_pod_gets_its_template_claim_unreserved(tmp_path: Path) -> None:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kc"))
        try:
            async with ClaimTemplateController(client, workers=1):
                await client.create(f"{RESOURCE}/resourceclaimtemplates", TEMPLATE)
                await client.create(PODS, GATED_POD)
                async for event in client.watch(PODS, timeoutSeconds=30):
                    statuses = (event["object"].get("status") or {}).get("resourceClaimStatuses")
                    if statuses:
                        break
                else:
                    raise AssertionError("the gated pod got no claim status")
            [claim] = (await client.list(f"{RESOURCE}/resourceclaims"))["items"]
            pod = await client.get(f"{PODS}/held")
        finally:
            await client.aclose()
    assert statuses == [{"name": "g", "resourceClaimName": claim["metadata"]["name"]}]
    assert claim["metadata"]["ownerReferences"][0]["name"] == "held"
    assert not (claim.get("status") or {}).get("reservedFor")
    assert pod["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
