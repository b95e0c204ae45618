"""A tamper attempt's call to the legacy scheduler: /bind or /filter with wrong credentials.

The call carries real extender arguments (the pod's name and uid, the node to
bind to), so a server that let it through would act on it. What comes back
is the HTTP status and the server's `Error` text, or, when the TLS handshake
itself fails (a client certificate from a CA the server does not trust), no
status and the TLS error.
"""

from __future__ import annotations

import json
import ssl
from typing import Any

import aiohttp

from dra_driver.kube.rest import KubeClient
from simulator.attempts import Call, Credentials
from simulator.legacy_tls import LegacyTLS
from simulator.standins.scheduler_extender import HEADERS, scheduler_view
from simulator.tamper import CallAnswer

CALL_TIMEOUT_S = 10.0


async def call_arguments(admin: KubeClient, call: Call, namespace: str) -> dict[str, Any]:
    """The ExtenderBindingArgs or ExtenderArgs kube-scheduler would send about the pod."""
    pod = await admin.get(f"/api/v1/namespaces/{namespace}/pods/{call.pod}")
    if call.path == "/bind":
        return {
            "PodName": call.pod,
            "PodNamespace": namespace,
            "PodUID": pod["metadata"]["uid"],
            "Node": call.node,
        }
    nodes = (await admin.list("/api/v1/nodes")).get("items") or []
    return {
        "Pod": scheduler_view(pod),
        "Nodes": None,
        "NodeNames": [n["metadata"]["name"] for n in nodes],
    }


def call_context(tls: LegacyTLS, credentials: Credentials) -> ssl.SSLContext:
    """Trust the scheduler's serving CA; present the untrusted certificate if asked to."""
    context = ssl.create_default_context(cafile=str(tls.ca))
    if credentials is Credentials.UNTRUSTED_CERTIFICATE:
        context.load_cert_chain(tls.untrusted.cert, tls.untrusted.key)
    return context


async def post_call(
    url: str, arguments: dict[str, Any], context: ssl.SSLContext, token: str | None
) -> CallAnswer:
    headers = dict(HEADERS)
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    timeout = aiohttp.ClientTimeout(total=CALL_TIMEOUT_S)
    try:
        async with (
            aiohttp.ClientSession(skip_auto_headers=list(HEADERS)) as session,
            session.post(
                url, data=json.dumps(arguments), headers=headers, ssl=context, timeout=timeout
            ) as response,
        ):
            text = await response.text()
            return CallAnswer(response.status, _error_text(text))
    except (
        aiohttp.ClientSSLError,
        aiohttp.ClientOSError,
        aiohttp.ServerDisconnectedError,
    ) as error:
        return CallAnswer(None, str(error) or type(error).__name__)


def _error_text(text: str) -> str:
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        return text.strip()
    return str(answer.get("Error", text.strip())) if isinstance(answer, dict) else text.strip()
