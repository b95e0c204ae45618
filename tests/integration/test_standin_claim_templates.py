"""ClaimTemplateController against the API emulator: one claim per template entry, made
from the informers' view, also when the template comes after the pod."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.standins.claim_templates import POD_CLAIM_NAME_ANNOTATION, ClaimTemplateController

RESOURCE = "/apis/resource.k8s.io/v1/namespaces/default"
PODS = "/api/v1/namespaces/default/pods"
TEMPLATE = {
    "metadata": {"name": "gpu"},
    "spec": {
        "metadata": {"labels": {"app": "infer"}},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
    },
}


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "i", "resources": {"claims": [{"name": "g"}]}}
            ],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpu"}],
        },
    }


async def claim_statuses(client: KubeClient, names: set[str]) -> dict[str, list[Any]]:
    """Each pod's resourceClaimStatuses once every one of `names` has some."""
    seen: dict[str, list[Any]] = {}
    async for event in client.watch(PODS, timeoutSeconds=30):
        statuses = (event["object"].get("status") or {}).get("resourceClaimStatuses")
        if statuses:
            seen[event["object"]["metadata"]["name"]] = statuses
        if set(seen) >= names:
            return seen
    raise AssertionError(f"no claim statuses for {sorted(names - set(seen))}")


async def test_each_template_entry_gets_one_claim(tmp_path: Path) -> None:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kc"))
        try:
            async with ClaimTemplateController(client, workers=4):
                early = await client.create(PODS, pod("early"))
                await client.create(f"{RESOURCE}/resourceclaimtemplates", TEMPLATE)
                names = {f"p{index}" for index in range(20)}
                await asyncio.gather(*(client.create(PODS, pod(name)) for name in names))
                statuses = await claim_statuses(client, {*names, "early"})
            claims = (await client.list(f"{RESOURCE}/resourceclaims"))["items"]
        finally:
            await client.aclose()
    by_owner = {c["metadata"]["ownerReferences"][0]["name"]: c for c in claims}
    assert len(claims) == len(by_owner) == 21
    for name, [status] in statuses.items():
        assert status["name"] == "g"
        assert status["resourceClaimName"] == by_owner[name]["metadata"]["name"]
    made = by_owner["early"]
    assert made["metadata"]["ownerReferences"][0]["uid"] == early["metadata"]["uid"]
    assert made["metadata"]["annotations"][POD_CLAIM_NAME_ANNOTATION] == "g"
    assert made["metadata"]["labels"] == {"app": "infer"}
    assert server.audit.write_counts()["kube-controller-manager"] == {
        "resourceclaims": 21,
        "pods/status": 21,
    }
