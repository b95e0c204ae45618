"""Who may call /filter, /bind and /webhook: each bypass tried, each refused (HAMi#3030).

The certificates are the ones `dra-driver certs` issues (dra_driver/tls): the serving
certificate and kube-scheduler's client certificate from one CA, as the deploy mounts
them; a second CA plays the cluster's, whose client certificate the API server presents
to /webhook where its administrator configures one."""

from __future__ import annotations

import datetime as dt
import logging
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from legacy_fixtures import base_url, legacy_scheduler

from controller.legacy.config import CallerAuthSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.tls.bundle import TlsBundle, issue_serving_and_client
from simulator.apiserver import APIServer

SCHEDULER_SA = "system:serviceaccount:vgpu-system:vgpu-kube-scheduler"
SCHEDULER_CN = "vgpu-kube-scheduler"
APISERVER_CN = "kube-apiserver-kubelet-client"
AUTH = CallerAuthSettings(
    allowed_callers=frozenset({SCHEDULER_SA, SCHEDULER_CN}),
    allowed_webhook_callers=frozenset({SCHEDULER_SA, APISERVER_CN}),
)
DEPLOYED = CallerAuthSettings(allowed_callers=frozenset({SCHEDULER_CN}), open_webhook=True)
"""As deploy/components/legacy-scheduler/scheduler.yaml runs it."""
EXTENDER_PATHS = ("/filter", "/bind")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield server, client
        finally:
            await client.aclose()


def _write(directory: Path, bundle: TlsBundle) -> tuple[Path, Path, Path]:
    """The bundle as the files a Secret volume holds: (ca.crt, tls.crt, tls.key)."""
    directory.mkdir()
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    for path, data in zip(paths, (bundle.ca_cert, bundle.cert, bundle.key), strict=True):
        path.write_bytes(data)
    return paths


@dataclass(frozen=True)
class Pki:
    """The files of both CAs: ours (serving + kube-scheduler) and the cluster's."""

    serving: tuple[Path, Path, Path]
    scheduler: tuple[Path, Path, Path]
    apiserver: tuple[Path, Path, Path]

    def serve(self, *client_cas: Path) -> dict[str, object]:
        return {"tls_cert": self.serving[1], "tls_key": self.serving[2], "client_cas": client_cas}

    def context(self, client: tuple[Path, Path, Path] | None = None) -> ssl.SSLContext:
        """A caller that trusts the serving CA and presents `client`'s certificate, if any."""
        context = ssl.create_default_context(cafile=self.serving[0])
        if client is not None:
            context.load_cert_chain(client[1], client[2])
        return context


def pki(directory: Path, scheduler_cn: str = SCHEDULER_CN) -> Pki:
    now, hour = dt.datetime.now(dt.UTC), dt.timedelta(hours=1)
    serving, scheduler = issue_serving_and_client(("127.0.0.1",), scheduler_cn, now, hour)
    _, apiserver = issue_serving_and_client(("cluster.invalid",), APISERVER_CN, now, hour)
    directory.mkdir(exist_ok=True)
    return Pki(
        serving=_write(directory / "serving", serving),
        scheduler=_write(directory / "scheduler", scheduler),
        apiserver=_write(directory / "apiserver", apiserver),
    )


