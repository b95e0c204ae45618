"""`dra-driver certs` against the API emulator: the Secret and the webhook's caBundle it
writes make a TLS handshake succeed for the Service's DNS name; kube-scheduler's client
certificate comes from the same CA and is renewed with it; reruns change nothing;
what it must not overwrite it refuses, naming the flag. With `--out-dir`, the same pair
as real files for the `--san` names: parsed back, chained to the CA, with their modes."""

from __future__ import annotations

import asyncio
import base64
import ipaddress
import ssl
import stat
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_driver.cli import EXIT_BAD_INPUT, main
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.tls.certs import WEBHOOKS, CertsSettings, ensure_certificates
from simulator.apiserver import APIServer

ROOT = Path(__file__).resolve().parents[2]
WEBHOOK_FILE = ROOT / "deploy/components/legacy-scheduler/mutatingwebhookconfiguration.yaml"
NAMESPACE = "vgpu-system"
SECRETS = f"/api/v1/namespaces/{NAMESPACE}/secrets"
SECRET = object_path(SECRETS, "vgpu-legacy-scheduler-tls")
WEBHOOK = object_path(WEBHOOKS, "vgpu-legacy-webhook")
SETTINGS = CertsSettings(
    namespace=NAMESPACE,
    service="vgpu-legacy-scheduler",
    secret="vgpu-legacy-scheduler-tls",
    webhooks=("vgpu-legacy-webhook",),
)
NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
CLIENT_SECRET = object_path(SECRETS, "vgpu-kube-scheduler-client")
WITH_CLIENT = replace(SETTINGS, client_secret="vgpu-kube-scheduler-client")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient, Path]]:
    async with APIServer() as server:
        kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
        client = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            await client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            await client.create(WEBHOOKS, yaml.safe_load(WEBHOOK_FILE.read_text()))
            yield server, client, kubeconfig
        finally:
            await client.aclose()


def _data(secret: dict[str, Any]) -> dict[str, bytes]:
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


async def _handshake(tmp_path: Path, secret: dict[str, bytes], ca_bundle: bytes, host: str) -> str:
    """Serve with the Secret's certificate on loopback; connect trusting only the caBundle,
    checking `host` as the API server checks `<service>.<namespace>.svc`."""
    (tmp_path / "tls.crt").write_bytes(secret["tls.crt"])
    (tmp_path / "tls.key").write_bytes(secret["tls.key"])
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cadata=ca_bundle.decode())

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname=host
        )
        received = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await writer.wait_closed()
        return received.decode()
    finally:
        server.close()
        await server.wait_closed()


async def test_first_run_writes_a_secret_the_webhook_caller_trusts(cluster, tmp_path: Path) -> None:
    _, client, _ = cluster
    report = await ensure_certificates(client, SETTINGS, datetime.now(UTC))
    assert report.lines == [
        f"secret {NAMESPACE}/vgpu-legacy-scheduler-tls: created",
        "mutatingwebhookconfiguration vgpu-legacy-webhook: caBundle set",
    ]
    secret = await client.get(SECRET)
    assert secret["type"] == "kubernetes.io/tls"
    data = _data(secret)
    assert set(data) == {"ca.crt", "tls.crt", "tls.key"}
    (webhook,) = (await client.get(WEBHOOK))["webhooks"]
    ca_bundle = base64.b64decode(webhook["clientConfig"]["caBundle"])
    assert ca_bundle == data["ca.crt"]
    # The API server dials <service>.<namespace>.svc; kube-scheduler uses the urlPrefix host.
    for host in ("vgpu-legacy-scheduler.vgpu-system.svc", "vgpu-legacy-scheduler.vgpu-system"):
        assert await _handshake(tmp_path, data, ca_bundle, host) == "ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(tmp_path, data, ca_bundle, "other.vgpu-system.svc")


