"""TLS for the simulated legacy scheduler, made as `dra-driver certs --out-dir` makes it.

deploy/ serves /filter, /bind and /webhook over TLS and lets only
kube-scheduler's client certificate (CN `vgpu-kube-scheduler`, from the CA that
signed the serving certificate) into /filter and /bind. The simulation does
the same with the project's own issuer: one CA, a serving certificate for the
loopback address and kube-scheduler's client certificate; plus, for the tamper
attempts, a client certificate with the same name from a CA the scheduler was
never told about, which a forger could make on any laptop.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dra_driver.process.atomic_file import write_atomically
from dra_driver.tls.bundle import TlsBundle, issue_serving_and_client
from simulator.identities import KUBE_SCHEDULER_CLIENT_NAME

LOOPBACK = "127.0.0.1"
VALIDITY = timedelta(days=1)
"""Long enough for any run; the files go with the run's directory."""
KEY_MODE = 0o600
CERT_MODE = 0o644


@dataclass(frozen=True, slots=True)
class CertificatePair:
    cert: Path
    key: Path


@dataclass(frozen=True, slots=True)
class LegacyTLS:
    ca: Path
    """Signs the serving certificate and kube-scheduler's client certificate (deploy/'s
    `--client-ca-file` and the extender's and webhook's `caFile`/`caBundle`)."""
    serving: CertificatePair
    kube_scheduler: CertificatePair
    untrusted: CertificatePair
    """kube-scheduler's name, signed by a CA nobody trusts."""


def _write(directory: Path, name: str, bundle: TlsBundle) -> CertificatePair:
    pair = CertificatePair(directory / f"{name}.crt", directory / f"{name}.key")
    write_atomically(pair.cert, bundle.cert, mode=CERT_MODE)
    write_atomically(pair.key, bundle.key, mode=KEY_MODE)
    return pair


def write_legacy_tls(directory: Path) -> LegacyTLS:
    """Issue and write the certificates; the CA keys are discarded, as `certs` does."""
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC)
    serving, client = issue_serving_and_client(
        (LOOPBACK,), KUBE_SCHEDULER_CLIENT_NAME, now, VALIDITY
    )
    _, forged = issue_serving_and_client((LOOPBACK,), KUBE_SCHEDULER_CLIENT_NAME, now, VALIDITY)
    ca = directory / "ca.crt"
    write_atomically(ca, serving.ca_cert, mode=CERT_MODE)
    return LegacyTLS(
        ca=ca,
        serving=_write(directory, "serving", serving),
        kube_scheduler=_write(directory, "kube-scheduler", client),
        untrusted=_write(directory, "untrusted", forged),
    )
