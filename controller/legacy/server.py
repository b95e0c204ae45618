"""The legacy scheduler process: extender and/or webhook over one aiohttp server.

`POST /filter`, `POST /bind`, `POST /preempt` (extender; preempt in `preempt.py`),
`POST /webhook` (admission), `POST /migrate` (the opt-in DRA migration,
`controller.migration.webhook`), `GET /healthz` (the process answers), `GET
/readyz` (the caches have listed) and `GET /metrics` (HAMi's scheduler metrics).
It listens at once and then waits for the API server (`dra_driver.kube.api_wait`):
meanwhile /healthz answers, /readyz says why it is not ready, and extender and
webhook calls get that reason with a 503, as kube-scheduler and the API server
would get no answer at all from a process that exited or did not listen yet.
Bodies are limited to 1 MiB (413 beyond). /filter, /bind, /preempt and /webhook answer
only authenticated, allowed callers (caller_auth.py): a client certificate
verified against one of `client_cas` or a bearer token TokenReview vouches for
(/webhook may be left open, `CallerAuthSettings.open_webhook`).
Malformed input is answered with a 4xx and a message naming the field, never a
stack trace; TLS is optional (certificate and key files). Reference:
hami-protocol.md §4, §6.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from controller.legacy.admission import AdmissionDecision, allow, review_pod
from controller.legacy.caller_auth import (
    EXTENDER_PATHS,
    WEBHOOK_PATHS,
    CallerAuthenticator,
    Handler,
)
from controller.legacy.cluster import ClusterState
from controller.legacy.config import LegacySettings
from controller.legacy.extender import Extender, parse_bind_args, parse_filter_args
from controller.legacy.metrics import legacy_view
from controller.legacy.pod_shape import check_pod_shape
from controller.legacy.preempt import Preemption, parse_preempt_args
from controller.metrics import HamiSchedulerCollector
from controller.migration.webhook import MIGRATE_PATH, MigrationWebhook
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.api_wait import ApiWait
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient
from dra_driver.process.build_info import register_build_info
from dra_driver.process.runtime import finished_before_stop

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1 << 20
COMPONENT = "legacy-scheduler"
"""Its name in the User-Agent (one for extender and webhook: one ServiceAccount) and logs."""
CACHE_PATHS = EXTENDER_PATHS | WEBHOOK_PATHS
"""Calls answered from the caches, so refused until they have listed."""
CACHES_NOT_SYNCED = "caches not synced"
REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"


@dataclass(frozen=True, slots=True)
class ServeSettings:
    """Where and what to serve."""

    host: str = "127.0.0.1"
    port: int = 8080
    extender: bool = True
    webhook: bool = True
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_cas: tuple[Path, ...] = ()
    """CA files (each may hold several CAs) whose client certificates identify callers:
    the one that signed kube-scheduler's, and the cluster's for the API server's."""

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.tls_cert is None and self.tls_key is None:
            if self.client_cas:
                raise InvalidParameterError(
                    "--client-ca-file", "client certificates need TLS: give --tls-cert/--tls-key"
                )
            return None
        if self.tls_cert is None or self.tls_key is None:
            raise InvalidParameterError("--tls-cert/--tls-key", "give both or neither")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as error:
            raise InvalidParameterError("--tls-cert/--tls-key", f"cannot load: {error}") from None
        if self.client_cas:
            self._verify_clients(context, self.client_cas)
        return context

    @staticmethod
    def _verify_clients(context: ssl.SSLContext, client_cas: tuple[Path, ...]) -> None:
        """Ask for a client certificate and check it; optional, so token callers (and, with
        an open /webhook, an API server without one) still connect."""
        context.verify_mode = ssl.CERT_OPTIONAL
        for client_ca in client_cas:
            try:
                context.load_verify_locations(cafile=client_ca)
            except (OSError, ssl.SSLError) as error:
                raise InvalidParameterError(
                    "--client-ca-file", f"cannot load {client_ca}: {error}"
                ) from None


def _bad_request(message: str, key: str = "Error") -> web.Response:
    return web.json_response({key: message}, status=400)


async def _json_body(request: web.Request) -> Any:
    """The request's JSON document; a 400 (or aiohttp's 413) when it is not one."""
    raw = await request.read()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise web.HTTPBadRequest(
            text=json.dumps({"Error": f"request body is not JSON: {error}"}),
            content_type="application/json",
        ) from None


def admission_response(uid: str, decision: AdmissionDecision) -> dict[str, Any]:
    response: dict[str, Any] = {"uid": uid, "allowed": decision.allowed}
    if decision.allowed and decision.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(decision.patch).encode()).decode()
    if not decision.allowed:
        response["status"] = {
            "code": decision.code,
            "reason": decision.reason,
            "message": decision.message,
        }
    return {"apiVersion": REVIEW_API_VERSION, "kind": REVIEW_KIND, "response": response}