async def test_rerun_keeps_the_certificate_and_writes_nothing(cluster) -> None:
    _, client, _ = cluster
    await ensure_certificates(client, SETTINGS, NOW)
    secret_before, webhook_before = await client.get(SECRET), await client.get(WEBHOOK)
    report = await ensure_certificates(client, SETTINGS, NOW + timedelta(days=300))
    assert report.lines == [
        f"secret {NAMESPACE}/vgpu-legacy-scheduler-tls: kept (valid for "
        "vgpu-legacy-scheduler, vgpu-legacy-scheduler.vgpu-system, "
        "vgpu-legacy-scheduler.vgpu-system.svc, "
        "vgpu-legacy-scheduler.vgpu-system.svc.cluster.local)",
        "mutatingwebhookconfiguration vgpu-legacy-webhook: caBundle up to date",
    ]
    secret_after, webhook_after = await client.get(SECRET), await client.get(WEBHOOK)
    assert (
        secret_after["metadata"]["resourceVersion"] == secret_before["metadata"]["resourceVersion"]
    )
    assert (
        webhook_after["metadata"]["resourceVersion"]
        == webhook_before["metadata"]["resourceVersion"]
    )


async def test_a_certificate_near_expiry_is_replaced_and_the_ca_bundle_follows(cluster) -> None:
    _, client, _ = cluster
    await ensure_certificates(client, SETTINGS, NOW)
    old_ca = _data(await client.get(SECRET))["ca.crt"]
    later = NOW + SETTINGS.validity - SETTINGS.renew_before + timedelta(days=1)
    report = await ensure_certificates(client, SETTINGS, later)
    assert "replaced (expires at" in report.lines[0]
    new_ca = _data(await client.get(SECRET))["ca.crt"]
    assert new_ca != old_ca
    (webhook,) = (await client.get(WEBHOOK))["webhooks"]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == new_ca


async def test_a_certificate_for_another_service_is_replaced(cluster) -> None:
    _, client, _ = cluster
    other = CertsSettings(namespace=NAMESPACE, service="elsewhere", secret=SETTINGS.secret)
    await ensure_certificates(client, other, NOW)
    report = await ensure_certificates(client, SETTINGS, NOW)
    assert "tls.crt does not name vgpu-legacy-scheduler" in report.lines[0]


async def test_a_secret_of_another_type_is_left_alone(cluster) -> None:
    _, client, _ = cluster
    opaque = {"metadata": {"name": SETTINGS.secret}, "type": "Opaque", "data": {"x": "eQ=="}}
    await client.create(SECRETS, opaque)
    with pytest.raises(InvalidParameterError) as refused:
        await ensure_certificates(client, SETTINGS, NOW)
    assert refused.value.field == "--secret"
    assert "'Opaque'" in refused.value.reason
    assert (await client.get(SECRET))["data"] == {"x": "eQ=="}


async def test_a_missing_or_unrelated_webhook_configuration_is_named(cluster) -> None:
    _, client, _ = cluster
    missing = CertsSettings(
        namespace=NAMESPACE, service=SETTINGS.service, secret="s1", webhooks=("absent",)
    )
    with pytest.raises(InvalidParameterError, match="absent not found") as refused:
        await ensure_certificates(client, missing, NOW)
    assert refused.value.field == "--webhook"
    unrelated = CertsSettings(
        namespace=NAMESPACE, service="other", secret="s2", webhooks=("vgpu-legacy-webhook",)
    )
    with pytest.raises(InvalidParameterError, match="no webhook calling service"):
        await ensure_certificates(client, unrelated, NOW)
    (webhook,) = (await client.get(WEBHOOK))["webhooks"]
    assert webhook["clientConfig"]["caBundle"] == ""


async def test_the_command_prints_what_it_did_and_exits_2_on_bad_input(
    cluster, capsys: pytest.CaptureFixture[str]
) -> None:
    _, client, kubeconfig = cluster
    argv = ["certs", "--kubeconfig", str(kubeconfig), "--namespace", NAMESPACE]
    code = await asyncio.to_thread(main, [*argv, "--webhook", "vgpu-legacy-webhook"])
    assert code == 0
    assert "caBundle set" in capsys.readouterr().out
    assert (await client.get(SECRET))["type"] == "kubernetes.io/tls"
    # By default the command also issues kube-scheduler's client certificate.
    assert (await client.get(CLIENT_SECRET))["type"] == "kubernetes.io/tls"
    code = await asyncio.to_thread(main, [*argv, "--webhook", "nope"])
    assert code == EXIT_BAD_INPUT
    assert "dra-driver certs: --webhook: MutatingWebhookConfiguration nope not found" in (
        capsys.readouterr().err
    )


