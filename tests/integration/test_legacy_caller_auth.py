"""Who may call /filter, /bind and /webhook: each bypass tried, each refused (HAMi#3030)."""

from __future__ import annotations

import datetime as dt
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from legacy_fixtures import base_url, legacy_scheduler

from controller.legacy.config import CallerAuthSettings
from dra_driver.kube.rest import KubeClient
from dra_driver.tls.bundle import issue_bundle
from simulator.apiserver import APIServer

SCHEDULER_SA = "system:serviceaccount:vgpu-system:vgpu-kube-scheduler"
SCHEDULER_CN = "vgpu-kube-scheduler"
AUTH = CallerAuthSettings(allowed_callers=frozenset({SCHEDULER_SA, SCHEDULER_CN}))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield server, client
        finally:
            await client.aclose()


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def client_cert(directory: Path, common_name: str) -> tuple[Path, Path, Path]:
    """A fresh CA and a client certificate it signed for `common_name`: (ca, cert, key)."""
    now = dt.datetime.now(dt.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir()
    paths = directory / "ca.crt", directory / "tls.crt", directory / "tls.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(_pem_key(key))
    return paths


def serving_cert(directory: Path) -> tuple[Path, Path, Path]:
    """The scheduler's serving certificate for 127.0.0.1: (ca, cert, key)."""
    bundle = issue_bundle(("127.0.0.1",), dt.datetime.now(dt.UTC), dt.timedelta(hours=1))
    paths = directory / "serving-ca.crt", directory / "serving.crt", directory / "serving.key"
    for path, data in zip(paths, (bundle.ca_cert, bundle.cert, bundle.key), strict=True):
        path.write_bytes(data)
    return paths


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
        for path in ("/filter", "/bind", "/webhook"):
            assert await post(f"{base_url(server)}{path}", token=tenant) == 403
    identities = {r.identity for r in caplog.records if r.getMessage() == "caller refused"}
    assert identities == {"system:serviceaccount:tenant:default"}


async def test_allowed_scheduler_token_passes(cluster) -> None:
    apiserver, client = cluster
    token = apiserver.tokens.issue_service_account("vgpu-system", "vgpu-kube-scheduler")
    async with legacy_scheduler(client, caller_auth=AUTH) as server:
        for path in ("/filter", "/bind", "/webhook"):
            assert await post(f"{base_url(server)}{path}", token=token) == 400
            assert await post(f"{base_url(server)}{path}", token=token) == 400


async def test_client_certificate_from_the_ca_passes_another_ca_fails(
    cluster, tmp_path: Path
) -> None:
    _, client = cluster
    serving_ca, cert, key = serving_cert(tmp_path)
    trusted_ca, trusted_cert, trusted_key = client_cert(tmp_path / "trusted", SCHEDULER_CN)
    _, rogue_cert, rogue_key = client_cert(tmp_path / "rogue", SCHEDULER_CN)
    serve = {"tls_cert": cert, "tls_key": key, "client_ca": trusted_ca}
    async with legacy_scheduler(client, caller_auth=AUTH, **serve) as server:
        url = f"{base_url(server, 'https')}/bind"
        trusted = ssl.create_default_context(cafile=serving_ca)
        trusted.load_cert_chain(trusted_cert, trusted_key)
        assert await post(url, context=trusted) == 400
        rogue = ssl.create_default_context(cafile=serving_ca)
        rogue.load_cert_chain(rogue_cert, rogue_key)
        with pytest.raises(aiohttp.ClientError):
            await post(url, context=rogue)
        assert await post(url, context=ssl.create_default_context(cafile=serving_ca)) == 401
