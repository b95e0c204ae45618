"""The allocation-gate admission step of the controller-allocated DRA simulation.

deploy/overlays/dra installs a MutatingWebhookConfiguration that sends every new pod
to the controller's `/allocation-gate` (controller/gate_webhook.py), which gives a
pod of our classes the `vgpu.hami.io/allocation` gate; the controller removes it
once the pod's claims are allocated, so kube-scheduler meets the pod only then. The
emulator calls no webhook, so the simulation does what kube-apiserver would: it
serves the real webhook over TLS (as the controller's identity, which reads the
claims and templates) and sends each pod it creates through the admission stand-in
before creating it. The webhook entry's name, timeout and failure policy are read
from deploy/ itself, as the simulation's admission policies are.

Where kube-scheduler allocates (`dra-scheduler-allocated`) deploy/ installs no such
webhook: `NoGateAdmission` creates pods as they are.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from controller.gate_webhook import GateWebhookServer
from controller.legacy.caller_auth import ALLOCATION_GATE_PATH
from controller.legacy.config import CallerAuthSettings
from controller.legacy.server import ServeSettings
from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.pod_scheduling import scheduling_gate_names
from dra_driver.objects.yaml_files import read_yaml_documents
from dra_driver.process.atomic_file import write_atomically
from dra_driver.tls.bundle import issue_bundle
from simulator.apiserver.authentication import KUBECONFIG_TOKEN, Tokens
from simulator.policies import DEPLOY
from simulator.standins.admission import AdmissionClient, WebhookConfig

WEBHOOK_FILE = DEPLOY / "components" / "allocation-gate" / "webhook.yaml"
LOOPBACK = "127.0.0.1"
VALIDITY = dt.timedelta(days=1)
"""Long enough for any run; the files go with the run's directory."""


PodKey = tuple[str, str]
"""(namespace, name)."""


class PodAdmission(Protocol):
    created_gates: dict[PodKey, list[str]]
    """The scheduling gates each pod it admitted was created with (the report's)."""

    async def admit(
        self, pod: dict[str, Any], namespace: str, token: str = KUBECONFIG_TOKEN
    ) -> dict[str, Any]:
        """The pod as admission leaves it, created by the holder of `token`."""


def _record(created_gates: dict[PodKey, list[str]], pod: dict[str, Any], namespace: str) -> None:
    created_gates[(namespace, pod["metadata"]["name"])] = scheduling_gate_names(pod)


@dataclass
class NoGateAdmission:
    """No allocation-gate webhook: pods are created as they are."""

    created_gates: dict[PodKey, list[str]] = field(default_factory=dict)

    async def admit(
        self, pod: dict[str, Any], namespace: str, token: str = KUBECONFIG_TOKEN
    ) -> dict[str, Any]:
        _record(self.created_gates, pod, namespace)
        return pod


def deployed_webhook_config(url: str, ca_file: Path) -> WebhookConfig:
    """The allocation-gate entry of deploy/'s MutatingWebhookConfiguration, called at `url`."""
    for document in read_yaml_documents(WEBHOOK_FILE):
        if isinstance(document, dict) and document.get("kind") == "MutatingWebhookConfiguration":
            (entry,) = document["webhooks"]
            return WebhookConfig(
                url=url,
                name=entry["name"],
                timeout_seconds=entry.get("timeoutSeconds", 10),
                failure_policy=entry.get("failurePolicy", "Fail"),
                ca_file=ca_file,
            )
    raise InvalidParameterError(str(WEBHOOK_FILE), "holds no MutatingWebhookConfiguration")


@dataclass
class GateAdmission:
    """kube-apiserver's call of `/allocation-gate` for each pod created."""

    client: AdmissionClient
    tokens: Tokens
    created_gates: dict[PodKey, list[str]] = field(default_factory=dict)

    async def admit(
        self, pod: dict[str, Any], namespace: str, token: str = KUBECONFIG_TOKEN
    ) -> dict[str, Any]:
        user_info = self.tokens.user(token).status()
        review = await self.client.review(
            self.client.build_review(pod, namespace=namespace, user_info=user_info)
        )
        if not review.allowed or review.object is None:
            message = (review.status or {}).get("message", "denied")
            raise InvalidParameterError(f"admission webhook {self.client.config.name}", message)
        _record(self.created_gates, review.object, namespace)
        return review.object


async def start_gate_admission(
    stack: AsyncExitStack,
    controller: KubeClient,
    classes: Collection[str],
    tokens: Tokens,
    directory: Path,
) -> GateAdmission:
    """The controller's webhook served over TLS on loopback, open to any caller as
    deploy/ serves it (`--open-webhook`), and the API server's caller of it."""
    directory.mkdir(parents=True, exist_ok=True)
    bundle = issue_bundle((LOOPBACK,), dt.datetime.now(dt.UTC), VALIDITY)
    for name, data in bundle.secret_data().items():
        write_atomically(directory / name, data, mode=0o600)
    serve = ServeSettings(
        host=LOOPBACK, port=0, tls_cert=directory / "tls.crt", tls_key=directory / "tls.key"
    )
    server = GateWebhookServer(controller, classes, serve, CallerAuthSettings(open_webhook=True))
    await stack.enter_async_context(server)
    url = f"https://{LOOPBACK}:{server.port}{ALLOCATION_GATE_PATH}"
    config = deployed_webhook_config(url, directory / "ca.crt")
    return GateAdmission(await stack.enter_async_context(AdmissionClient(config)), tokens)
