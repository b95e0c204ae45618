"""`dra-driver certs --out-dir`: the CA, the serving pair and kube-scheduler's client pair
as files, for a webhook or extender reached by URL from outside the cluster.

The serving pair names the subject alternative names given by `--san`; the client
pair (`<--client-secret>.crt`/`.key`, CN `--client-name`) is what kube-scheduler's
extender `tlsConfig` presents and the scheduler's `--client-ca-file`/`--allowed-callers`
accept, as with the Secrets. Unlike the Secrets, the CA's key is kept (`ca.key`,
mode 0600): these files live on a host the operator controls, and a later run then
issues a renewed, renamed or newly asked certificate from the same CA, so no caller
has to be given a new `ca.crt`. No API is called.

A pair still valid (for the names, the CN, and signed by `ca.crt`) is kept. When a pair
must be issued and the CA cannot sign (no `ca.key`, as an older release left the
directory, or the CA expires within the renewal window), a new CA is made and every
pair reissued. Each file is replaced atomically, keys with mode 0600 from the start;
the CA's files are written before the pairs it signs, so a run interrupted anywhere
leaves files the next run finds wrong (`ca.key does not belong to ca.crt`, `tls.crt
is not signed by ca.crt`) and replaces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dra_driver.errors import InvalidParameterError
from dra_driver.objects.names import is_dns_subdomain
from dra_driver.process.atomic_file import write_atomically
from dra_driver.tls import DEFAULT_CLIENT_NAME
from dra_driver.tls.bundle import (
    CertificateAuthority,
    TlsBundle,
    bundle_problem,
    client_problem,
    load_authority,
    parse_subject_alt_name,
)
from dra_driver.tls.certs import CertsReport

PUBLIC_MODE = 0o644
PRIVATE_MODE = 0o600
CA_CERT = "ca.crt"
CA_KEY = "ca.key"
RESERVED_STEMS = {"ca": "CA", "tls": "serving pair"}
"""Stems of the files beside the client pair, which `--client-secret` must not reuse."""


@dataclass(frozen=True, slots=True)
class CertFilesSettings:
    out_dir: Path
    names: tuple[str, ...]
    """Subject alternative names as `parse_subject_alt_name` returns them (host or address)."""

    client_file: str | None = None
    """Stem of the client pair's files (`--client-secret`); None: no client pair."""

    client_name: str = DEFAULT_CLIENT_NAME
    validity: timedelta = timedelta(days=3650)
    renew_before: timedelta = timedelta(days=30)

    @classmethod
    def from_flags(
        cls,
        out_dir: Path,
        sans: Sequence[str],
        validity: timedelta,
        client_secret: str = "",
        client_name: str = DEFAULT_CLIENT_NAME,
    ) -> CertFilesSettings:
        """Check the `--san` values (at least one is needed, since no Service names them)
        and the client flags, before anything is written."""
        if not sans:
            raise InvalidParameterError(
                "--san",
                "--out-dir needs at least one --san DNS:<host name> or IP:<address>, "
                "the name the webhook or extender is reached by",
            )
        names = tuple(dict.fromkeys(parse_subject_alt_name(san) for san in sans))
        if client_secret and not is_dns_subdomain(client_secret):
            raise InvalidParameterError(
                "--client-secret",
                f"{client_secret!r}: with --out-dir it names the client files "
                "<name>.crt and <name>.key, so it must be a Secret name (lowercase letters, "
                "digits, '-' and '.'), or '' for no client certificate",
            )
        if client_secret in RESERVED_STEMS:
            raise InvalidParameterError(
                "--client-secret",
                f"{client_secret!r}: with --out-dir it names the client files, and "
                f"{client_secret}.crt is the {RESERVED_STEMS[client_secret]}'s",
            )
        if client_secret and not client_name:
            raise InvalidParameterError("--client-name", "a client certificate needs a common name")
        return cls(out_dir, names, client_secret or None, client_name, validity)


@dataclass(frozen=True, slots=True)
class _PairFiles:
    """One certificate and its key in the directory, checked against the shared ca.crt."""

    cert_file: str
    key_file: str
    subject: str
    """Whom the certificate is for, as the report says it (`a.example.com`, `CN x`)."""

    problem: Callable[[TlsBundle], str | None]
    issue: Callable[[CertificateAuthority], TlsBundle]

    def label(self, out_dir: Path) -> str:
        return f"{out_dir / self.cert_file}, {self.key_file}"


