"""Who called /filter, /bind, /preempt or /webhook, and may they (HAMi#3030: anyone could bind).

kube-scheduler (/filter, /bind, /preempt) and the API server (/webhook) are the only
legitimate callers. A caller is known by a client certificate the TLS server
verified against a `--client-ca-file` (its subject CN), or by a bearer token the
API server vouches for through TokenReview (`authentication.k8s.io/v1`); the
identity must be in the path's list: `--allowed-callers` for the extender's
paths, `--allowed-webhook-callers` for /webhook, unless `--open-webhook` leaves
/webhook to anyone (an API server without a client certificate). No identity is
a 401, one not allowed a 403, each logged with the caller's address.
TokenReview answers are reused for a short TTL so a busy /filter does not wait
on the API server every call.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from controller.legacy.config import CallerAuthSettings
from dra_driver.kube.rest import ApiError, KubeClient

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
EXTENDER_PATHS = frozenset({"/filter", "/bind", "/preempt"})
WEBHOOK_PATH = "/webhook"
ALLOCATION_GATE_PATH = "/allocation-gate"
"""The DRA controller's gate webhook (controller/gate_webhook.py), called by the API server."""
WEBHOOK_PATHS = frozenset({WEBHOOK_PATH, "/migrate", ALLOCATION_GATE_PATH})
"""Only these are guarded. Health, readiness and metrics stay open: probes and Prometheus
carry no identity."""
CACHE_LIMIT = 1024
"""Distinct tokens remembered; beyond it the oldest answer is forgotten first."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a caller is turned away: the HTTP status and what to tell it."""

    status: int
    reason: str


def certificate_identity(peercert: Any) -> str | None:
    """The subject CN of a client certificate `ssl` verified (None when none was sent)."""
    if not isinstance(peercert, dict):
        return None
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def bearer_token(header: str | None) -> str | None:
    scheme, _, token = (header or "").partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class CallerAuthenticator:
    """Identifies a request's caller and lets in only the allowed ones."""

    def __init__(self, client: KubeClient, settings: CallerAuthSettings) -> None:
        self.client = client
        self.settings = settings
        self._reviews: dict[str, tuple[float, str | None]] = {}

    def allowed_for(self, path: str) -> frozenset[str] | None:
        """The identities `path` lets in, or None when it is open to anyone."""
        settings = self.settings
        if not settings.enabled:
            return None
        if path in EXTENDER_PATHS:
            return settings.allowed_callers
        if path in WEBHOOK_PATHS and not settings.open_webhook:
            return settings.allowed_webhook_callers
        return None

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        allowed = self.allowed_for(request.path)
        if allowed is None:
            return await handler(request)
        identity, refusal = await self._judge(request, allowed)
        if refusal is None:
            return await handler(request)
        log.warning(
            "caller refused",
            extra={
                "address": request.remote,
                "identity": identity,
                "path": request.path,
                "status": refusal.status,
                "reason": refusal.reason,
            },
        )
        return web.json_response(
            {"Error": refusal.reason},
            status=refusal.status,
            headers={"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None,
        )

    async def _judge(
        self, request: web.Request, allowed: frozenset[str]
    ) -> tuple[str | None, Refusal | None]:
        transport = request.transport
        identity = certificate_identity(transport.get_extra_info("peercert") if transport else None)
        if identity is None:
            token = bearer_token(request.headers.get("Authorization"))
            if token is None:
                return None, Refusal(401, "no client certificate and no bearer token")
            try:
                identity = await self._review(token)
            except ApiError as error:
                return None, Refusal(503, f"cannot review the bearer token: {error}")
            if identity is None:
                return None, Refusal(401, "the API server does not know the bearer token")
        if identity not in allowed:
            return identity, Refusal(403, f"{identity} is not an allowed caller of {request.path}")
        return identity, None

    async def _review(self, token: str) -> str | None:
        """The token's username per TokenReview (None: not authenticated), cached for the TTL."""
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        cached = self._reviews.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        review = await self.client.create(
            TOKEN_REVIEWS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        identity = _reviewed_user(review)
        self._remember(key, now + self.settings.token_review_ttl.total_seconds(), identity)
        return identity

    def _remember(self, key: str, expires: float, identity: str | None) -> None:
        self._reviews.pop(key, None)
        if len(self._reviews) >= CACHE_LIMIT:
            del self._reviews[next(iter(self._reviews))]
        self._reviews[key] = (expires, identity)


def _reviewed_user(review: dict[str, Any]) -> str | None:
    status = review.get("status") or {}
    if status.get("authenticated") is not True:
        return None
    username = (status.get("user") or {}).get("username")
    return username if isinstance(username, str) and username else None
