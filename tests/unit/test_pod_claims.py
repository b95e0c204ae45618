"""A pod's claim entries per container, in the order kubelet hands their CDI devices over."""

from __future__ import annotations

from dra_driver.objects.pod_claims import container_claim_entries


def test_entries_follow_the_pods_claims_then_the_containers_and_keep_requests():
    pod = {
        "spec": {
            "resourceClaims": [
                {"name": "first", "resourceClaimName": "claim-1"},
                {"name": "second", "resourceClaimTemplateName": "t"},
                {"name": "pending", "resourceClaimTemplateName": "t"},
            ],
            "initContainers": [{"name": "init", "resources": {"claims": [{"name": "first"}]}}],
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "claims": [
                            {"name": "second", "request": "b"},
                            {"name": "first", "request": "a"},
                            {"name": "pending"},
                            {"name": "first", "request": "c"},
                        ]
                    },
                },
                {"name": "sidecar"},
            ],
        },
        "status": {"resourceClaimStatuses": [{"name": "second", "resourceClaimName": "claim-2"}]},
    }
    assert container_claim_entries(pod) == {
        "init": (("claim-1", ""),),
        "main": (("claim-1", "a"), ("claim-1", "c"), ("claim-2", "b")),
    }
