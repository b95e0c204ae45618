"""Raw Kubernetes REST over the official asyncio client, on plain dicts.

Components work on the JSON the API server returns (no model classes), so
reads cost one `json.loads` and the pure code sees the same shapes the docs
show. Every API error is translated here, in one place, into the driver's
error taxonomy.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.asyncio_client import aio_client, aio_config, aio_rest

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
USER_AGENT_PRODUCT = "vgpu-dra-driver"


def component_user_agent(component: str) -> str:
    """`vgpu-dra-driver/<component>`: API server audit logs (and the emulator's RBAC
    audit) tell the driver's components apart by it."""
    return f"{USER_AGENT_PRODUCT}/{component}"


class ApiError(DriverError):
    """The API server refused a request; `status`/`reason` are its Status fields
    (status 0: no answer came, the transport failed)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.request = ""
        """`<METHOD> <path>` of the refused request, when the client knows it."""


class NotFoundError(ApiError):
    pass


class ConflictError(ApiError):
    """409: AlreadyExists or a stale resourceVersion."""


class GoneError(ApiError):
    """410: the resourceVersion is too old; relist."""


class TransientApiError(ApiError, TransientError):
    """429 / 5xx / connection trouble: retry after a delay."""

    def __init__(self, status: int, reason: str, message: str, retry_after: float = 1.0) -> None:
        ApiError.__init__(self, status, reason, message)
        self.retry_after = retry_after


def api_error(
    status: int, body: bytes | str, retry_after: str | None = None, *, request: str = ""
) -> ApiError:
    """The typed error for a non-2xx answer, from its Status body when it has one;
    `request` (`<METHOD> <path>`) is kept on it for whoever reports the failure."""
    error = _status_error(status, body, retry_after)
    error.request = request
    return error


def _status_error(status: int, body: bytes | str, retry_after: str | None) -> ApiError:
    reason, message = "", body.decode(errors="replace") if isinstance(body, bytes) else body
    try:
        status_object = json.loads(body)
        if isinstance(status_object, dict) and status_object.get("kind") == "Status":
            reason = status_object.get("reason", "")
            message = status_object.get("message", message)
    except ValueError:
        pass
    if status == 404:
        return NotFoundError(status, reason or "NotFound", message)
    if status == 409:
        return ConflictError(status, reason or "Conflict", message)
    if status == 410:
        return GoneError(status, reason or "Gone", message)
    if status == 429 or status >= 500:
        delay = float(retry_after) if retry_after and retry_after.isdigit() else 1.0
        return TransientApiError(status, reason or "ServerError", message, delay)
    return ApiError(status, reason or "BadRequest", message)


def transport_failure(error: BaseException, timeout_s: float) -> str:
    """What went wrong below HTTP, readable on its own: a bare `TimeoutError()` names
    neither the wait nor its length, so a timeout says how long it waited."""
    if isinstance(error, TimeoutError):
        return f"no answer within {timeout_s:g} s (TimeoutError)"
    detail = str(error)
    return f"{type(error).__name__}: {detail}" if detail else repr(error)


def object_path(collection: str, name: str) -> str:
    """`<collection>/<name>` with the name escaped (names come from users)."""
    return f"{collection}/{quote(name, safe='')}"


URL_CACHE_MODULES = ("yarl._url", "yarl._parse")
"""Where aiohttp's URL library keeps its memo caches (`functools.lru_cache`, 128 entries
each, keyed by the URL's text or its parts)."""


def forget_request_urls() -> int:
    """Empty the URL library's memo caches; returns how many entries went.

    Every claim's status URL is new, so after a burst each cache holds the burst's last
    128 URLs: parsed URL objects, their attribute dicts and strings, made at the end of
    the burst and so scattered over the allocator's arenas, each keeping one resident
    until the cache turns over, which in the quiet after a burst it never does."""
    forgotten = 0
    for name in URL_CACHE_MODULES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info"):
                forgotten += value.cache_info().currsize
                value.cache_clear()
    return forgotten


class _IdleConnectionsExpire(aio_rest.RESTClientObject):
    """The client's pool, but an idle connection closes after `keepalive_s` (aiohttp keeps
    one 15 s). A burst of requests opens connections the steady trickle afterwards never
    needs; the pool hands out its oldest idle connection first, so a lease renewal every
    2 s keeps several of them alive in turn, each holding the buffers and objects its
    last response left, which pin memory the burst freed everywhere else."""

    def __init__(self, configuration: aio_client.Configuration, keepalive_s: float) -> None:
        super().__init__(configuration)
        self.keepalive_s = keepalive_s

    def _create_connector(self) -> aiohttp.TCPConnector:
        """The library's connector (its pool size and TLS context), with our keepalive."""
        return aiohttp.TCPConnector(
            limit=self.maxsize, ssl=self.ssl_context, keepalive_timeout=self.keepalive_s
        )


