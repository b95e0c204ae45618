"""The legacy deploy's caller authentication as rendered, end to end: the certs Job's
own flags issue the Secrets, the legacy scheduler runs with its rendered flags and its
volumes' files, and a caller holding the files kube-scheduler's KubeSchedulerConfiguration
names gets through /bind while one without a certificate does not. A wrong Secret name,
CN, CA or mount path anywhere in deploy/ fails here, not on a cluster."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import aiohttp
import yaml
from deploy_manifests import NAMESPACE, find, render, render_components

from controller.legacy.command import settings_from_args
from controller.legacy.server import LegacyServer
from dra_driver.cli import build_parser, main
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.tls.bundle import issue_serving_and_client
from dra_driver.tls.certs import WEBHOOKS
from simulator.apiserver import APIServer

SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"


def _container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    (container,) = [
        c for c in workload["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]
    return container


async def _volume_files(
    client: KubeClient,
    objects: list[dict[str, Any]],
    workload: dict[str, Any],
    container: str,
    root: Path,
) -> dict[str, Path]:
    """Write what each Secret or ConfigMap volume of `container` would hold under `root`:
    its mount path -> the local directory."""
    volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    mounted = {}
    for mount in _container(workload, container)["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" in volume:
            source = volume["secret"]
            secret = await client.get(object_path(SECRETS, source["secretName"]))
            data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
        else:
            source = volume["configMap"]
            config_map = find(objects, "ConfigMap", source["name"])
            data = {k: v.encode() for k, v in config_map["data"].items()}
        items = {i["key"]: i["path"] for i in source.get("items", [])} or {k: k for k in data}
        local = root / mount["name"]
        local.mkdir(parents=True)
        for key, path in items.items():
            (local / path).write_bytes(data[key])
        mounted[mount["mountPath"].rstrip("/")] = local
    return mounted


def _local(path: str, mounted: dict[str, Path]) -> str:
    for mount_path, local in mounted.items():
        if path.startswith(f"{mount_path}/"):
            return str(local / path.removeprefix(f"{mount_path}/"))
    return path


def _local_args(args: list[str], mounted: dict[str, Path]) -> list[str]:
    localised = []
    for arg in args:
        name, equals, value = arg.partition("=")
        localised.append(f"{name}={_local(value, mounted)}" if equals else arg)
    return localised


@dataclass(frozen=True)
class Deployed:
    """The legacy scheduler serving as rendered, and how kube-scheduler reaches it."""

    url: str
    host: str
    verbs: tuple[str, str]
    ca_file: str
    """What kube-scheduler's tlsConfig.caFile holds: the serving certificate's CA."""
    as_kube_scheduler: ssl.SSLContext

    @property
    def anonymous(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=self.ca_file)

    def caller(self, cert: Path, key: Path) -> ssl.SSLContext:
        context = self.anonymous
        context.load_cert_chain(cert, key)
        return context

    async def status(self, path: str, context: ssl.SSLContext) -> int:
        """POST a body that is not JSON: 400 means the caller got through to the handler."""
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"{self.url}{path}", data=b"{", ssl=context, server_hostname=self.host
            ) as response,
        ):
            return response.status


@asynccontextmanager
async def deployed(objects: list[dict[str, Any]], tmp_path: Path) -> AsyncIterator[Deployed]:
    """Run the certs Job's command with its flags against the emulator, then the legacy
    scheduler with its rendered flags over the files its volumes would hold."""
    async with APIServer() as apiserver:
        kubeconfig = apiserver.write_kubeconfig(tmp_path / "kubeconfig")
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            await client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            webhook = find(objects, "MutatingWebhookConfiguration", "vgpu-legacy-webhook")
            await client.create(WEBHOOKS, webhook)
            job_args = _container(find(objects, "Job", "vgpu-certs"), "certs")["args"]
            certs = [*job_args, "--kubeconfig", str(kubeconfig)]
            assert await asyncio.to_thread(main, certs) == 0

            deployment = find(objects, "Deployment", "vgpu-legacy-scheduler")
            mounted = await _volume_files(
                client, objects, deployment, "scheduler", tmp_path / "scheduler"
            )
            args = _local_args(_container(deployment, "scheduler")["args"], mounted)
            parsed = build_parser().parse_args([*args, "--kubeconfig", str(kubeconfig)])
            settings, serve = settings_from_args(parsed)
            serve = replace(serve, host="127.0.0.1", port=0)

            kube_scheduler = find(objects, "Deployment", "vgpu-kube-scheduler")
            its_files = await _volume_files(
                client, objects, kube_scheduler, "kube-scheduler", tmp_path / "kube-scheduler"
            )
            config_map = find(objects, "ConfigMap", "vgpu-kube-scheduler-config")
            (extender,) = yaml.safe_load(config_map["data"]["config.yaml"])["extenders"]
            tls = {k: _local(v, its_files) for k, v in extender["tlsConfig"].items()}
            host = urlparse(extender["urlPrefix"]).hostname
            assert host is not None
            as_kube_scheduler = ssl.create_default_context(cafile=tls["caFile"])
            as_kube_scheduler.load_cert_chain(tls["certFile"], tls["keyFile"])
            async with LegacyServer(client, settings, serve) as server:
                yield Deployed(
                    url=f"https://127.0.0.1:{server.port}",
                    host=host,
                    verbs=(extender["filterVerb"], extender["bindVerb"]),
                    ca_file=tls["caFile"],
                    as_kube_scheduler=as_kube_scheduler,
                )
        finally:
            await client.aclose()


async def test_the_rendered_legacy_deploy_lets_in_kube_scheduler_only(tmp_path: Path) -> None:
    async with deployed(render("legacy"), tmp_path) as scheduler:
        for verb in scheduler.verbs:
            assert await scheduler.status(f"/{verb}", scheduler.as_kube_scheduler) == 400
            assert await scheduler.status(f"/{verb}", scheduler.anonymous) == 401
        # The shipped default leaves /webhook open (docs/security.md says why).
        assert await scheduler.status("/webhook", scheduler.anonymous) == 400


async def test_the_webhook_auth_component_lets_in_the_api_servers_certificate_only(
    tmp_path: Path,
) -> None:
    """deploy/components/legacy-webhook-auth on a kubeadm-like cluster: kube-root-ca.crt
    holds the cluster CA that signed the API server's apiserver-kubelet-client.crt."""
    objects = render_components(
        tmp_path, ("legacy", "legacy-scheduler", "certs-job", "legacy-webhook-auth")
    )
    now, hour = dt.datetime.now(dt.UTC), dt.timedelta(hours=1)
    _, apiserver = issue_serving_and_client(
        ("cluster.invalid",), "kube-apiserver-kubelet-client", now, hour
    )
    objects.append(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": NAMESPACE},
            "data": {"ca.crt": apiserver.ca_cert.decode()},
        }
    )
    (tmp_path / "apiserver.crt").write_bytes(apiserver.cert)
    (tmp_path / "apiserver.key").write_bytes(apiserver.key)
    async with deployed(objects, tmp_path) as scheduler:
        as_apiserver = scheduler.caller(tmp_path / "apiserver.crt", tmp_path / "apiserver.key")
        assert await scheduler.status("/webhook", as_apiserver) == 400
        assert await scheduler.status("/webhook", scheduler.as_kube_scheduler) == 403
        assert await scheduler.status("/bind", as_apiserver) == 403
        assert await scheduler.status("/bind", scheduler.as_kube_scheduler) == 400
