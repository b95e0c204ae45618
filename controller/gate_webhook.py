"""`/allocation-gate`: the mutating webhook that gives a new pod of our classes the allocation gate.

Why a webhook and not a MutatingAdmissionPolicy: whether a pod uses one of this
controller's DeviceClasses is written in its ResourceClaims and
ResourceClaimTemplates, not in the pod, and an admission policy's CEL sees only
the object under admission (reference kubernetes-dra.md §10). So the webhook
reads each claim or template the pod's `spec.resourceClaims` name and adds the
gate (allocation_gate.py) when one names our class.

It fails open at every step: a claim or template that cannot be read counts as
not ours (the template of a pod created before its template, an API hiccup),
and the deployed MutatingWebhookConfiguration has `failurePolicy: Ignore` with a
short timeout, so with the webhook down pods are created ungated and go the
ungated way, which still works (kube-scheduler tries them before the controller's
allocation lands). It never refuses a pod and has no side effect.

Served over TLS, with the same caller authentication as the legacy webhooks
(controller/legacy/caller_auth.py: the API server's admission client only).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from controller.allocation_gate import gate_patch, needs_gate
from controller.legacy.caller_auth import ALLOCATION_GATE_PATH, CallerAuthenticator
from controller.legacy.config import CallerAuthSettings
from controller.legacy.server import MAX_BODY_BYTES, ServeSettings
from controller.migration.webhook import (
    answer_review,
    patch_answer,
    review_answer,
)
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient, object_path
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.process.runtime import wait_event

log = logging.getLogger(__name__)


class AllocationGateWebhook:
    """Decides one pod's gate; `handle` is the aiohttp route."""

    def __init__(self, client: KubeClient, classes: Collection[str]) -> None:
        self.client = client
        self.classes = classes

    async def handle(self, request: web.Request) -> web.Response:
        return await answer_review(request, self.review)

    async def review(self, review: Mapping[str, Any]) -> dict[str, Any]:
        """The AdmissionReview answer for one request: always allowed, gated or not."""
        uid = review["uid"]
        pod = review.get("object") or {}
        kind = (review.get("kind") or {}).get("kind")
        if kind not in (None, "Pod") or review.get("operation", "CREATE") != "CREATE":
            return review_answer(uid, True)
        namespace = review.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
        specs = [
            await self._claim_spec(namespace, entry)
            for entry in (pod.get("spec") or {}).get("resourceClaims") or []
        ]
        if not needs_gate(pod, specs, self.classes):
            return review_answer(uid, True)
        return review_answer(uid, True, **patch_answer(gate_patch(pod)))

    async def _claim_spec(
        self, namespace: str, entry: Mapping[str, Any]
    ) -> Mapping[str, Any] | None:
        """The claim spec a `spec.resourceClaims` entry leads to; None when it cannot be read."""
        if entry.get("resourceClaimName"):
            kind, name = "resourceclaims", str(entry["resourceClaimName"])
        elif entry.get("resourceClaimTemplateName"):
            kind, name = "resourceclaimtemplates", str(entry["resourceClaimTemplateName"])
        else:
            return None
        try:
            found = await self.client.get(
                object_path(f"{RESOURCE_API}/namespaces/{namespace}/{kind}", name)
            )
        except ApiError as error:
            log.info(
                "pod not gated: its claim cannot be read",
                extra={"namespace": namespace, "kind": kind, "name": name, "error": str(error)},
            )
            return None
        spec = found.get("spec") or {}
        return (spec.get("spec") or {}) if kind == "resourceclaimtemplates" else spec


CERTIFICATE_POLL_S = 5.0
"""How often a controller whose webhook certificate is not mounted yet looks again
(kubelet fills an optional Secret volume once the Secret exists)."""


@dataclass(frozen=True, slots=True)
class GateWebhookSettings:
    """How `dra-driver controller` serves the webhook (`--tls-cert`, `--webhook-port`, ...).

    Every replica serves it, leader or not: the API server sends admission to any
    endpoint of the Service, and the answer needs no leadership (it reads, never writes)."""

    serve: ServeSettings
    caller_auth: CallerAuthSettings = field(default_factory=CallerAuthSettings)
    certificate_poll_s: float = CERTIFICATE_POLL_S
    """How often to look for a certificate not mounted yet (seconds)."""


class GateWebhookServer:
    """The webhook over HTTPS, callers checked; `port` is the one it listens on."""

    def __init__(
        self,
        client: KubeClient,
        classes: Collection[str],
        serve: ServeSettings,
        caller_auth: CallerAuthSettings,
    ) -> None:
        self.webhook = AllocationGateWebhook(client, classes)
        self.caller_auth = CallerAuthenticator(client, caller_auth)
        self.serve = serve
        self.port = serve.port
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        context = self.serve.ssl_context()
        app = web.Application(
            client_max_size=MAX_BODY_BYTES, middlewares=[self.caller_auth.middleware]
        )
        app.router.add_post(ALLOCATION_GATE_PATH, self.webhook.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        try:
            await web.TCPSite(
                self._runner, self.serve.host, self.serve.port, ssl_context=context
            ).start()
        except OSError as error:
            await self.aclose()
            raise InvalidParameterError(
                "ServeSettings.host/port",
                f"cannot listen on {self.serve.host}:{self.serve.port}: {error}",
            ) from error
        self.port = self._runner.addresses[0][1]

    def _missing_files(self) -> list[str]:
        files = (self.serve.tls_cert, self.serve.tls_key)
        return [str(path) for path in files if path is not None and not path.exists()]

    async def start_if_certified(self) -> bool:
        """Start now if the certificate and key exist (False, nothing started, if not).
        A certificate that cannot be served is logged, not raised: the webhook fails
        open, and the allocator must not stop for it."""
        if self._missing_files():
            return False
        try:
            await self.start()
        except (DriverError, OSError, ValueError) as error:
            log.error(
                "allocation-gate webhook not served: pods are created ungated",
                extra={"error": str(error)},
            )
        else:
            log.info("allocation-gate webhook serving", extra={"port": self.port})
        return True

    async def start_once_certified(
        self, stop: asyncio.Event, poll_s: float = CERTIFICATE_POLL_S
    ) -> None:
        """Start as soon as the certificate and key files exist, or return when `stop` is
        set first. Their Secret is mounted optional, so the allocator never waits for the
        certs Job; until they appear the webhook is absent and, failing open, the API
        server creates pods ungated (today's path)."""
        log.warning(
            "allocation-gate webhook waits for its certificate",
            extra={"missing": self._missing_files()},
        )
        while not await self.start_if_certified():
            if await wait_event(stop, poll_s):
                return

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> GateWebhookServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
