"""A kube-apiserver stand-in for calling one mutating admission webhook.

It sends what kube-apiserver v1.36 sends (wire fixtures mutating-webhook/): an
AdmissionReview v1 of the defaulted object (requests copied from limits, canonical
quantities such as `3k`), `POST <url>?timeout=<n>s`, the apiserver's headers, a body
ending in a newline; it calls exactly once, never retries, applies a returned JSONPatch
(also for dry runs) and turns every failure into the Status object kube-apiserver
answers with, or lets the object through unchanged under failurePolicy Ignore.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import re
import ssl
import uuid
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import aiohttp

from api.quantity import QuantityError, format_quantity_value, parse_quantity, quantity_form
from dra_driver.errors import DriverError, InvalidParameterError
from simulator.apiserver.rules import default_requests_from_limits

REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"
DEFAULT_SCHEDULER = "default-scheduler"
HEADERS = {
    "User-Agent": "kube-apiserver-admission",
    "Accept": "application/json, */*",
    "Content-Type": "application/json",
    "Accept-Encoding": "gzip",
}

_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE])?$")


def _quantity_text(value: str | int) -> str:
    """The quantity as text, refused unless it has the apimachinery quantity shape."""
    text = str(value).strip()
    if _QUANTITY.match(text) is None:
        raise InvalidParameterError("quantity", f"{text!r} is not a Kubernetes quantity")
    return text


def quantity_value(value: str | int) -> Decimal:
    """The numeric value of a quantity (`500m` -> 0.5, `1Gi` -> 1073741824)."""
    try:
        return parse_quantity(_quantity_text(value))
    except QuantityError as error:
        raise InvalidParameterError("quantity", error.reason) from None


def canonical_quantity(value: str | int) -> str:
    """A quantity as the API server re-serialises it (`3000` -> `3k`, `1024Mi` -> `1Gi`)."""
    text = _quantity_text(value)
    return format_quantity_value(quantity_value(text), quantity_form(text))


def defaulted_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The API server's defaults that admission and scheduling rely on, on a copy."""
    result = copy.deepcopy(pod)
    spec = result.setdefault("spec", {})
    spec.setdefault("schedulerName", DEFAULT_SCHEDULER)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") or {}
            for kind in ("limits", "requests"):
                if resources.get(kind):
                    resources[kind] = {n: canonical_quantity(q) for n, q in resources[kind].items()}
    default_requests_from_limits(spec)
    return result


