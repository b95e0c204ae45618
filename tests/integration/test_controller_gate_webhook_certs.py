"""The gate webhook's certificate Secret is mounted optional: a controller whose
certificate is not there yet still allocates (leads), and its webhook starts serving
once the files appear, rather than the controller pods waiting for the certs Job."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from pathlib import Path

from api_outage import free_port
from controller_cluster import FAST, NAMESPACE
from test_controller_gate_webhook_service import POD, USER, seed

from controller.allocation_gate import ALLOCATION_GATE
from controller.gate_webhook import GateWebhookServer, GateWebhookSettings
from controller.legacy.caller_auth import ALLOCATION_GATE_PATH
from controller.legacy.config import CallerAuthSettings
from controller.legacy.server import ServeSettings
from controller.service import ServiceSettings, run_controller
from dra_driver.kube.informer import Informer
from dra_driver.kube.leader import LeaderSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.tls.bundle import issue_bundle
from simulator.apiserver import APIServer
from simulator.standins.admission import AdmissionClient, WebhookConfig

LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


def write_certificate(directory: Path) -> None:
    bundle = issue_bundle(("127.0.0.1",), dt.datetime.now(dt.UTC), dt.timedelta(hours=1))
    for name, data in bundle.secret_data().items():
        (directory / name).write_bytes(data)


def serve_settings(directory: Path, port: int) -> ServeSettings:
    return ServeSettings(port=port, tls_cert=directory / "tls.crt", tls_key=directory / "tls.key")


async def test_a_controller_without_its_webhook_certificate_still_leads(tmp_path: Path) -> None:
    settings = ServiceSettings(
        controller=FAST,
        leader=LeaderSettings(namespace=NAMESPACE, name="gate-certs", identity="this-replica"),
        gate_webhook=GateWebhookSettings(
            serve_settings(tmp_path / "not-mounted-yet", free_port()),
            CallerAuthSettings(enabled=False),
        ),
    )
    stop = asyncio.Event()
    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "k")
        admin = await KubeClient.from_kubeconfig(kubeconfig)
        client = await KubeClient.from_kubeconfig(kubeconfig, component="controller")
        leases = Informer(admin, LEASES)
        watching = asyncio.create_task(leases.run(), name="leases")
        running = asyncio.create_task(run_controller(client, settings, stop), name="controller")
        try:
            async with asyncio.timeout(60):
                await leases.wait_for(
                    lambda store: (
                        ((store.get(f"{NAMESPACE}/gate-certs") or {}).get("spec", {})).get(
                            "holderIdentity"
                        )
                        == "this-replica"
                    )
                )
        finally:
            stop.set()
            await running
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
            await client.aclose()
            await admin.aclose()


async def test_the_webhook_starts_once_its_certificate_appears(tmp_path: Path) -> None:
    mounted = tmp_path / "tls"
    mounted.mkdir()
    port = free_port()
    stop = asyncio.Event()
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "k"))
        webhook = GateWebhookServer(
            client,
            ["nvidia.vgpu.hami.io"],
            serve_settings(mounted, port),
            CallerAuthSettings(enabled=False),
        )
        try:
            await seed(client)
            started_at_once = await webhook.start_if_certified()
            waiting = asyncio.create_task(webhook.start_once_certified(stop, poll_s=0.01))
            write_certificate(mounted)
            async with asyncio.timeout(60):
                await waiting
            config = WebhookConfig(
                url=f"https://127.0.0.1:{port}{ALLOCATION_GATE_PATH}",
                failure_policy="Fail",
                ca_file=mounted / "ca.crt",
            )
            async with AdmissionClient(config) as apiserver:
                review = apiserver.build_review(POD, namespace=NAMESPACE, user_info=USER)
                outcome = await apiserver.review(review)
        finally:
            await webhook.aclose()
            await client.aclose()
    assert started_at_once is False
    assert outcome.allowed and outcome.object is not None
    assert outcome.object["spec"]["schedulingGates"] == [{"name": ALLOCATION_GATE}]
