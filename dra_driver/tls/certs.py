"""`dra-driver certs`: TLS for the legacy scheduler's webhook and extender without cert-manager.

Makes (or keeps) a CA and a serving certificate for the Service's DNS names in
a `kubernetes.io/tls` Secret (with `ca.crt`, as cert-manager writes it, so
kube-scheduler's extender `tlsConfig.caFile` can mount it), then points the
MutatingWebhookConfiguration's `caBundle` at that CA. With `--client-secret`
it also keeps, in a second such Secret, a client certificate from the same CA
with the CN `--client-name`: what the second kube-scheduler presents to
/filter and /bind (its extender can send a certificate, never a token) and the
scheduler's `--client-ca-file`/`--allowed-callers` accept. The CA key is never
stored, so both certificates are issued, and renewed, together. Idempotent:
valid certificates are kept and an up-to-date caBundle is left alone, so the
Job can run on every apply. Writes are conditional on the resourceVersion
read, so two runs at once never leave a Secret and a caBundle that disagree.

With `--out-dir` the same certificates go to files instead (`cert_files`).
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
from dra_driver.tls import DEFAULT_CLIENT_NAME
from dra_driver.tls.bundle import (
    TlsBundle,
    bundle_problem,
    client_problem,
    issue_bundle,
    issue_serving_and_client,
    service_dns_names,
)

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

    client_secret: str | None = None
    """Secret for the client certificate the second kube-scheduler presents to /filter and
    /bind (its extender config can send a certificate, never a token); None: none is made."""

    client_name: str = DEFAULT_CLIENT_NAME
    """The client certificate's subject CN: the identity the scheduler's `--allowed-callers`
    lets in."""

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


@dataclass(frozen=True, slots=True)
class _StoredSecret:
    """One TLS Secret as read: the object (None when absent) and its bundle."""

    name: str
    flag: str
    current: dict[str, Any] | None
    where: str

    @property
    def bundle(self) -> TlsBundle | None:
        if self.current is None:
            return None
        data = self.current.get("data") or {}
        return TlsBundle(
            _decode(data, "ca.crt"), _decode(data, "tls.crt"), _decode(data, "tls.key")
        )


async def _read_secret(client: KubeClient, namespace: str, name: str, flag: str) -> _StoredSecret:
    where = f"secret {namespace}/{name}"
    try:
        current: dict[str, Any] | None = await client.get(
            object_path(f"/api/v1/namespaces/{namespace}/secrets", name)
        )
    except NotFoundError:
        current = None
    if current is not None and current.get("type") != TLS_SECRET_TYPE:
        raise InvalidParameterError(
            flag,
            f"{where} has type {current.get('type')!r}, not {TLS_SECRET_TYPE}: "
            "refusing to overwrite a Secret this command did not make",
        )
    return _StoredSecret(name, flag, current, where)


def _serving_problem(stored: _StoredSecret, settings: CertsSettings, now: datetime) -> str | None:
    bundle = stored.bundle
    if bundle is None:
        return "not found"
    return bundle_problem(bundle, settings.dns_names, now, settings.renew_before)


def _client_problem(
    stored: _StoredSecret, serving: _StoredSecret, settings: CertsSettings, now: datetime
) -> str | None:
    """Why the client Secret must be reissued: its own flaw, or a CA other than the serving
    Secret's (the one the scheduler's `--client-ca-file` trusts)."""
    bundle, serving_bundle = stored.bundle, serving.bundle
    if bundle is None:
        return "not found"
    problem = client_problem(bundle, settings.client_name, now, settings.renew_before)
    if problem is None and (serving_bundle is None or bundle.ca_cert != serving_bundle.ca_cert):
        return f"ca.crt is not the CA of {serving.where}"
    return problem


async def _write_secret(
    client: KubeClient,
    namespace: str,
    stored: _StoredSecret,
    bundle: TlsBundle,
    problem: str,
    report: CertsReport,
) -> None:
    """Create the Secret, or replace it conditionally on the resourceVersion read (409 when
    another writer got in between)."""
    collection = f"/api/v1/namespaces/{namespace}/secrets"
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": stored.name, "namespace": namespace},
        "type": TLS_SECRET_TYPE,
        "data": _encode(bundle.secret_data()),
    }
    if stored.current is None:
        await client.create(collection, body)
        report.add(f"{stored.where}: created")
        return
    body["metadata"] = {**stored.current["metadata"], **body["metadata"]}
    await client.replace(object_path(collection, stored.name), body)
    report.add(f"{stored.where}: replaced ({problem})")


def _issue(settings: CertsSettings, now: datetime) -> tuple[TlsBundle, ...]:
    """The serving bundle, and the client bundle from the same CA when one is asked for."""
    if settings.client_secret is None:
        return (issue_bundle(settings.dns_names, now, settings.validity),)
    return issue_serving_and_client(
        settings.dns_names, settings.client_name, now, settings.validity
    )


async def ensure_secrets(
    client: KubeClient, settings: CertsSettings, now: datetime, report: CertsReport
) -> TlsBundle:
    """The serving Secret's bundle when it, and the client Secret if one is asked for, can
    be kept; else a new CA with a serving and a client certificate written over both.

    The two are only ever renewed together, because the CA key is not kept: a client
    certificate can be signed by the serving CA only in the run that makes that CA. A run
    stopped between the two writes leaves CAs that differ, which the next run replaces."""
    for _ in range(ATTEMPTS):
        serving = await _read_secret(client, settings.namespace, settings.secret, "--secret")
        stored = [(serving, _serving_problem(serving, settings, now))]
        kept = [f"valid for {', '.join(settings.dns_names)}"]
        if settings.client_secret is not None:
            caller = await _read_secret(
                client, settings.namespace, settings.client_secret, "--client-secret"
            )
            stored.append((caller, _client_problem(caller, serving, settings, now)))
            kept.append(f"valid for CN {settings.client_name}")
        wrong = [f"{secret.where}: {problem}" for secret, problem in stored if problem]
        if not wrong and serving.bundle is not None:
            for (secret, _), why in zip(stored, kept, strict=True):
                report.add(f"{secret.where}: kept ({why})")
            return serving.bundle
        issued = _issue(settings, now)
        try:
            for (secret, problem), bundle in zip(stored, issued, strict=True):
                cause = problem or f"renewed with {wrong[0]}"
                await _write_secret(client, settings.namespace, secret, bundle, cause, report)
        except ConflictError:
            continue
        return issued[0]
    raise ConflictError(
        409,
        "Conflict",
        f"secret {settings.namespace}/{settings.secret}: changed by another "
        f"writer {ATTEMPTS} times",
    )


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
    bundle = await ensure_secrets(client, settings, now, report)
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