class JSONPatchError(DriverError):
    """An RFC 6902 patch does not apply to the document."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JSONPatchError(f"JSON pointer {path!r} does not start with '/'")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, insert: bool) -> int:
    if insert and token == "-":
        return len(container)
    if not token.isdigit() or (len(token) > 1 and token.startswith("0")):
        raise JSONPatchError(f"array index {token!r} is not a number")
    index = int(token)
    if index > len(container) or (index == len(container) and not insert):
        raise JSONPatchError(f"array index {index} is out of range")
    return index


def _parent(document: Any, tokens: list[str]) -> Any:
    node = document
    for token in tokens[:-1]:
        if isinstance(node, list):
            node = node[_index(node, token, insert=False)]
        elif isinstance(node, dict) and token in node:
            node = node[token]
        else:
            raise JSONPatchError(f"path element {token!r} does not exist")
    return node


def _get(document: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return document
    parent = _parent(document, tokens)
    if isinstance(parent, list):
        return parent[_index(parent, tokens[-1], insert=False)]
    if tokens[-1] not in parent:
        raise JSONPatchError(f"path {path!r} does not exist")
    return parent[tokens[-1]]


def _add(document: Any, path: str, value: Any) -> Any:
    tokens = _pointer(path)
    if not tokens:
        return value
    parent = _parent(document, tokens)
    if isinstance(parent, list):
        parent.insert(_index(parent, tokens[-1], insert=True), value)
    elif isinstance(parent, dict):
        parent[tokens[-1]] = value
    else:
        raise JSONPatchError(f"cannot add below a scalar at {path!r}")
    return document


def _remove(document: Any, path: str) -> Any:
    tokens = _pointer(path)
    if not tokens:
        raise JSONPatchError("cannot remove the whole document")
    parent = _parent(document, tokens)
    if isinstance(parent, list):
        del parent[_index(parent, tokens[-1], insert=False)]
    elif isinstance(parent, dict) and tokens[-1] in parent:
        del parent[tokens[-1]]
    else:
        raise JSONPatchError(f"path {path!r} does not exist")
    return document


def apply_json_patch(document: Any, operations: list[dict[str, Any]]) -> Any:
    """Apply an RFC 6902 patch to a copy of the document."""
    result = copy.deepcopy(document)
    for operation in operations:
        op, path = operation.get("op"), operation.get("path", "")
        if op == "add":
            result = _add(result, path, copy.deepcopy(operation["value"]))
        elif op == "remove":
            result = _remove(result, path)
        elif op == "replace":
            _get(result, path)
            result = _add(_remove(result, path), path, copy.deepcopy(operation["value"]))
        elif op in ("move", "copy"):
            value = copy.deepcopy(_get(result, operation["from"]))
            if op == "move":
                result = _remove(result, operation["from"])
            result = _add(result, path, value)
        elif op == "test":
            if _get(result, path) != operation["value"]:
                raise JSONPatchError(f"test of {path!r} failed")
        else:
            raise JSONPatchError(f"unknown operation {op!r}")
    return result


@dataclass(frozen=True)
class WebhookConfig:
    """One webhook entry of a MutatingWebhookConfiguration (server defaults applied)."""

    url: str
    name: str = "vgpu.hami.io"
    # Seconds; also sent as ?timeout=<n>s (API default 10).
    timeout_seconds: float = 10
    failure_policy: Literal["Fail", "Ignore"] = "Fail"
    # CA bundle that signs the webhook's serving certificate; None for plain http.
    ca_file: Path | None = None


@dataclass(frozen=True)
class AdmissionOutcome:
    """What the creating client would get: the object to store, or the API Status."""

    allowed: bool
    object: dict[str, Any] | None
    http_status: int
    status: dict[str, Any] | None = None
    patch: list[dict[str, Any]] | None = None
    request: dict[str, Any] = field(default_factory=dict)


class _WebhookCallError(Exception):
    """The webhook could not be called or answered nonsense (failurePolicy decides)."""


def _status(message: str, code: int, reason: str = "", **extra: Any) -> dict[str, Any]:
    status: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
    }
    if reason:
        status["reason"] = reason
    status.update(extra)
    status["code"] = code
    return status


def denial_status(webhook: str, result: dict[str, Any] | None) -> dict[str, Any]:
    """kube-apiserver's Status for allowed:false (codes below 400 become 400)."""
    result = dict(result or {})
    denied = f'admission webhook "{webhook}" denied the request'
    if result.get("message"):
        message = f"{denied}: {result['message']}"
    elif result.get("reason"):
        message = f"{denied}: {result['reason']}"
    else:
        message = f"{denied} without explanation"
    code = result.get("code") or 0
    extra = {"details": result["details"]} if result.get("details") else {}
    return _status(message, code if code >= 400 else 400, result.get("reason", ""), **extra)


def _group_version_kind(review: dict[str, Any]) -> str:
    api_version, kind = str(review.get("apiVersion", "")), str(review.get("kind", ""))
    group, _, version = api_version.rpartition("/")
    return f"{group}/{version}, Kind={kind}"


def _json_error(error: json.JSONDecodeError) -> str:
    if error.pos >= len(error.doc.rstrip()):
        return "unexpected end of JSON input"
    return f"invalid character {error.doc[error.pos]!r} looking for beginning of value"