def _pairs(settings: CertFilesSettings, now: datetime) -> list[_PairFiles]:
    validity, renew_before = settings.validity, settings.renew_before
    pairs = [
        _PairFiles(
            "tls.crt",
            "tls.key",
            ", ".join(settings.names),
            lambda bundle: bundle_problem(bundle, settings.names, now, renew_before),
            lambda authority: authority.serving(settings.names, now, validity),
        )
    ]
    if settings.client_file is not None:
        name = settings.client_name
        pairs.append(
            _PairFiles(
                f"{settings.client_file}.crt",
                f"{settings.client_file}.key",
                f"CN {name}",
                lambda bundle: client_problem(bundle, name, now, renew_before),
                lambda authority: authority.client(name, now, validity),
            )
        )
    return pairs


def _read(out_dir: Path, name: str) -> bytes | None:
    try:
        return (out_dir / name).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InvalidParameterError(
            "--out-dir", f"cannot read {error.filename}: {error.strerror}"
        ) from None


def _write(out_dir: Path, contents: dict[str, tuple[bytes, int]]) -> None:
    """Each file atomically, in the order given (a key before the certificate it belongs to)."""
    try:
        for name, (content, mode) in contents.items():
            write_atomically(out_dir / name, content, mode)
    except OSError as error:
        raise InvalidParameterError(
            "--out-dir", f"cannot write {error.filename or out_dir}: {error.strerror}"
        ) from None


def _pair_problem(out_dir: Path, pair: _PairFiles, ca_cert: bytes | None) -> str | None:
    cert, key = _read(out_dir, pair.cert_file), _read(out_dir, pair.key_file)
    if ca_cert is None or cert is None or key is None:
        return "not found"
    return pair.problem(TlsBundle(ca_cert, cert, key))


def _authority(
    out_dir: Path, ca_cert: bytes | None, settings: CertFilesSettings, now: datetime
) -> CertificateAuthority | str:
    """The kept CA, or why there is none that can sign."""
    if ca_cert is None:
        return "not found"
    ca_key = _read(out_dir, CA_KEY)
    if ca_key is None:
        return f"{CA_KEY} not found"
    return load_authority(ca_cert, ca_key, now, settings.renew_before)


def ensure_cert_files(settings: CertFilesSettings, now: datetime) -> CertsReport:
    """Keep each pair that is still right and issue the others, from the kept CA when it
    can sign, else from a new one; one report line for the CA and one per pair."""
    out_dir = settings.out_dir
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InvalidParameterError(
            "--out-dir", f"cannot create {out_dir}: {error.strerror}"
        ) from None
    report = CertsReport()
    ca_label = f"{out_dir / CA_CERT}, {CA_KEY}"
    ca_cert = _read(out_dir, CA_CERT)
    pairs = [(pair, _pair_problem(out_dir, pair, ca_cert)) for pair in _pairs(settings, now)]
    authority = None
    if any(problem is not None for _, problem in pairs):
        authority = _authority(out_dir, ca_cert, settings, now)
    if isinstance(authority, str):
        why = authority
        authority = CertificateAuthority.new(now, settings.validity)
        _write(
            out_dir,
            {CA_KEY: (authority.key_pem(), PRIVATE_MODE), CA_CERT: (authority.pem, PUBLIC_MODE)},
        )
        report.add(f"{ca_label}: " + ("written" if ca_cert is None else f"replaced ({why})"))
        pairs = [(pair, problem or "renewed with the CA") for pair, problem in pairs]
    else:
        report.add(f"{ca_label}: kept")
    for pair, problem in pairs:
        if problem is None or authority is None:
            report.add(f"{pair.label(out_dir)}: kept (valid for {pair.subject})")
            continue
        bundle = pair.issue(authority)
        _write(
            out_dir,
            {
                pair.key_file: (bundle.key, PRIVATE_MODE),
                pair.cert_file: (bundle.cert, PUBLIC_MODE),
            },
        )
        verb = "written" if problem == "not found" else f"replaced ({problem})"
        report.add(f"{pair.label(out_dir)}: {verb} for {pair.subject}")
    return report


def run_cert_files(settings: CertFilesSettings, emit: Callable[[str], None] = print) -> int:
    for line in ensure_cert_files(settings, datetime.now(UTC)).lines:
        emit(line)
    return 0
