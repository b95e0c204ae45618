"""`dra-driver controller` serves the allocation-gate webhook when given its TLS flags, on
every replica: the API server sends admission to any endpoint of the Service, so a
replica that does not lead (here: one still waiting for the API server, with the Lease
held by another replica) answers it too, over TLS, and gates a pod of our class."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

from api_outage import Pauses, free_port
from controller_cluster import CLASS, FAST, NAMESPACE

from controller.allocation_gate import ALLOCATION_GATE
from controller.gate_webhook import GateWebhookSettings
from controller.legacy.caller_auth import ALLOCATION_GATE_PATH
from controller.legacy.config import CallerAuthSettings
from controller.legacy.server import ServeSettings
from controller.service import ServiceSettings, run_controller
from dra_driver.kube.leader import LeaderSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.api_time import micro_time
from dra_driver.tls.bundle import issue_bundle
from simulator.apiserver import APIServer
from simulator.standins.admission import AdmissionClient, AdmissionOutcome, WebhookConfig

RESOURCE_V1 = r"^/apis/resource\.k8s\.io/v1$"
LEASE = "vgpu-hami-io-controller"
USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "job", "namespace": NAMESPACE},
    "spec": {
        "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "ours"}],
    },
}


async def seed(client: KubeClient) -> None:
    """A template of our class, and the Lease held by another replica for an hour."""
    request = {"name": "gpu", "exactly": {"deviceClassName": CLASS}}
    await client.create(
        f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "ours", "namespace": NAMESPACE},
            "spec": {"spec": {"devices": {"requests": [request]}}},
        },
    )
    now = micro_time()
    await client.create(
        f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases",
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE, "namespace": NAMESPACE},
            "spec": {
                "holderIdentity": "other-replica",
                "leaseDurationSeconds": 3600,
                "acquireTime": now,
                "renewTime": now,
            },
        },
    )


async def test_a_replica_that_does_not_lead_serves_the_gate_webhook_over_tls(
    tmp_path: Path,
) -> None:
    bundle = issue_bundle(("127.0.0.1",), dt.datetime.now(dt.UTC), dt.timedelta(hours=1))
    for name, data in bundle.secret_data().items():
        (tmp_path / name).write_bytes(data)
    port = free_port()
    settings = ServiceSettings(
        controller=FAST,
        leader=LeaderSettings(namespace=NAMESPACE, name=LEASE, identity="this-replica"),
        gate_webhook=GateWebhookSettings(
            ServeSettings(port=port, tls_cert=tmp_path / "tls.crt", tls_key=tmp_path / "tls.key"),
            CallerAuthSettings(enabled=False),
        ),
    )
    outcomes: list[AdmissionOutcome] = []
    stop = asyncio.Event()
    url = f"https://127.0.0.1:{port}{ALLOCATION_GATE_PATH}"
    config = WebhookConfig(url=url, failure_policy="Fail", ca_file=tmp_path / "ca.crt")

    async def admit_while_waiting(pause: int) -> None:
        async with AdmissionClient(config) as apiserver:
            review = apiserver.build_review(POD, namespace=NAMESPACE, user_info=USER)
            outcomes.append(await apiserver.review(review))
        stop.set()

    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "k")
        admin = await KubeClient.from_kubeconfig(kubeconfig)
        # The controller's User-Agent: the RBAC audit sees the webhook's reads as its own.
        client = await KubeClient.from_kubeconfig(kubeconfig, component="controller")
        try:
            await seed(admin)
            server.faults.fail(RESOURCE_V1, verb="GET", status=503, times=10**6)
            pauses = Pauses(admit_while_waiting)
            await run_controller(client, settings, stop, api_wait=pauses.api_wait("controller"))
            lease = await admin.get(
                f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases/{LEASE}"
            )
        finally:
            await client.aclose()
            await admin.aclose()
    (outcome,) = outcomes
    assert outcome.allowed and outcome.object is not None
    assert outcome.object["spec"]["schedulingGates"] == [{"name": ALLOCATION_GATE}]
    assert lease["spec"]["holderIdentity"] == "other-replica"