class AdmissionClient:
    """Calls one mutating webhook per review, the way kube-apiserver does."""

    def __init__(self, config: WebhookConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        ssl_context: ssl.SSLContext | bool = False
        if self.config.ca_file is not None:
            ssl_context = ssl.create_default_context(cafile=str(self.config.ca_file))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_context),
            skip_auto_headers=list(HEADERS),
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> AdmissionClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def call_url(self) -> str:
        timeout = self.config.timeout_seconds
        shown = int(timeout) if float(timeout).is_integer() else timeout
        return f"{self.config.url}?timeout={shown}s"

    def build_review(
        self,
        obj: dict[str, Any],
        *,
        namespace: str,
        user_info: dict[str, Any],
        operation: str = "CREATE",
        dry_run: bool = False,
        options: dict[str, Any] | None = None,
        uid: str | None = None,
    ) -> dict[str, Any]:
        """AdmissionReview v1 for a pod, keys in kube-apiserver's order."""
        pod_kind = {"group": "", "version": "v1", "kind": "Pod"}
        pod_resource = {"group": "", "version": "v1", "resource": "pods"}
        request: dict[str, Any] = {
            "uid": uid or str(uuid.uuid4()),
            "kind": pod_kind,
            "resource": pod_resource,
            "requestKind": dict(pod_kind),
            "requestResource": dict(pod_resource),
        }
        name = (obj.get("metadata") or {}).get("name")
        if name:
            request["name"] = name
        create_options: dict[str, Any] = {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"}
        if dry_run:
            create_options["dryRun"] = ["All"]
        request |= {
            "namespace": namespace,
            "operation": operation,
            "userInfo": user_info,
            "object": defaulted_pod(obj),
            "oldObject": None,
            "dryRun": dry_run,
            "options": create_options | (options or {}),
        }
        return {"kind": REVIEW_KIND, "apiVersion": REVIEW_API_VERSION, "request": request}

    async def review(self, review: dict[str, Any]) -> AdmissionOutcome:
        """One webhook call for a built review; never retried."""
        request = review["request"]
        try:
            response, patch = await self._call(review)
            patched = apply_json_patch(request["object"], patch) if patch else request["object"]
        except (_WebhookCallError, JSONPatchError) as failure:
            if self.config.failure_policy == "Ignore":
                return AdmissionOutcome(True, request["object"], 201, request=request)
            message = f'failed calling webhook "{self.config.name}": {failure}'
            status = _status(
                f"Internal error occurred: {message}",
                500,
                "InternalError",
                details={"causes": [{"message": message}]},
            )
            return AdmissionOutcome(False, None, 500, status, request=request)
        if not response.get("allowed"):
            status = denial_status(self.config.name, response.get("status"))
            return AdmissionOutcome(False, None, status["code"], status, request=request)
        return AdmissionOutcome(True, patched, 201, None, patch, request=request)

    async def _call(
        self, review: dict[str, Any]
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        if self._session is None:
            raise RuntimeError("AdmissionClient used before start()")
        body = json.dumps(review, separators=(",", ":"), ensure_ascii=False) + "\n"
        url = self.call_url
        try:
            async with self._session.post(
                url,
                data=body.encode(),
                headers=HEADERS,
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_seconds),
            ) as http_response:
                raw = await http_response.text()
                status_code = http_response.status
        except TimeoutError as error:
            raise _WebhookCallError(
                f'failed to call webhook: Post "{url}": context deadline exceeded'
            ) from error
        except aiohttp.ClientConnectorError as error:
            raise _WebhookCallError(
                f'failed to call webhook: Post "{url}": dial tcp {error.host}:{error.port}: '
                "connect: connection refused"
            ) from error
        if status_code != 200:
            raise _WebhookCallError(
                f'failed to call webhook: an error on the server ("{raw.strip()}") '
                "has prevented the request from succeeding"
            )
        return self._validated(review, raw)

    def _validated(
        self, review: dict[str, Any], raw: str
    ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        try:
            answer = json.loads(raw)
        except json.JSONDecodeError as error:
            raise _WebhookCallError(
                f"failed to call webhook: couldn't get version/kind; json parse error: "
                f"{_json_error(error)}"
            ) from error
        invalid = "received invalid webhook response"
        if answer.get("apiVersion") != REVIEW_API_VERSION or answer.get("kind") != REVIEW_KIND:
            raise _WebhookCallError(
                f"{invalid}: expected webhook response of {REVIEW_API_VERSION}, "
                f"Kind={REVIEW_KIND}, got {_group_version_kind(answer)}"
            )
        response = answer.get("response")
        if not isinstance(response, dict):
            raise _WebhookCallError(f"{invalid}: webhook response was absent")
        expected = review["request"]["uid"]
        if response.get("uid") != expected:
            raise _WebhookCallError(
                f'{invalid}: expected response.uid="{expected}", got "{response.get("uid", "")}"'
            )
        if response.get("patch") and not response.get("patchType"):
            raise _WebhookCallError(
                f"{invalid}: webhook returned response.patch but not response.patchType"
            )
        if not response.get("patch"):
            return response, None
        if response["patchType"] != "JSONPatch":
            raise _WebhookCallError(
                f"{invalid}: webhook returned invalid patchType: {response['patchType']}"
            )
        try:
            return response, json.loads(base64.b64decode(response["patch"]))
        except (binascii.Error, json.JSONDecodeError) as error:
            raise _WebhookCallError(f"{invalid}: patch is not base64 JSON: {error}") from error