class KubeClient:
    """A thin async client: GET/LIST/WATCH/POST/PATCH/PUT/DELETE on API paths.

    Paths are API paths such as `/apis/resource.k8s.io/v1/resourceslices`.
    """

    def __init__(
        self,
        api_client: aio_client.ApiClient,
        request_timeout: float = 30.0,
        *,
        user_agent: str | None = None,
        owns_session: bool = True,
    ) -> None:
        self.api_client = api_client
        self.request_timeout = request_timeout
        """Seconds a plain request may take; watches are bounded by `timeoutSeconds`."""
        self.user_agent = user_agent
        """Sent instead of the library's default when set (see `for_component`)."""
        self._owns_session = owns_session

    @classmethod
    async def from_kubeconfig(
        cls,
        path: Path | None = None,
        request_timeout: float = 30.0,
        component: str | None = None,
        *,
        idle_keepalive_s: float | None = None,
    ) -> KubeClient:
        """From a kubeconfig file, or the in-cluster service account when None; `component`
        names the caller in the User-Agent; `idle_keepalive_s` closes pooled connections
        idle that long (aiohttp's 15 s when None)."""
        configuration = aio_client.Configuration()
        if path is None:
            aio_config.load_incluster_config(client_configuration=configuration)
        else:
            await aio_config.load_kube_config(
                config_file=str(path), client_configuration=configuration
            )
        user_agent = component_user_agent(component) if component else None
        api_client = aio_client.ApiClient(configuration)
        if idle_keepalive_s is not None:
            api_client.rest_client = _IdleConnectionsExpire(configuration, idle_keepalive_s)
        return cls(api_client, request_timeout, user_agent=user_agent)

    def for_component(self, component: str) -> KubeClient:
        """The same connection pool, but requests say `vgpu-dra-driver/<component>`; closing
        it leaves the shared session to its owner."""
        return KubeClient(
            self.api_client,
            self.request_timeout,
            user_agent=component_user_agent(component),
            owns_session=False,
        )

    async def aclose(self) -> None:
        if self._owns_session:
            await self.api_client.close()

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        response = await self._send(method, path, query, body, content_type, self.request_timeout)
        data = await response.read()
        if response.status >= 300:
            retry_after = response.getheader("Retry-After")
            raise api_error(response.status, data, retry_after, request=f"{method} {path}")
        return json.loads(data) if data else None

    async def _send(self, method, path, query, body, content_type, deadline):
        params = [(key, value) for key, value in (query or {}).items() if value is not None]
        _, url, headers, _, _ = await self.api_client.param_serialize(
            method,
            path,
            query_params=params,
            header_params={"Content-Type": content_type, "Accept": "application/json"},
            auth_settings=["BearerToken"],
        )
        if self.user_agent is not None:
            headers = {**headers, "User-Agent": self.user_agent}
        try:
            return await self.api_client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=deadline
            )
        except (aiohttp.ClientError, TimeoutError) as error:
            request = f"{method} {path}"
            failed = TransientApiError(
                0, "ConnectionError", f"{request}: {transport_failure(error, deadline)}"
            )
            failed.request = request
            raise failed from error

    async def get(self, path: str) -> dict[str, Any]:
        return await self._call("GET", path)

    async def list(self, path: str, **query: Any) -> dict[str, Any]:
        return await self._call("GET", path, query=_query(query))

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call("POST", path, body=body)

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._call("PUT", path, body=body)

    async def patch(self, path: str, body: Any, content_type: str = MERGE_PATCH) -> dict[str, Any]:
        return await self._call("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, **query: Any) -> dict[str, Any] | None:
        return await self._call("DELETE", path, query=_query(query))

    async def watch(self, path: str, **query: Any) -> AsyncIterator[dict[str, Any]]:
        """Stream watch events (`{"type", "object"}`) until the server ends the watch."""
        params = {**_query(query), "watch": "true"}
        deadline = float(params.get("timeoutSeconds", 240)) + self.request_timeout
        response = await self._send("GET", path, params, None, "application/json", deadline)
        if response.status >= 300:
            raise api_error(response.status, await response.read(), request=f"watch {path}")
        stream = response.response
        try:
            async for line in stream.content:
                if line.strip():
                    yield json.loads(line)
        except (aiohttp.ClientError, TimeoutError) as error:
            request = f"watch {path}"
            broken = TransientApiError(
                0, "WatchBroken", f"{request}: {transport_failure(error, deadline)}"
            )
            broken.request = request
            raise broken from error
        finally:
            stream.release()


def _query(values: Mapping[str, Any]) -> dict[str, Any]:
    """snake_case keyword arguments to the API's camelCase query parameters."""
    result = {}
    for key, value in values.items():
        if value is None:
            continue
        head, *rest = key.split("_")
        camel = head + "".join(part.title() for part in rest)
        result[camel] = str(value).lower() if isinstance(value, bool) else value
    return result
