"""A private CA, a serving certificate for an in-cluster Service and a client certificate
for its caller, and whether each can be kept.

The legacy scheduler's webhook and extender are called over TLS by the API
server and by kube-scheduler, which both check the certificate against a CA
they were given (the webhook's `caBundle`, the extender's `tlsConfig.caFile`).
kube-scheduler in turn proves who it is with a client certificate from the same
CA (`tlsConfig.certFile`), whose CN the scheduler's `--allowed-callers` names:
its extender client can send a certificate, never a token. Without
cert-manager, `dra-driver certs` makes that CA and both certificates here. When
they are reached by URL from outside the cluster, the certificate names what that URL
holds instead: the subject alternative names given as `DNS:<name>` or
`IP:<address>`, and the CA's key is kept (`load_authority` takes it back), so that a
later run issues from the same CA. Pure: no files, no API; the caller passes the clock.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.names import DNS_LABEL_MAX, DNS_SUBDOMAIN_MAX, is_dns_label

CA_NAME = "vgpu-dra-driver CA"
CLOCK_SKEW = timedelta(minutes=5)
"""Certificates start this long before `now`, so a node whose clock is behind accepts them."""


@dataclass(frozen=True, slots=True)
class TlsBundle:
    """PEM bytes, under the keys a `kubernetes.io/tls` Secret (and cert-manager) uses."""

    ca_cert: bytes
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, bytes]:
        return {"ca.crt": self.ca_cert, "tls.crt": self.cert, "tls.key": self.key}


def service_dns_names(
    service: str, namespace: str, cluster_domain: str = "cluster.local"
) -> tuple[str, ...]:
    """Every name a client may use for the Service; the API server dials `<svc>.<ns>.svc`."""
    return (
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.{cluster_domain}",
    )


_SAN_KINDS = ("DNS", "IP")


def parse_subject_alt_name(text: str, where: str = "--san") -> str:
    """`DNS:<name>` or `IP:<address>` (openssl's spelling) as the name `issue_bundle` takes:
    a lowercase host name (`*.` allowed as its first label) or a normalised address, so
    that a rerun compares equal. A bare or mistyped value is refused: a certificate for
    the wrong name fails only later, in the client's handshake."""
    kind, colon, value = text.partition(":")
    kind = kind.upper()
    if not colon or kind not in _SAN_KINDS or not value:
        raise InvalidParameterError(where, f"{text!r}: write DNS:<host name> or IP:<address>")
    if kind == "IP":
        try:
            return str(ipaddress.ip_address(value))
        except ValueError:
            raise InvalidParameterError(
                where, f"{text!r}: {value!r} is not an IPv4 or IPv6 address"
            ) from None
    if _is_address(value):
        raise InvalidParameterError(
            where, f"{text!r}: {value!r} is an address, which clients match only as IP:{value}"
        )
    name = value.lower().removesuffix(".")
    labels = name.split(".")
    if labels[0] == "*" and len(labels) > 1:
        labels = labels[1:]
    if len(name) > DNS_SUBDOMAIN_MAX or not all(is_dns_label(label) for label in labels):
        raise InvalidParameterError(
            where,
            f"{text!r}: {value!r} is not a host name (dot-separated labels of letters, "
            f"digits and '-', at most {DNS_LABEL_MAX} each; '*.' only first)",
        )
    return name


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def issue_bundle(dns_names: tuple[str, ...], now: datetime, validity: timedelta) -> TlsBundle:
    """A fresh CA (its key is discarded: nothing else is ever signed with it) and a
    serving certificate for `dns_names`, both valid from `now` for `validity`."""
    authority = CertificateAuthority.new(now, validity)
    return authority.serving(dns_names, now, validity)


def issue_serving_and_client(
    dns_names: tuple[str, ...], client_name: str, now: datetime, validity: timedelta
) -> tuple[TlsBundle, TlsBundle]:
    """A fresh CA, a serving certificate for `dns_names` and a client certificate with
    subject CN `client_name` (the identity the legacy scheduler allows), both signed by
    that CA and valid from `now` for `validity`. The CA key is discarded here too: the
    two are always issued together, so renewing either renews both and no CA key is
    ever stored where a reader of Secrets could mint another identity."""
    if not client_name:
        raise InvalidParameterError("--client-name", "a client certificate needs a common name")
    authority = CertificateAuthority.new(now, validity)
    return authority.serving(dns_names, now, validity), authority.client(client_name, now, validity)


@dataclass(frozen=True, slots=True)
class CertificateAuthority:
    """A CA that signs certificates: made for one issue (`issue_*`, its key then dropped),
    or taken back from its PEM files by `load_authority` (`--out-dir` keeps the key)."""

    key: ec.EllipticCurvePrivateKey
    subject: x509.Name
    pem: bytes
    not_after: datetime
    """No certificate it signs outlives it: past this a chain to it no longer verifies."""

    @classmethod
    def new(cls, now: datetime, validity: timedelta) -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
        cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(now + validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_key_usage(key_cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
            .sign(key, hashes.SHA256())
        )
        return cls(key, subject, cert.public_bytes(serialization.Encoding.PEM), now + validity)

    def key_pem(self) -> bytes:
        """The private key, unencrypted: to be written only with mode 0600."""
        return _key_pem(self.key)

    def serving(self, dns_names: tuple[str, ...], now: datetime, validity: timedelta) -> TlsBundle:
        if not dns_names:
            raise InvalidParameterError(
                "dns_names", "a serving certificate needs at least one DNS name"
            )
        names = x509.SubjectAlternativeName([_general_name(n) for n in dns_names])
        return self._sign(
            dns_names[0],
            [names, x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH])],
            now,
            validity,
        )

    def client(self, common_name: str, now: datetime, validity: timedelta) -> TlsBundle:
        """A certificate for TLS client authentication only (as cert-manager issues one with
        usages `client auth, digital signature`)."""
        if not common_name:
            raise InvalidParameterError("--client-name", "a client certificate needs a common name")
        usages = [_key_usage(), x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])]
        return self._sign(common_name, usages, now, validity)

    def _sign(
        self,
        common_name: str,
        extensions: list[x509.ExtensionType],
        now: datetime,
        validity: timedelta,
    ) -> TlsBundle:
        key = ec.generate_private_key(ec.SECP256R1())
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
            .issuer_name(self.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - CLOCK_SKEW)
            .not_valid_after(min(now + validity, self.not_after))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), False
            )
        )
        for extension in extensions:
            builder = builder.add_extension(
                extension, critical=isinstance(extension, x509.KeyUsage)
            )
        cert = builder.sign(self.key, hashes.SHA256())
        return TlsBundle(
            ca_cert=self.pem,
            cert=cert.public_bytes(serialization.Encoding.PEM),
            key=_key_pem(key),
        )


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def load_authority(
    ca_cert: bytes, ca_key: bytes, now: datetime, renew_before: timedelta
) -> CertificateAuthority | str:
    """The CA of `ca_cert` signing with `ca_key`, or why it cannot be used to issue: a key
    that is not the certificate's, a certificate that is no CA, or one expiring within
    `renew_before` (whatever it signed would have to be replaced soon after)."""
    try:
        cert = x509.load_pem_x509_certificate(ca_cert)
        key = serialization.load_pem_private_key(ca_key, password=None)
    except ValueError as error:
        return f"cannot be parsed ({error})"
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.public_key() != cert.public_key():
        return "ca.key does not belong to ca.crt"
    try:
        is_ca = cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    except x509.ExtensionNotFound:
        is_ca = False
    if not is_ca:
        return "ca.crt is not a CA certificate"
    problem = _lifetime_problem(cert, cert, now, renew_before)
    if problem is not None:
        return problem
    return CertificateAuthority(key, cert.subject, ca_cert, cert.not_valid_after_utc)