async def post(url: str, token: str | None = None, context: ssl.SSLContext | None = None) -> int:
    """POST a body that is not JSON: 400 means the caller got through to the handler."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=b"{", headers=headers, ssl=context) as response,
    ):
        return response.status


async def test_unauthenticated_bind_is_401_and_logged(cluster, caplog) -> None:
    _, client = cluster
    caplog.set_level(logging.WARNING, "controller.legacy.caller_auth")
    async with legacy_scheduler(client, caller_auth=AUTH) as server:
        assert await post(f"{base_url(server)}/bind") == 401
        assert await post(f"{base_url(server)}/bind", token="forged") == 401
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{base_url(server)}/healthz") as response,
        ):
            assert response.status == 200
    refusals = [r for r in caplog.records if r.getMessage() == "caller refused"]
    assert [(r.status, r.address, r.identity) for r in refusals] == [
        (401, "127.0.0.1", None),
        (401, "127.0.0.1", None),
    ]


async def test_valid_token_of_another_identity_is_403(cluster, caplog) -> None:
    apiserver, client = cluster
    tenant = apiserver.tokens.issue_service_account("tenant", "default")
    caplog.set_level(logging.WARNING, "controller.legacy.caller_auth")
    async with legacy_scheduler(client, caller_auth=AUTH) as server:
        for path in (*EXTENDER_PATHS, "/webhook"):
            assert await post(f"{base_url(server)}{path}", token=tenant) == 403
    identities = {r.identity for r in caplog.records if r.getMessage() == "caller refused"}
    assert identities == {"system:serviceaccount:tenant:default"}


async def test_allowed_scheduler_token_passes(cluster) -> None:
    apiserver, client = cluster
    token = apiserver.tokens.issue_service_account("vgpu-system", "vgpu-kube-scheduler")
    async with legacy_scheduler(client, caller_auth=AUTH) as server:
        for path in (*EXTENDER_PATHS, "/webhook"):
            assert await post(f"{base_url(server)}{path}", token=token) == 400
            assert await post(f"{base_url(server)}{path}", token=token) == 400


async def test_scheduler_certificate_passes_extender_paths_none_is_401_another_cn_403(
    cluster, tmp_path: Path, caplog
) -> None:
    """The deploy's rule: kube-scheduler's certificate from `dra-driver certs` gets /filter
    and /bind; no certificate is a 401, a trusted one of another CN a 403; /webhook is open."""
    _, client = cluster
    files = pki(tmp_path)
    caplog.set_level(logging.WARNING, "controller.legacy.caller_auth")
    serve = files.serve(files.serving[0], files.apiserver[0])
    async with legacy_scheduler(client, caller_auth=DEPLOYED, **serve) as server:
        url = base_url(server, "https")
        for path in EXTENDER_PATHS:
            assert await post(f"{url}{path}", context=files.context(files.scheduler)) == 400
            assert await post(f"{url}{path}", context=files.context()) == 401
            assert await post(f"{url}{path}", context=files.context(files.apiserver)) == 403
        assert await post(f"{url}/webhook", context=files.context()) == 400
        assert await post(f"{url}/webhook", context=files.context(files.apiserver)) == 400
    refusals = {
        (r.path, r.status, r.identity) for r in caplog.records if r.getMessage() == "caller refused"
    }
    assert refusals == {
        (path, status, identity)
        for path in EXTENDER_PATHS
        for status, identity in ((401, None), (403, APISERVER_CN))
    }


async def test_a_certificate_of_an_untrusted_ca_fails_the_handshake(
    cluster, tmp_path: Path
) -> None:
    _, client = cluster
    files, rogue = pki(tmp_path / "ours"), pki(tmp_path / "rogue")
    async with legacy_scheduler(
        client, caller_auth=DEPLOYED, **files.serve(files.serving[0])
    ) as server:
        url = f"{base_url(server, 'https')}/bind"
        context = files.context()
        context.load_cert_chain(rogue.scheduler[1], rogue.scheduler[2])
        with pytest.raises(aiohttp.ClientError):
            await post(url, context=context)
        assert await post(url, context=files.context(files.scheduler)) == 400


async def test_webhook_callers_are_their_own_list_when_the_webhook_is_not_open(
    cluster, tmp_path: Path
) -> None:
    """A self-managed cluster: the API server presents a certificate of the cluster's CA
    (the second --client-ca-file) and only that CN gets /webhook; kube-scheduler's does not,
    and the API server's does not get /bind."""
    _, client = cluster
    files = pki(tmp_path)
    auth = CallerAuthSettings(
        allowed_callers=frozenset({SCHEDULER_CN}), allowed_webhook_callers=frozenset({APISERVER_CN})
    )
    serve = files.serve(files.serving[0], files.apiserver[0])
    async with legacy_scheduler(client, caller_auth=auth, **serve) as server:
        url = base_url(server, "https")
        assert await post(f"{url}/webhook", context=files.context(files.apiserver)) == 400
        assert await post(f"{url}/webhook", context=files.context(files.scheduler)) == 403
        assert await post(f"{url}/webhook", context=files.context()) == 401
        assert await post(f"{url}/bind", context=files.context(files.apiserver)) == 403
        assert await post(f"{url}/bind", context=files.context(files.scheduler)) == 400
