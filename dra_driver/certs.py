"""`dra-driver certs`: TLS for the legacy scheduler's webhook and extender without cert-manager.

Makes (or keeps) a CA and a serving certificate for the Service's DNS names in
a `kubernetes.io/tls` Secret (with `ca.crt`, as cert-manager writes it, so
kube-scheduler's extender `tlsConfig.caFile` can mount it), then points the
MutatingWebhookConfiguration's `caBundle` at that CA. Idempotent: a valid
certificate is kept and an up-to-date caBundle is left alone, so the Job can
run on every apply. Writes are conditional on the resourceVersion read, so
two runs at once never leave a Secret and a caBundle that disagree.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import ConflictError, KubeClient, NotFoundError, object_path
from dra_driver.tls_bundle import TlsBundle, bundle_problem, issue_bundle, service_dns_names

log = logging.getLogger(__name__)

COMPONENT = "certs"
"""User-Agent component: the RBAC audit checks these calls against the certs Job's roles."""
TLS_SECRET_TYPE = "kubernetes.io/tls"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
ATTEMPTS = 3
"""Rounds of read-check-write when another writer got in between (409)."""


@dataclass(frozen=True, slots=True)
class CertsSettings:
    namespace: str
    service: str
    """The Service the webhook and extender are reached through; its DNS names go in the cert."""

    secret: str
    webhooks: tuple[str, ...] = ()
    """MutatingWebhookConfigurations whose entries for `service` get the CA as caBundle."""

    validity: timedelta = timedelta(days=3650)
    """Lifetime of a new CA and certificate (no rotation machinery: long, like kubeadm's CA)."""

    renew_before: timedelta = timedelta(days=30)
    """A certificate expiring within this is replaced on the next run."""

    cluster_domain: str = "cluster.local"

    @property
    def dns_names(self) -> tuple[str, ...]:
        return service_dns_names(self.service, self.namespace, self.cluster_domain)


@dataclass(slots=True)
class CertsReport:
    """What one run did, one line per object, for the Job's log."""

    lines: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        log.info("certs: %s", line)
        self.lines.append(line)


def _decode(data: Mapping[str, str], key: str) -> bytes:
    try:
        return base64.b64decode(data.get(key) or "", validate=True)
    except ValueError:
        return b""


def _encode(values: Mapping[str, bytes]) -> dict[str, str]:
    return {key: base64.b64encode(value).decode() for key, value in values.items()}


async def ensure_secret(
    client: KubeClient, settings: CertsSettings, now: datetime, report: CertsReport
) -> TlsBundle:
    """The Secret's bundle when it can be kept, else a new one written in its place."""
    collection = f"/api/v1/namespaces/{settings.namespace}/secrets"
    path = object_path(collection, settings.secret)
    where = f"secret {settings.namespace}/{settings.secret}"
    for _ in range(ATTEMPTS):
        try:
            current: dict[str, Any] | None = await client.get(path)
        except NotFoundError:
            current = None
        if current is not None and current.get("type") != TLS_SECRET_TYPE:
            raise InvalidParameterError(
                "--secret",
                f"{where} has type {current.get('type')!r}, not {TLS_SECRET_TYPE}: "
                "refusing to overwrite a Secret this command did not make",
            )
        if current is not None:
            data = current.get("data") or {}
            kept = TlsBundle(
                _decode(data, "ca.crt"), _decode(data, "tls.crt"), _decode(data, "tls.key")
            )
            problem = bundle_problem(kept, settings.dns_names, now, settings.renew_before)
            if problem is None:
                report.add(f"{where}: kept (valid for {', '.join(settings.dns_names)})")
                return kept
        bundle = issue_bundle(settings.dns_names, now, settings.validity)
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": settings.secret, "namespace": settings.namespace},
            "type": TLS_SECRET_TYPE,
            "data": _encode(bundle.secret_data()),
        }
        try:
            if current is None:
                await client.create(collection, body)
                report.add(f"{where}: created")
            else:
                body["metadata"] = {**current["metadata"], **body["metadata"]}
                await client.replace(path, body)
                report.add(f"{where}: replaced ({problem})")
        except ConflictError:
            continue
        return bundle
    raise ConflictError(409, "Conflict", f"{where}: changed by another writer {ATTEMPTS} times")


async def ensure_ca_bundle(
    client: KubeClient, settings: CertsSettings, ca_cert: bytes, report: CertsReport
) -> None:
    """Set `caBundle` of every entry of each webhook configuration that calls `service`."""
    wanted = base64.b64encode(ca_cert).decode()
    for name in settings.webhooks:
        path = object_path(WEBHOOKS, name)
        for _ in range(ATTEMPTS):
            try:
                configuration = await client.get(path)
            except NotFoundError:
                raise InvalidParameterError(
                    "--webhook", f"MutatingWebhookConfiguration {name} not found"
                ) from None
            patch = _ca_bundle_patch(configuration, settings, wanted)
            if patch is None:
                raise InvalidParameterError(
                    "--webhook",
                    f"MutatingWebhookConfiguration {name} has no webhook calling service "
                    f"{settings.namespace}/{settings.service}",
                )
            if not patch:
                report.add(f"mutatingwebhookconfiguration {name}: caBundle up to date")
                break
            try:
                await client.patch(path, patch)
            except ConflictError:
                continue
            report.add(f"mutatingwebhookconfiguration {name}: caBundle set")
            break
        else:
            raise ConflictError(409, "Conflict", f"{name}: changed by another writer")


def _ca_bundle_patch(
    configuration: Mapping[str, Any], settings: CertsSettings, wanted: str
) -> dict[str, Any] | None:
    """The merge patch (empty when nothing differs), or None when no entry calls the service.
    It carries the whole list (a merge patch replaces lists) and the resourceVersion read,
    so a configuration changed in between is refused (409) rather than overwritten."""
    webhooks = [dict(webhook) for webhook in configuration.get("webhooks") or []]
    calls_service = changed = False
    for webhook in webhooks:
        client_config = dict(webhook.get("clientConfig") or {})
        service = client_config.get("service") or {}
        if (service.get("name"), service.get("namespace")) != (
            settings.service,
            settings.namespace,
        ):
            continue
        calls_service = True
        if client_config.get("caBundle") != wanted:
            webhook["clientConfig"] = {**client_config, "caBundle": wanted}
            changed = True
    if not calls_service:
        return None
    if not changed:
        return {}
    version = configuration["metadata"]["resourceVersion"]
    return {"metadata": {"resourceVersion": version}, "webhooks": webhooks}


async def ensure_certificates(
    client: KubeClient, settings: CertsSettings, now: datetime
) -> CertsReport:
    client = client.for_component(COMPONENT)
    report = CertsReport()
    bundle = await ensure_secret(client, settings, now, report)
    await ensure_ca_bundle(client, settings, bundle.ca_cert, report)
    return report


async def run_certs(
    kubeconfig: Path | None,
    settings: CertsSettings,
    emit: Callable[[str], None] = print,
) -> int:
    client = await KubeClient.from_kubeconfig(kubeconfig, component=COMPONENT)
    try:
        report = await ensure_certificates(client, settings, datetime.now(UTC))
    finally:
        await client.aclose()
    for line in report.lines:
        emit(line)
    return 0