def _key_usage(key_cert_sign: bool = False) -> x509.KeyUsage:
    """Digital signature (what an ECDSA key does in a handshake), plus signing for a CA."""
    return x509.KeyUsage(
        digital_signature=True,
        key_cert_sign=key_cert_sign,
        crl_sign=key_cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        encipher_only=False,
        decipher_only=False,
    )


def _general_name(name: str) -> x509.GeneralName:
    if _is_address(name):
        return x509.IPAddress(ipaddress.ip_address(name))
    return x509.DNSName(name)


def bundle_problem(
    bundle: TlsBundle, dns_names: tuple[str, ...], now: datetime, renew_before: timedelta
) -> str | None:
    """Why `bundle` must be replaced, or None when it serves `dns_names` until past
    `now + renew_before` (so a rerun keeps it and clients need no new CA)."""
    loaded = _signed_pair(bundle)
    if isinstance(loaded, str):
        return loaded
    ca_cert, cert = loaded
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return "tls.crt has no subjectAltName"
    present = {str(n) for n in names.get_values_for_type(x509.DNSName)}
    present |= {str(n) for n in names.get_values_for_type(x509.IPAddress)}
    missing = [name for name in dns_names if name not in present]
    if missing:
        return f"tls.crt does not name {', '.join(missing)}"
    return _lifetime_problem(ca_cert, cert, now, renew_before)


def client_problem(
    bundle: TlsBundle, common_name: str, now: datetime, renew_before: timedelta
) -> str | None:
    """Why a client certificate must be replaced, or None when it identifies `common_name`
    (its only subject CN, what the legacy scheduler's `--allowed-callers` matches) for
    client authentication until past `now + renew_before`."""
    loaded = _signed_pair(bundle)
    if isinstance(loaded, str):
        return loaded
    ca_cert, cert = loaded
    names = [str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)]
    if names != [common_name]:
        return f"tls.crt is for CN {', '.join(names) or '(none)'}, not {common_name}"
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        usages = x509.ExtendedKeyUsage([])
    if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
        return "tls.crt is not for client authentication"
    return _lifetime_problem(ca_cert, cert, now, renew_before)


def _signed_pair(bundle: TlsBundle) -> tuple[x509.Certificate, x509.Certificate] | str:
    """The bundle's CA and certificate when the key is the certificate's and the CA signed
    it; otherwise what is wrong."""
    try:
        ca_cert = x509.load_pem_x509_certificate(bundle.ca_cert)
        cert = x509.load_pem_x509_certificate(bundle.cert)
        key = serialization.load_pem_private_key(bundle.key, password=None)
    except ValueError as error:
        return f"cannot be parsed ({error})"
    if cert.public_key() != key.public_key():
        return "tls.key does not belong to tls.crt"
    try:
        cert.verify_directly_issued_by(ca_cert)
    except (ValueError, TypeError, InvalidSignature):
        return "tls.crt is not signed by ca.crt"
    return ca_cert, cert


def _lifetime_problem(
    ca_cert: x509.Certificate, cert: x509.Certificate, now: datetime, renew_before: timedelta
) -> str | None:
    expires = min(cert.not_valid_after_utc, ca_cert.not_valid_after_utc)
    if expires <= now + renew_before:
        return f"expires at {expires.isoformat()}, within the renewal window"
    if max(cert.not_valid_before_utc, ca_cert.not_valid_before_utc) > now + CLOCK_SKEW:
        return "not valid yet"
    return None