class LegacyServer:
    """One process serving the extender and/or webhook over a shared ClusterState."""

    def __init__(
        self,
        client: KubeClient,
        settings: LegacySettings,
        serve: ServeSettings,
        state: ClusterState | None = None,
        api_wait: ApiWait | None = None,
    ) -> None:
        # Extender and webhook share one ServiceAccount, so one User-Agent for the RBAC audit.
        client = client.for_component(COMPONENT)
        self.client = client
        self.settings = settings
        self.serve = serve
        self.api_wait = api_wait or ApiWait(COMPONENT)
        self._listed = False
        """Set once the caches have listed: extender and webhook calls are answered."""
        events = EventRecorder(client, EventSettings(component=settings.scheduler_name))
        self.state = state or ClusterState(
            client, settings, write_handshakes=serve.extender, events=events
        )
        locker = NodeLocker(
            client, timeout=settings.node_lock_timeout, claim_holders=settings.mixed_mode
        )
        self.extender = Extender(client, self.state, locker, events)
        self.preemption = Preemption(self.state)
        self.caller_auth = CallerAuthenticator(client, settings.caller_auth)
        self.migration = MigrationWebhook(client, settings.backends(), settings.scheduler_name)
        self.registry = CollectorRegistry()
        register_build_info(self.registry)
        self.registry.register(HamiSchedulerCollector(lambda: legacy_view(self.state)))
        self._runner: web.AppRunner | None = None
        self.port = serve.port

    def app(self) -> web.Application:
        app = web.Application(
            client_max_size=MAX_BODY_BYTES,
            middlewares=[self.caller_auth.middleware, self._until_listed],
        )
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        if self.serve.extender:
            app.router.add_post("/filter", self._guard(self._filter))
            app.router.add_post("/bind", self._guard(self._bind))
            app.router.add_post("/preempt", self._guard(self._preempt))
        if self.serve.webhook:
            app.router.add_post("/webhook", self._webhook)
            app.router.add_post(MIGRATE_PATH, self.migration.handle)
        return app

    async def start(self) -> None:
        """Listen, then wait for the API server and fill the caches."""
        context = self.serve.ssl_context()
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.serve.host, self.serve.port, ssl_context=context)
        try:
            await site.start()
        except OSError as error:
            await self.aclose()
            raise InvalidParameterError(
                "--host/--port", f"cannot listen on {self.serve.host}:{self.serve.port}: {error}"
            ) from error
        self.port = self._runner.addresses[0][1]
        address = {"host": self.serve.host, "port": self.port, "tls": context is not None}
        log.info("legacy scheduler listening, caches not listed yet", extra=address)
        try:
            await self.api_wait.until_serving(self.client)
            await self.state.start()
        except BaseException:
            await self.aclose()
            raise
        self.extender.events.start()
        self._listed = True
        log.info("legacy scheduler serving", extra=address)

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.extender.events.aclose()
        await self.state.aclose()

    async def __aenter__(self) -> LegacyServer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @staticmethod
    def _guard(
        handler: Callable[[Any], Awaitable[dict[str, Any]]],
    ) -> Callable[[web.Request], Awaitable[web.Response]]:
        """Parse the body, map a bad document to 400 with the field that is wrong."""

        async def wrapped(request: web.Request) -> web.Response:
            body = await _json_body(request)
            try:
                return web.json_response(await handler(body))
            except InvalidParameterError as error:
                return _bad_request(str(error))

        return wrapped

    async def _filter(self, body: Any) -> dict[str, Any]:
        return await self.extender.filter(parse_filter_args(body))

    async def _bind(self, body: Any) -> dict[str, Any]:
        return await self.extender.bind(parse_bind_args(body))

    async def _preempt(self, body: Any) -> dict[str, Any]:
        return await self.preemption.preempt(parse_preempt_args(body))

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    def not_ready(self) -> str | None:
        """Why /readyz answers 503, None when it answers ok."""
        if self.api_wait.problem is not None:
            return self.api_wait.problem
        return None if self.state.ready else CACHES_NOT_SYNCED

    async def _readyz(self, _: web.Request) -> web.Response:
        problem = self.not_ready()
        if problem is None:
            return web.Response(text="ok")
        return web.Response(text=problem, status=503)

    @web.middleware
    async def _until_listed(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self._listed or request.path not in CACHE_PATHS:
            return await handler(request)
        return web.json_response({"Error": self.not_ready() or CACHES_NOT_SYNCED}, status=503)

    async def _metrics(self, _: web.Request) -> web.Response:
        """HAMi's scheduler metrics (hami-protocol.md §8) from the scheduler's cache."""
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _webhook(self, request: web.Request) -> web.Response:
        body = await _json_body(request)
        review = body.get("request") if isinstance(body, dict) else None
        if (
            not isinstance(body, dict)
            or body.get("apiVersion") != REVIEW_API_VERSION
            or body.get("kind") != REVIEW_KIND
            or not isinstance(review, dict)
            or not isinstance(review.get("uid"), str)
        ):
            return _bad_request(
                f"expected an {REVIEW_KIND} {REVIEW_API_VERSION} with request.uid", "error"
            )
        uid = review["uid"]
        pod = review.get("object")
        resource_kind = review.get("kind")
        kind = resource_kind.get("kind") if isinstance(resource_kind, dict) else None
        if kind not in (None, "Pod") or review.get("operation", "CREATE") != "CREATE":
            return web.json_response(admission_response(uid, allow()))
        try:
            check_pod_shape(pod, "request.object")
        except InvalidParameterError as error:
            return _bad_request(str(error), "error")
        namespace = review.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
        decision = review_pod(pod, namespace, self.settings, self.state.quota_ledger())
        if not decision.allowed:
            log.info("pod denied", extra={"namespace": namespace, "reason": decision.message})
        return web.json_response(admission_response(uid, decision))


async def serve_legacy(
    settings: LegacySettings,
    serve: ServeSettings,
    kubeconfig: Path | None,
    stop: asyncio.Event,
    api_wait: ApiWait | None = None,
) -> None:
    """Run until `stop` is set (the CLI's entry point)."""
    client = await KubeClient.from_kubeconfig(kubeconfig, component=COMPONENT)
    server = LegacyServer(client, settings, serve, api_wait=api_wait)
    try:
        if await finished_before_stop(stop, server.start()):
            await stop.wait()
    finally:
        await server.aclose()
        await client.aclose()
