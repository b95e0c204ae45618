"""The keep-or-replace decision of `dra-driver certs`: each way a stored serving or client
bundle can be wrong is named, and a good one is kept until its renewal window."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from dra_driver.errors import InvalidParameterError
from dra_driver.tls.bundle import (
    bundle_problem,
    client_problem,
    issue_bundle,
    issue_serving_and_client,
    service_dns_names,
)

NOW = datetime(2026, 11, 30, tzinfo=UTC)
NAMES = service_dns_names("svc", "ns")
YEAR = timedelta(days=365)
MONTH = timedelta(days=30)


@pytest.fixture(scope="module")
def bundle():
    return issue_bundle(NAMES, NOW, YEAR)


def test_dns_names_cover_every_form_a_client_uses() -> None:
    assert NAMES == ("svc", "svc.ns", "svc.ns.svc", "svc.ns.svc.cluster.local")
    assert service_dns_names("a", "b", "corp.example")[-1] == "a.b.svc.corp.example"


def test_a_fresh_bundle_is_kept_until_its_renewal_window(bundle) -> None:
    assert bundle_problem(bundle, NAMES, NOW, MONTH) is None
    assert bundle_problem(bundle, NAMES, NOW + YEAR - MONTH - timedelta(days=1), MONTH) is None
    problem = bundle_problem(bundle, NAMES, NOW + YEAR - MONTH, MONTH)
    assert problem is not None and "within the renewal window" in problem


def test_a_bundle_from_the_future_is_not_valid_yet(bundle) -> None:
    assert bundle_problem(bundle, NAMES, NOW - timedelta(days=1), MONTH) == "not valid yet"


def test_each_inconsistency_is_named(bundle) -> None:
    other = issue_bundle(NAMES, NOW, YEAR)
    assert bundle_problem(replace(bundle, key=other.key), NAMES, NOW, MONTH) == (
        "tls.key does not belong to tls.crt"
    )
    assert bundle_problem(replace(bundle, ca_cert=other.ca_cert), NAMES, NOW, MONTH) == (
        "tls.crt is not signed by ca.crt"
    )
    assert bundle_problem(bundle, (*NAMES, "extra.ns.svc"), NOW, MONTH) == (
        "tls.crt does not name extra.ns.svc"
    )
    garbled = bundle_problem(replace(bundle, cert=b"not a pem"), NAMES, NOW, MONTH)
    assert garbled is not None and garbled.startswith("cannot be parsed")
    assert bundle_problem(replace(bundle, ca_cert=b""), NAMES, NOW, MONTH) is not None


def test_ip_addresses_go_in_as_ip_names() -> None:
    names = ("svc.ns.svc", "10.0.0.7")
    assert bundle_problem(issue_bundle(names, NOW, YEAR), names, NOW, MONTH) is None


def test_no_dns_name_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        issue_bundle((), NOW, YEAR)


@pytest.fixture(scope="module")
def issued():
    return issue_serving_and_client(NAMES, "vgpu-kube-scheduler", NOW, YEAR)


def test_serving_and_client_certificates_share_one_ca(issued) -> None:
    serving, client = issued
    assert serving.ca_cert == client.ca_cert
    assert bundle_problem(serving, NAMES, NOW, MONTH) is None
    assert client_problem(client, "vgpu-kube-scheduler", NOW, MONTH) is None
    cert = x509.load_pem_x509_certificate(client.cert)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.digital_signature


def test_each_way_a_client_certificate_is_wrong_is_named(issued) -> None:
    serving, client = issued
    name = "vgpu-kube-scheduler"
    assert client_problem(client, "someone-else", NOW, MONTH) == (
        "tls.crt is for CN vgpu-kube-scheduler, not someone-else"
    )
    # A serving certificate is not one for client authentication.
    assert client_problem(serving, NAMES[0], NOW, MONTH) == (
        "tls.crt is not for client authentication"
    )
    assert client_problem(replace(client, key=serving.key), name, NOW, MONTH) == (
        "tls.key does not belong to tls.crt"
    )
    other = issue_bundle(NAMES, NOW, YEAR)
    assert client_problem(replace(client, ca_cert=other.ca_cert), name, NOW, MONTH) == (
        "tls.crt is not signed by ca.crt"
    )
    late = client_problem(client, name, NOW + YEAR - MONTH, MONTH)
    assert late is not None and "within the renewal window" in late
    assert client_problem(client, name, NOW - timedelta(days=1), MONTH) == "not valid yet"


def test_a_client_certificate_needs_a_name() -> None:
    with pytest.raises(InvalidParameterError, match="needs a common name"):
        issue_serving_and_client(NAMES, "", NOW, YEAR)
