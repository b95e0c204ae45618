"""`dra-driver certs --out-dir` for an extender run outside the cluster: besides the CA and
the serving pair, kube-scheduler's client pair (`--client-secret` names the files,
`--client-name` the CN), and the CA's key kept beside them (mode 0600), so that a later
run issues a renewed or newly asked certificate from the same CA and no caller needs a
new `ca.crt`. Seen on a real cluster: `--out-dir` ignored both client flags and kept no
CA key, so the extender's client certificate could not come from this tool at all.
"""

from __future__ import annotations

import asyncio
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_driver.cli import EXIT_BAD_INPUT, main

CLIENT = "vgpu-kube-scheduler-client"
"""`--client-secret`'s default: with --out-dir, the stem of the client files."""
HOST = "sched.example.com"


def _certs(out_dir: Path, *flags: str) -> int:
    return main(["certs", "--out-dir", str(out_dir), f"--san=DNS:{HOST}", *flags])


def _files(out_dir: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in out_dir.iterdir()}


def _cert(out_dir: Path, name: str) -> x509.Certificate:
    return x509.load_pem_x509_certificate((out_dir / name).read_bytes())


async def _mutual_handshake(out_dir: Path, client_cert: Path, client_key: Path) -> str:
    """Serve with tls.crt requiring a client certificate from ca.crt (the scheduler's
    `--client-ca-file`); connect as kube-scheduler does with the extender's tlsConfig
    (caFile, certFile, keyFile). Answers the CN the server saw."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(out_dir / "tls.crt", out_dir / "tls.key")
    server_context.load_verify_locations(out_dir / "ca.crt")
    server_context.verify_mode = ssl.CERT_REQUIRED
    client_context = ssl.create_default_context(cafile=out_dir / "ca.crt")
    client_context.load_cert_chain(client_cert, client_key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peercert")
        common_name = dict(field[0] for field in peer["subject"])["commonName"]
        writer.write(common_name.encode())
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_context, server_hostname=HOST
        )
        received = await reader.read()
        writer.close()
        await writer.wait_closed()
        return received.decode()
    finally:
        server.close()
        await server.wait_closed()


async def test_out_dir_writes_the_client_pair_and_keeps_the_ca_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_dir = tmp_path / "tls"
    assert _certs(out_dir, "--client-name", "edge-scheduler") == 0, capsys.readouterr().err
    modes = {path.name: stat.S_IMODE(path.stat().st_mode) for path in out_dir.iterdir()}
    assert modes == {
        "ca.crt": 0o644,
        "ca.key": 0o600,
        "tls.crt": 0o644,
        "tls.key": 0o600,
        f"{CLIENT}.crt": 0o644,
        f"{CLIENT}.key": 0o600,
    }
    out = capsys.readouterr().out
    assert f"{out_dir}/{CLIENT}.crt, {CLIENT}.key: written for CN edge-scheduler" in out, out

    ca = _cert(out_dir, "ca.crt")
    ca_key = serialization.load_pem_private_key((out_dir / "ca.key").read_bytes(), None)
    assert ca_key.public_key() == ca.public_key()
    client = _cert(out_dir, f"{CLIENT}.crt")
    client.verify_directly_issued_by(ca)
    assert client.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == ("edge-scheduler")
    usages = client.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.CLIENT_AUTH in usages
    seen = await _mutual_handshake(out_dir, out_dir / f"{CLIENT}.crt", out_dir / f"{CLIENT}.key")
    assert seen == "edge-scheduler"


def test_later_runs_issue_from_the_same_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _certs(tmp_path, "--client-secret", "") == 0
    assert not (tmp_path / f"{CLIENT}.crt").exists()
    first = _files(tmp_path)
    capsys.readouterr()

    assert _certs(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path}/ca.crt, ca.key: kept" in out, out
    assert f"{tmp_path}/tls.crt, tls.key: kept (valid for {HOST})" in out
    second = _files(tmp_path)
    assert {name: second[name] for name in first} == first
    _cert(tmp_path, f"{CLIENT}.crt").verify_directly_issued_by(_cert(tmp_path, "ca.crt"))

    assert _certs(tmp_path, "--client-name", "another", "--san=IP:192.0.2.7") == 0
    out = capsys.readouterr().out
    assert "replaced (tls.crt does not name 192.0.2.7)" in out, out
    assert "replaced (tls.crt is for CN vgpu-kube-scheduler, not another)" in out, out
    third = _files(tmp_path)
    assert (third["ca.crt"], third["ca.key"]) == (first["ca.crt"], first["ca.key"])
    for name in ("tls.crt", f"{CLIENT}.crt"):
        _cert(tmp_path, name).verify_directly_issued_by(_cert(tmp_path, "ca.crt"))

    assert _certs(tmp_path, "--client-name", "another", "--san=IP:192.0.2.7") == 0
    assert _files(tmp_path) == third


def test_a_directory_without_a_ca_key_gets_a_new_ca_only_when_it_must_issue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory an older release wrote (no ca.key): kept while nothing must be issued;
    a client pair needs a CA that can sign, so then the CA and both pairs are new."""
    assert _certs(tmp_path, "--client-secret", "") == 0
    (tmp_path / "ca.key").unlink()
    old = _files(tmp_path)
    assert _certs(tmp_path, "--client-secret", "") == 0
    assert _files(tmp_path) == old
    capsys.readouterr()

    assert _certs(tmp_path) == 0
    out = capsys.readouterr().out
    assert f"{tmp_path}/ca.crt, ca.key: replaced (ca.key not found)" in out, out
    new = _files(tmp_path)
    assert new["ca.crt"] != old["ca.crt"]
    for name in ("tls.crt", f"{CLIENT}.crt"):
        _cert(tmp_path, name).verify_directly_issued_by(_cert(tmp_path, "ca.crt"))


@pytest.mark.parametrize("value", ["../escape", "a/b", "Upper", "tls", "ca"])
def test_a_client_secret_that_cannot_name_the_files_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    assert _certs(tmp_path / "tls", "--client-secret", value) == EXIT_BAD_INPUT
    assert capsys.readouterr().err.startswith(f"dra-driver certs: --client-secret: {value!r}: ")
    assert not (tmp_path / "tls").exists()
