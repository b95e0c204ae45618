"""Admission decisions remembered by what a policy reads (policy_memo) stay the decisions:
requests that differ only where the policy does not look share one, a change where it
looks or of the policy itself is decided afresh."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.kube.rest import ApiError, KubeClient
from simulator.apiserver import APIServer

ADMISSION = "/apis/admissionregistration.k8s.io/v1"
MAPS = "/api/v1/namespaces/default/configmaps"


def policy(forbidden: str) -> dict[str, object]:
    return {
        "metadata": {"name": "mode"},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["configmaps"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"!has(object.data) || object.data.mode != '{forbidden}'",
                    "messageExpression": "'mode ' + object.data.mode + ' is not allowed'",
                }
            ],
        },
    }


BINDING = {
    "metadata": {"name": "mode"},
    "spec": {"policyName": "mode", "validationActions": ["Deny"]},
}


async def test_decisions_follow_what_the_policy_reads(tmp_path: Path) -> None:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kc"))
        try:
            stored = await client.create(f"{ADMISSION}/validatingadmissionpolicies", policy("x"))
            await client.create(f"{ADMISSION}/validatingadmissionpolicybindings", BINDING)
            for name in ("a", "b"):
                with pytest.raises(ApiError, match="mode x is not allowed"):
                    await client.create(MAPS, {"metadata": {"name": name}, "data": {"mode": "x"}})
            await client.create(MAPS, {"metadata": {"name": "c"}, "data": {"mode": "y"}})
            await client.create(MAPS, {"metadata": {"name": "d"}})
            changed = {**policy("y"), "metadata": stored["metadata"]}
            await client.replace(f"{ADMISSION}/validatingadmissionpolicies/mode", changed)
            await client.create(MAPS, {"metadata": {"name": "e"}, "data": {"mode": "x"}})
            with pytest.raises(ApiError, match="mode y is not allowed"):
                await client.create(MAPS, {"metadata": {"name": "f"}, "data": {"mode": "y"}})
        finally:
            await client.aclose()