async def test_the_client_certificate_is_signed_by_the_serving_ca_and_kept_on_rerun(
    cluster,
) -> None:
    _, client, _ = cluster
    report = await ensure_certificates(client, WITH_CLIENT, NOW)
    assert report.lines == [
        f"secret {NAMESPACE}/vgpu-legacy-scheduler-tls: created",
        f"secret {NAMESPACE}/vgpu-kube-scheduler-client: created",
        "mutatingwebhookconfiguration vgpu-legacy-webhook: caBundle set",
    ]
    serving_secret, client_secret = await client.get(SECRET), await client.get(CLIENT_SECRET)
    assert client_secret["type"] == "kubernetes.io/tls"
    serving, issued = _data(serving_secret), _data(client_secret)
    assert issued["ca.crt"] == serving["ca.crt"]
    ca = x509.load_pem_x509_certificate(serving["ca.crt"])
    cert = x509.load_pem_x509_certificate(issued["tls.crt"])
    cert.verify_directly_issued_by(ca)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == (
        "vgpu-kube-scheduler"
    )
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    versions = [s["metadata"]["resourceVersion"] for s in (serving_secret, client_secret)]
    report = await ensure_certificates(client, WITH_CLIENT, NOW + timedelta(days=300))
    assert report.lines[1] == (
        f"secret {NAMESPACE}/vgpu-kube-scheduler-client: kept (valid for CN vgpu-kube-scheduler)"
    )
    after = [
        (await client.get(path))["metadata"]["resourceVersion"] for path in (SECRET, CLIENT_SECRET)
    ]
    assert after == versions


async def test_a_missing_client_certificate_renews_the_ca_and_the_ca_bundle_follows(
    cluster,
) -> None:
    """An upgrade from a release without the client Secret: the serving CA's key is gone, so
    a client certificate it signed can only come with a new CA and serving certificate."""
    _, client, _ = cluster
    await ensure_certificates(client, SETTINGS, NOW)
    old_ca = _data(await client.get(SECRET))["ca.crt"]
    report = await ensure_certificates(client, WITH_CLIENT, NOW)
    assert report.lines[:2] == [
        f"secret {NAMESPACE}/vgpu-legacy-scheduler-tls: replaced (renewed with secret "
        f"{NAMESPACE}/vgpu-kube-scheduler-client: not found)",
        f"secret {NAMESPACE}/vgpu-kube-scheduler-client: created",
    ]
    new_ca = _data(await client.get(SECRET))["ca.crt"]
    assert new_ca != old_ca
    assert _data(await client.get(CLIENT_SECRET))["ca.crt"] == new_ca
    (webhook,) = (await client.get(WEBHOOK))["webhooks"]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == new_ca


async def test_a_client_certificate_of_another_ca_or_name_is_replaced(cluster) -> None:
    _, client, _ = cluster
    await ensure_certificates(client, WITH_CLIENT, NOW)
    # The serving Secret alone renewed (as by an older release's Job): the CAs differ.
    await client.delete(SECRET)
    await ensure_certificates(client, SETTINGS, NOW)
    report = await ensure_certificates(client, WITH_CLIENT, NOW)
    assert report.lines[1] == (
        f"secret {NAMESPACE}/vgpu-kube-scheduler-client: replaced (ca.crt is not the CA of "
        f"secret {NAMESPACE}/vgpu-legacy-scheduler-tls)"
    )
    renamed = replace(WITH_CLIENT, client_name="another-scheduler")
    report = await ensure_certificates(client, renamed, NOW)
    assert (
        "replaced (tls.crt is for CN vgpu-kube-scheduler, not another-scheduler)"
        in (report.lines[1])
    )
    assert (
        _data(await client.get(CLIENT_SECRET))["ca.crt"]
        == _data(await client.get(SECRET))["ca.crt"]
    )


async def test_a_client_secret_of_another_type_is_left_alone(cluster) -> None:
    _, client, _ = cluster
    opaque = {"metadata": {"name": "vgpu-kube-scheduler-client"}, "type": "Opaque", "data": {}}
    await client.create(SECRETS, opaque)
    with pytest.raises(InvalidParameterError) as refused:
        await ensure_certificates(client, WITH_CLIENT, NOW)
    assert refused.value.field == "--client-secret"
    assert (await client.get(CLIENT_SECRET))["type"] == "Opaque"


def _certs_to_files(out_dir: Path, *sans: str) -> int:
    return main(["certs", "--out-dir", str(out_dir), *(f"--san={san}" for san in sans)])


