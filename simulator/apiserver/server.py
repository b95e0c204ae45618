"""The HTTP face of the emulator: kube-apiserver's URL layout, verbs, content types and watch.

Run it with `async with APIServer() as server:` inside a loop, or with
`run_in_thread()` (threaded.py) for the synchronous official client. Like the
real server, `pods/binding` answers a `Status` (201), which the official
client's typed `create_namespaced_pod_binding` cannot deserialize into a
V1Binding: call it with `_preload_content=False`.

Each request is made by the user of its bearer token (authentication.py); a write
passes the ValidatingAdmissionPolicies under that identity, and their warnings come
back as `Warning` headers, as kube-apiserver sends them. `kubeconfig(token=...)`
writes a client configuration for any issued token.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web
from multidict import CIMultiDict

from dra_driver.process.runtime import wait_event

from . import discovery
from .admission_policies import RequestContext
from .audit import WriteAudit
from .authentication import KUBECONFIG_TOKEN, TOKEN_REVIEWS_PATH, Tokens, bearer_token
from .cluster import Cluster
from .controllers import Controllers
from .conversion import PRESENTERS
from .errors import ApiError, bad_request, method_not_allowed
from .faults import FaultInjector
from .list_encoding import ListEncoder, dumps
from .listing import too_large
from .registry import Registry, ResourceType
from .rules_scheduling import system_priority_classes
from .selectors import SelectorError, parse_field_selector, parse_label_selector
from .settings import APIServerSettings
from .store import Bucket, Storage, Watcher
from .write_checks import check_dry_run

_TRUE = ("1", "true", "True")
_COLLECTION_VERBS = {"GET": "list", "POST": "create", "DELETE": "deletecollection"}
_ITEM_VERBS = {
    "GET": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}
"""HTTP method -> RBAC verb (`pods/binding` and `pods/eviction` are POSTs: `create`)."""
_JSON = "application/json"
_CREATED = {
    "kind": "Status",
    "apiVersion": "v1",
    "metadata": {},
    "status": "Success",
    "code": 201,
}


def _json_response(obj: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    headers = CIMultiDict(("Warning", w) for w in warnings) if warnings else None
    return web.Response(body=dumps(obj), status=status, content_type=_JSON, headers=headers)


def _error_response(error: ApiError) -> web.Response:
    headers: CIMultiDict[str] = CIMultiDict(("Warning", w) for w in error.warnings)
    if error.retry_after:
        headers["Retry-After"] = str(error.retry_after)
    return web.Response(
        body=dumps(error.status()), status=error.code, content_type=_JSON, headers=headers
    )


def _deleted_status(resource: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
    """The answer to a delete that removed the object at once (pods answer the pod)."""
    details: dict[str, Any] = {"name": obj["metadata"]["name"]}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    details["uid"] = obj["metadata"]["uid"]
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": details,
    }


def _bookmark(resource: ResourceType, rv: int) -> dict[str, Any]:
    return {
        "kind": resource.kind,
        "apiVersion": resource.group_version,
        "metadata": {"resourceVersion": str(rv)},
    }


class APIServer:
    """An in-process kube-apiserver on loopback HTTP; `faults` is the fault-injection handle,
    `tokens` issues the bearer tokens its TokenReview vouches for, `audit` counts the
    writes each client sent (audit.WriteAudit)."""

    def __init__(
        self, settings: APIServerSettings | None = None, registry: Registry | None = None
    ) -> None:
        self.settings = settings or APIServerSettings()
        self.registry = registry or Registry()
        self.faults = FaultInjector()
        self.tokens = Tokens()
        self.audit = WriteAudit()
        self.lists = ListEncoder()
        self._storage: Storage | None = None
        self._cluster: Cluster | None = None
        self._controllers: Controllers | None = None
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._closing = asyncio.Event()
        """Set by `aclose`: requests held by a delay or hang fault are served then."""
        self.loop: asyncio.AbstractEventLoop | None = None
        """The loop it serves on, once started (benches profile its thread)."""

    @property
    def url(self) -> str:
        return f"http://{self.settings.host}:{self._port}"

    async def start(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        self._closing = asyncio.Event()
        self._storage = Storage(
            self.registry, self.settings.watch_history, self.settings.watch_history_s
        )
        self._cluster = Cluster(self._storage, loop.call_soon)
        namespaces = self.registry.get("", "v1", "namespaces")
        if namespaces is not None:
            for name in self.settings.namespaces:
                self._cluster.create(namespaces, "", {"metadata": {"name": name}})
        priority_classes = self.registry.get("scheduling.k8s.io", "v1", "priorityclasses")
        if priority_classes is not None:
            for body in system_priority_classes():
                self._cluster.create(priority_classes, "", body)
        if self.settings.controllers:
            self._controllers = Controllers(self._cluster, self.settings, loop)
            self._controllers.start()
        self.faults.bind(loop, self._drop_watches)
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        listener = socket.create_server((self.settings.host, self.settings.port))
        self._port = listener.getsockname()[1]
        await web.SockSite(self._runner, listener).start()

    async def aclose(self) -> None:
        if self._runner is None:
            return
        if self._controllers is not None:
            self._controllers.close()
            self._controllers = None
        self._drop_watches(None)
        self._closing.set()
        await self._runner.cleanup()
        self._runner = None

    async def __aenter__(self) -> APIServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def kubeconfig(self, namespace: str = "default", token: str | None = None) -> dict[str, Any]:
        """A client configuration for `token` (one `tokens` issued; default: the admin's)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            "users": [{"name": "emulator", "user": {"token": token or KUBECONFIG_TOKEN}}],
            "contexts": [
                {
                    "name": "emulator",
                    "context": {"cluster": "emulator", "user": "emulator", "namespace": namespace},
                }
            ],
            "current-context": "emulator",
            "preferences": {},
        }

    def write_kubeconfig(
        self, path: str | Path, namespace: str = "default", token: str | None = None
    ) -> Path:
        target = Path(path)
        target.write_text(yaml.safe_dump(self.kubeconfig(namespace, token), sort_keys=False))
        return target

    def _drop_watches(self, pattern: re.Pattern[str] | None) -> int:
        if self._storage is None:
            return 0
        dropped = 0
        for bucket in {id(b): b for b in self._storage.buckets.values()}.values():
            for watcher in list(bucket.watchers):
                if pattern is None or pattern.search(watcher.path):
                    watcher.close()
                    bucket.watchers.discard(watcher)
                    dropped += 1
        return dropped

    # ---- request handling ------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        delay_s, injected = self.faults.admit(request.method, request.path_qs)
        if delay_s:
            await wait_event(self._closing, delay_s)
        if injected is not None:
            return _error_response(injected)
        try:
            return await self._dispatch(request)
        except ApiError as error:
            self.audit.refused(request)
            return _error_response(error)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return _json_response({"paths": ["/api", "/api/v1", "/apis", "/version"]})
        head = parts[0]
        if head == "version" and len(parts) == 1:
            return _json_response(discovery.VERSION_INFO)
        if head in ("healthz", "readyz", "livez"):
            return web.Response(text="ok")
        if request.method == "POST" and request.path == TOKEN_REVIEWS_PATH:
            return await self._token_review(request)
        if head == "api":
            if len(parts) == 1:
                return _json_response(discovery.core_versions(f"{self.settings.host}:{self._port}"))
            return await self._group_request(request, "", parts[1], parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return _json_response(discovery.group_list(self.registry))
            if len(parts) == 2:
                return self._document(discovery.group(self.registry, parts[1]), request.path)
            return await self._group_request(request, parts[1], parts[2], parts[3:])
        raise self._path_not_found(request.path)

    async def _token_review(self, request: web.Request) -> web.Response:
        """Who a bearer token is (a create that stores nothing, answered 201 like the real one)."""
        self.audit.request(request, "create", "authentication.k8s.io", "tokenreviews")
        return _json_response(self.tokens.review(await self._body(request)), status=201)

    @staticmethod
    def _path_not_found(path: str) -> ApiError:
        return ApiError(
            404,
            "the server could not find the requested resource",
            details={
                "causes": [
                    {"reason": "UnexpectedServerResponse", "message": f"404 page not found: {path}"}
                ]
            },
        )

    def _document(self, doc: dict[str, Any] | None, path: str) -> web.Response:
        if doc is None:
            raise self._path_not_found(path)
        return _json_response(doc)

    async def _group_request(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        if not rest:
            return self._document(
                discovery.resource_list(self.registry, group, version), request.path
            )
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            candidate = self.registry.get(group, version, rest[2])
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        resource = self.registry.get(group, version, rest[0])
        if resource is None or len(rest) > 3:
            raise self._path_not_found(request.path)
        if resource.namespaced and namespace is None and len(rest) > 1:
            raise self._path_not_found(request.path)
        if not resource.namespaced and namespace is not None:
            raise self._path_not_found(request.path)
        if len(rest) == 1:
            return await self._collection(request, resource, namespace)
        subresource = rest[2] if len(rest) == 3 else ""
        if subresource and subresource not in resource.subresources:
            raise self._path_not_found(request.path)
        return await self._item(request, resource, namespace or "", rest[1], subresource)

    @property
    def cluster(self) -> Cluster:
        assert self._cluster is not None, "APIServer.start() was not awaited"
        return self._cluster

    async def _body(self, request: web.Request) -> Any:
        raw = await request.read()
        content_type = request.content_type
        if "protobuf" in content_type or "cbor" in content_type:
            raise ApiError(
                415,
                "the body of the request was in an unknown format - "
                f"accepted media types include: {_JSON}, application/yaml",
            )
        try:
            if "yaml" in content_type:
                return yaml.safe_load(raw)
            return json.loads(raw) if raw else None
        except (ValueError, yaml.YAMLError) as error:
            raise bad_request(f"the body of the request could not be decoded: {error}") from error

    @staticmethod
    def _selectors(resource: ResourceType, query: Any) -> tuple[Any, Any]:
        subject = f" for {resource.group_version}, Kind={resource.kind}" if resource.group else ""
        try:
            labels = parse_label_selector(query.get("labelSelector", ""))
            fields = parse_field_selector(
                query.get("fieldSelector", ""), resource.selectable, subject
            )
        except SelectorError as error:
            raise bad_request(str(error)) from error
        return labels, fields

    @contextmanager
    def _write(
        self, request: web.Request, options_kind: str, subresource: str = "", extra: Any = None
    ) -> Iterator[RequestContext]:
        """Run the enclosed cluster call (one sync call: no await) as the request's user,
        as `dryRun=All` when asked; its admission warnings go with an error too."""
        values = list(request.query.getall("dryRun", []))
        if isinstance(extra, list):
            values += [str(v) for v in extra]
        cluster = self.cluster
        cluster.dry_run = check_dry_run(values, options_kind)
        context = RequestContext(
            self.tokens.user(bearer_token(request.headers.get("Authorization", ""))), subresource
        )
        cluster.request = context
        try:
            yield context
        except ApiError as error:
            error.warnings = context.warnings + error.warnings
            raise
        finally:
            cluster.dry_run = False
            cluster.request = None

    async def _collection(
        self, request: web.Request, resource: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        query = request.query
        method = request.method
        watch = method == "GET" and query.get("watch") in _TRUE
        verb = "watch" if watch else _COLLECTION_VERBS.get(method, method.lower())
        self.audit.request(request, verb, resource.group, resource.plural)
        if method == "GET":
            labels, fields = self._selectors(resource, query)
            if watch:
                return await self._watch(request, resource, namespace, labels, fields)
            try:
                limit = int(query.get("limit") or 0)
            except ValueError as error:
                raise bad_request(f"invalid limit: {query.get('limit')}") from error
            page = self.cluster.list(
                resource,
                namespace,
                labels,
                fields,
                limit,
                query.get("continue", ""),
                query.get("resourceVersion", ""),
                query.get("resourceVersionMatch", ""),
            )
            body = self.lists.encode(resource.key, page)
            return web.Response(body=body, content_type=_JSON)
        if method == "POST":
            if resource.namespaced and namespace is None:
                raise method_not_allowed(method)
            body = await self._body(request)
            manager = query.get("fieldManager", "")
            with self._write(request, "CreateOptions") as context:
                created = self.cluster.create(resource, namespace or "", body, manager)
            return _json_response(created, 201, context.warnings)
        if method == "DELETE":
            labels, fields = self._selectors(resource, query)
            options = await self._delete_options(request)
            with self._write(request, "DeleteOptions", "", options.get("dryRun")) as context:
                deleted = self.cluster.delete_collection(
                    resource, namespace, labels, fields, options
                )
            return _json_response(deleted, 200, context.warnings)
        raise method_not_allowed(method)

    async def _delete_options(self, request: web.Request) -> dict[str, Any]:
        body = await self._body(request)
        options = dict(body) if isinstance(body, dict) else {}
        query = request.query
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError as error:
                raise bad_request("gracePeriodSeconds must be an integer") from error
        if options.get("orphanDependents") is not None and "propagationPolicy" not in options:
            options["propagationPolicy"] = "Orphan" if options["orphanDependents"] else "Background"
        return options

    async def _item(
        self,
        request: web.Request,
        resource: ResourceType,
        namespace: str,
        name: str,
        subresource: str,
    ) -> web.StreamResponse:
        method = request.method
        cluster = self.cluster
        verb = _ITEM_VERBS.get(method, method.lower())
        self.audit.request(request, verb, resource.group, resource.plural, subresource)
        if subresource in ("binding", "eviction"):
            if method != "POST":
                raise method_not_allowed(method)
            body = await self._body(request)
            with self._write(request, "CreateOptions", subresource) as context:
                if subresource == "binding":
                    cluster.bind(namespace, name, body)
                else:
                    cluster.evict(namespace, name, body)
            return _json_response(_CREATED, 201, context.warnings)
        if subresource == "finalize":
            if method != "PUT":
                raise method_not_allowed(method)
            body = await self._body(request)
            with self._write(request, "UpdateOptions", subresource) as context:
                finalized = cluster.namespaces.finalize(name, body)
            return _json_response(finalized, 200, context.warnings)
        if method == "GET":
            return _json_response(cluster.get(resource, namespace, name))
        if method == "PUT":
            body = await self._body(request)
            creating = not subresource and not cluster.exists(resource, namespace, name)
            manager = request.query.get("fieldManager", "")
            with self._write(request, "UpdateOptions", subresource) as context:
                stored = cluster.update(resource, namespace, name, body, subresource, manager)
            return _json_response(stored, 201 if creating else 200, context.warnings)
        if method == "PATCH":
            body = await self._body(request)
            creating = not subresource and not cluster.exists(resource, namespace, name)
            query = request.query
            with self._write(request, "PatchOptions", subresource) as context:
                patched = cluster.patch(
                    resource,
                    namespace,
                    name,
                    request.content_type,
                    body,
                    subresource,
                    query.get("fieldManager", ""),
                    query.get("force") in _TRUE,
                )
            return _json_response(patched, 201 if creating else 200, context.warnings)
        if method == "DELETE" and not subresource:
            options = await self._delete_options(request)
            with self._write(request, "DeleteOptions", "", options.get("dryRun")) as context:
                last, gone = cluster.delete(resource, namespace, name, options)
            if gone and not resource.graceful_deletion:
                return _json_response(_deleted_status(resource, last), 200, context.warnings)
            return _json_response(last, 200, context.warnings)
        raise method_not_allowed(method)

    # ---- watch -----------------------------------------------------------------

    async def _watch(
        self,
        request: web.Request,
        resource: ResourceType,
        namespace: str | None,
        labels: Any,
        fields: Any,
    ) -> web.StreamResponse:
        query = request.query
        storage = self.cluster.storage
        try:
            since = int(query.get("resourceVersion") or 0)
            timeout_s = float(query["timeoutSeconds"]) if "timeoutSeconds" in query else None
        except ValueError as error:
            raise bad_request(f"invalid watch parameter: {error}") from error
        bookmarks = query.get("allowWatchBookmarks") in _TRUE
        watcher = Watcher(
            resource,
            namespace,
            labels,
            fields,
            self.settings.watcher_backlog,
            request.path_qs,
            PRESENTERS.get(resource.key),
        )
        bucket = storage.bucket(resource)
        bucket.compact()
        initial_events = query.get("sendInitialEvents") in _TRUE
        if since > storage.rv and not initial_events:
            raise too_large(since, storage.rv)
        expired = since and since < bucket.floor and not initial_events
        if not expired:
            if since and not initial_events:
                for event in bucket.events_after(since):
                    line = watcher.line_for(event)
                    if line is not None:
                        watcher.pending.append(line)
            else:
                for obj in self.cluster.list(resource, namespace, labels, fields)["items"]:
                    watcher.pending.append(dumps({"type": "ADDED", "object": obj}) + b"\n")
            if initial_events and bookmarks:
                end = _bookmark(resource, storage.rv)
                end["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                watcher.pending.append(dumps({"type": "BOOKMARK", "object": end}) + b"\n")
            bucket.watchers.add(watcher)
        response = web.StreamResponse(headers={"Content-Type": _JSON})
        response.enable_chunked_encoding()
        await response.prepare(request)
        if expired:
            status = ApiError(410, f"too old resource version: {since} ({bucket.floor})").status()
            await response.write(dumps({"type": "ERROR", "object": status}) + b"\n")
            return response
        start_rv = since if since and not initial_events else storage.rv
        try:
            await self._stream(response, watcher, bucket, start_rv, timeout_s, bookmarks)
        except ConnectionResetError:
            return response
        finally:
            bucket.watchers.discard(watcher)
        return response

    def _next_bookmark(self, now: float, deadline: float | None) -> float | None:
        """Like the real watch cache: a heartbeat, but always before the watch's timeout;
        None when that moment has passed (a watch shorter than the margin gets none)."""
        at = now + self.settings.bookmark_interval_s
        if deadline is not None:
            at = min(at, deadline - self.settings.bookmark_before_timeout_s)
        return at if at > now else None

    async def _stream(
        self,
        response: web.StreamResponse,
        watcher: Watcher,
        bucket: Bucket,
        start_rv: int,
        timeout_s: float | None,
        bookmarks: bool,
    ) -> None:
        """Write events as they come; a bookmark only when due and only if the type changed
        after the version the watch started from (the real watch cache's rule)."""
        loop = asyncio.get_running_loop()
        storage = self.cluster.storage
        deadline = loop.time() + timeout_s if timeout_s is not None else None
        next_bookmark = self._next_bookmark(loop.time(), deadline) if bookmarks else None
        while not watcher.closed:
            if watcher.pending:
                lines = b"".join(watcher.pending)
                watcher.pending.clear()
                await response.write(lines)
                continue
            now = loop.time()
            if deadline is not None and now >= deadline:
                return
            if next_bookmark is not None and now >= next_bookmark:
                # Every event up to storage.rv is either written or filtered out:
                # resuming from this version loses nothing.
                if bucket.history and bucket.history[-1].rv > start_rv:
                    mark = _bookmark(watcher.resource, storage.rv)
                    await response.write(dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
                next_bookmark = self._next_bookmark(loop.time(), deadline)
                continue
            watcher.ready.clear()
            wakeups = [t for t in (deadline, next_bookmark) if t is not None]
            wait_s = min(wakeups) - now if wakeups else None
            await wait_event(watcher.ready, wait_s)
