"""The allocation-gate webhook over HTTPS, called by the admission stand-in as the API
server would, reading claims and templates from the emulator: a pod of our class is
gated, one of another class is not, one whose template is missing is not (fail open)."""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from controller.allocation_gate import ALLOCATION_GATE
from controller.gate_webhook import GateWebhookServer
from controller.legacy.caller_auth import ALLOCATION_GATE_PATH
from controller.legacy.config import CallerAuthSettings
from controller.legacy.server import ServeSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.tls.bundle import issue_bundle
from simulator.apiserver import APIServer
from simulator.standins.admission import AdmissionClient, AdmissionOutcome, WebhookConfig

NS = "default"
OURS = "nvidia.vgpu.hami.io"
USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
RESOURCE = f"/apis/resource.k8s.io/v1/namespaces/{NS}"


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            for name, device_class in (("ours", OURS), ("theirs", "gpu.example.com")):
                await client.create(
                    f"{RESOURCE}/resourceclaimtemplates",
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaimTemplate",
                        "metadata": {"name": name, "namespace": NS},
                        "spec": {
                            "spec": {
                                "devices": {
                                    "requests": [
                                        {
                                            "name": "gpu",
                                            "exactly": {"deviceClassName": device_class},
                                        }
                                    ]
                                }
                            }
                        },
                    },
                )
            yield client
        finally:
            await client.aclose()


def pod(template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "job", "namespace": NS},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


async def admit(client: KubeClient, tmp_path: Path, template: str) -> AdmissionOutcome:
    bundle = issue_bundle(("127.0.0.1",), dt.datetime.now(dt.UTC), dt.timedelta(hours=1))
    for name, data in bundle.secret_data().items():
        (tmp_path / name).write_bytes(data)
    serve = ServeSettings(port=0, tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key")
    async with GateWebhookServer(
        client, [OURS], serve, CallerAuthSettings(enabled=False)
    ) as server:
        url = f"https://127.0.0.1:{server.port}{ALLOCATION_GATE_PATH}"
        config = WebhookConfig(url=url, failure_policy="Ignore", ca_file=tmp_path / "ca.crt")
        async with AdmissionClient(config) as apiserver:
            review = apiserver.build_review(pod(template), namespace=NS, user_info=USER)
            return await apiserver.review(review)


async def test_a_pod_with_a_template_of_our_class_is_gated(
    client: KubeClient, tmp_path: Path
) -> None:
    outcome = await admit(client, tmp_path, "ours")
    assert outcome.allowed and outcome.object is not None
    assert outcome.object["spec"]["schedulingGates"] == [{"name": ALLOCATION_GATE}]


@pytest.mark.parametrize("template", ["theirs", "missing"])
async def test_a_pod_of_another_class_or_an_unreadable_template_is_not_gated(
    client: KubeClient, tmp_path: Path, template: str
) -> None:
    outcome = await admit(client, tmp_path, template)
    assert outcome.allowed and outcome.object is not None and outcome.patch is None
    assert "schedulingGates" not in outcome.object["spec"]