def _load(out_dir: Path) -> tuple[x509.Certificate, x509.Certificate, Any]:
    ca = x509.load_pem_x509_certificate((out_dir / "ca.crt").read_bytes())
    cert = x509.load_pem_x509_certificate((out_dir / "tls.crt").read_bytes())
    key = serialization.load_pem_private_key((out_dir / "tls.key").read_bytes(), password=None)
    return ca, cert, key


async def test_out_dir_writes_a_ca_and_a_pair_for_the_given_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "tls"
    code = _certs_to_files(out_dir, "DNS:Scheduler.Example.com", "IP:10.0.0.1", "IP:0:0::1")
    assert code == 0, capsys.readouterr().err
    assert f"{out_dir}/tls.crt, tls.key: written for " in capsys.readouterr().out
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in out_dir.iterdir()}
    assert {name: modes[name] for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")} == {
        "ca.crt": 0o644,
        "ca.key": 0o600,
        "tls.crt": 0o644,
        "tls.key": 0o600,
    }
    ca, cert, key = _load(out_dir)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["scheduler.example.com"]
    assert names.get_values_for_type(x509.IPAddress) == [
        ipaddress.ip_address("10.0.0.1"),
        ipaddress.ip_address("::1"),
    ]
    cert.verify_directly_issued_by(ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert cert.public_key() == key.public_key()
    data = {name: (out_dir / name).read_bytes() for name in ("tls.crt", "tls.key")}
    ca_pem = (out_dir / "ca.crt").read_bytes()
    for host in ("scheduler.example.com", "10.0.0.1"):
        assert await _handshake(tmp_path, data, ca_pem, host) == "ok"
    with pytest.raises(ssl.SSLCertVerificationError):
        await _handshake(tmp_path, data, ca_pem, "10.0.0.2")


def test_out_dir_rerun_keeps_a_valid_pair_and_replaces_one_missing_a_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _certs_to_files(tmp_path, "DNS:a.example.com") == 0
    before = {path.name: path.read_bytes() for path in tmp_path.iterdir()}
    assert _certs_to_files(tmp_path, "DNS:a.example.com") == 0
    assert "kept (valid for a.example.com)" in capsys.readouterr().out
    assert {path.name: path.read_bytes() for path in tmp_path.iterdir()} == before
    assert _certs_to_files(tmp_path, "DNS:a.example.com", "IP:192.0.2.7") == 0
    assert "replaced (tls.crt does not name 192.0.2.7)" in capsys.readouterr().out
    _, cert, _ = _load(tmp_path)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("192.0.2.7")]


def test_out_dir_replaces_a_foreign_pair_and_makes_its_key_private(tmp_path: Path) -> None:
    for name in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / name).write_bytes(b"not PEM")
        (tmp_path / name).chmod(0o644)
    assert _certs_to_files(tmp_path, "DNS:host") == 0
    assert stat.S_IMODE((tmp_path / "tls.key").stat().st_mode) == 0o600
    _, cert, key = _load(tmp_path)
    assert cert.public_key() == key.public_key()


@pytest.mark.parametrize(
    ("san", "reason"),
    [
        ("host.example.com", "write DNS:<host name> or IP:<address>"),
        ("URI:https://host", "write DNS:<host name> or IP:<address>"),
        ("IP:10.0.0.300", "'10.0.0.300' is not an IPv4 or IPv6 address"),
        ("DNS:10.0.0.1", "clients match only as IP:10.0.0.1"),
        ("DNS:under_score.example", "is not a host name"),
        ("DNS:a.*.example", "is not a host name"),
    ],
)
def test_a_bad_san_is_refused_naming_the_flag_and_nothing_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], san: str, reason: str
) -> None:
    out_dir = tmp_path / "tls"
    assert _certs_to_files(out_dir, "DNS:good.example", san) == EXIT_BAD_INPUT
    error = capsys.readouterr().err
    assert error.startswith(f"dra-driver certs: --san: {san!r}: ") and reason in error
    assert not out_dir.exists()


def test_out_dir_and_san_need_each_other(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["certs", "--out-dir", str(tmp_path / "tls")]) == EXIT_BAD_INPUT
    assert "dra-driver certs: --san: --out-dir needs at least one --san" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "tls").exists()
    assert main(["certs", "--san", "DNS:host"]) == EXIT_BAD_INPUT
    assert "--san: only with --out-dir" in capsys.readouterr().err
