"""`dra-driver controller`'s allocation-gate webhook flags: served only with TLS, with the
legacy webhooks' caller flags and environment variables, refused when no caller could
ever be let in."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from controller.command import DEFAULT_WEBHOOK_PORT, settings_from_args
from controller.service import ServiceSettings
from dra_driver.cli import build_parser
from dra_driver.errors import InvalidParameterError
from dra_driver.tls.bundle import issue_bundle


@pytest.fixture
def tls(tmp_path: Path) -> tuple[str, ...]:
    bundle = issue_bundle(("127.0.0.1",), dt.datetime.now(dt.UTC), dt.timedelta(hours=1))
    for name, data in bundle.secret_data().items():
        (tmp_path / name).write_bytes(data)
    return (f"--tls-cert={tmp_path / 'tls.crt'}", f"--tls-key={tmp_path / 'tls.key'}")


def parse(*argv: str) -> ServiceSettings:
    return settings_from_args(build_parser().parse_args(["controller", *argv]))


def test_without_tls_the_controller_serves_no_webhook() -> None:
    assert parse().gate_webhook is None


def test_with_tls_it_serves_the_webhook_to_the_named_callers(
    tls: tuple[str, ...], tmp_path: Path
) -> None:
    webhook = parse(
        *tls,
        f"--client-ca-file={tmp_path / 'ca.crt'}",
        "--allowed-webhook-callers=kube-apiserver-kubelet-client, other",
    ).gate_webhook
    assert webhook is not None
    assert webhook.serve.port == DEFAULT_WEBHOOK_PORT
    assert webhook.serve.client_cas == (tmp_path / "ca.crt",)
    assert webhook.caller_auth.enabled and not webhook.caller_auth.open_webhook
    assert webhook.caller_auth.allowed_webhook_callers == {"kube-apiserver-kubelet-client", "other"}


def test_the_webhook_port_and_open_webhook_come_from_the_environment(
    tls: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEBHOOK_PORT", "9443")
    monkeypatch.setenv("OPEN_WEBHOOK", "true")
    webhook = parse(*tls).gate_webhook
    assert webhook is not None and webhook.serve.port == 9443
    assert webhook.caller_auth.open_webhook


def test_authenticated_callers_with_none_allowed_are_refused(tls: tuple[str, ...]) -> None:
    with pytest.raises(InvalidParameterError, match=r"--allowed-webhook-callers.*/allocation-gate"):
        parse(*tls)


def test_one_half_of_the_key_pair_is_refused(tls: tuple[str, ...]) -> None:
    with pytest.raises(InvalidParameterError, match="--tls-cert/--tls-key"):
        parse(tls[0], "--open-webhook")
