"""Run a scenario's tamper attempts against the running cluster, one after another.

Each attempt runs as its identity, after the regular workloads have settled,
in document order. The way a pod is placed differs per mode (DRA: created,
then scheduled and prepared by the stand-ins; legacy: the webhook, then
/filter, /bind and Allocate), and so does where a call goes, so a mode hands
in a `Target`; what counts as refused, neutralised or ALLOWED is the same for
both and decided here and in `tamper_judge.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient
from dra_driver.objects.pod_claims import pod_claim_names
from simulator.attempts import AttemptReport, Call, Identity, Outcome, Patch, TamperAttempt
from simulator.identities import Identities
from simulator.report import PodReport
from simulator.tamper_judge import RunningPod, judge_running_pod
from simulator.workloads import KINDS

NODES = "/api/v1/nodes"
REFUSED_STATUSES = frozenset({401, 403})


@dataclass(frozen=True, slots=True)
class PlacedPod:
    """A tenant's pod after its mode placed it: refused on the way, or as far as it got."""

    refusal: str = ""
    """Why admission (the API server, a policy, the webhook) refused it; empty: stored."""
    stored: Mapping[str, Any] | None = None
    report: PodReport | None = None


@dataclass(frozen=True, slots=True)
class CallAnswer:
    """What a call to the legacy scheduler got: an HTTP status, or none (TLS refused)."""

    status: int | None
    message: str


class Target(Protocol):
    """What a mode offers the attempts."""

    admin: KubeClient
    identities: Identities
    driver_env_wins: bool

    async def place_pod(
        self, pod: dict[str, Any], namespace: str, identity: Identity
    ) -> PlacedPod: ...

    async def call(self, call: Call, identity: Identity | None, namespace: str) -> CallAnswer: ...


def collection_path(kind: str, namespace: str) -> str:
    """The URL of a scenario kind's collection (Node too, for patches)."""
    return NODES if kind == "Node" else KINDS[kind].collection.format(namespace=namespace)


def object_path(kind: str, name: str, namespace: str, subresource: str = "") -> str:
    return f"{collection_path(kind, namespace)}/{name}" + (f"/{subresource}" if subresource else "")


async def run_attempts(
    target: Target,
    attempts: Sequence[TamperAttempt],
    namespace: str,
    on_step: Callable[[str], None],
) -> list[AttemptReport]:
    reports = []
    for attempt in attempts:
        on_step(f"tamper attempt {attempt.name}")
        outcome, reason, details = await _run(target, attempt, namespace)
        who = attempt.identity.username if attempt.identity is not None else "anonymous"
        reports.append(
            AttemptReport(
                attempt.name, attempt.description, who, attempt.action, outcome, reason, details
            )
        )
    return reports


async def _run(
    target: Target, attempt: TamperAttempt, namespace: str
) -> tuple[Outcome, str, list[str]]:
    if attempt.call is not None:
        return _called(await target.call(attempt.call, attempt.identity, namespace))
    if attempt.identity is None:
        raise InvalidParameterError(f"{attempt.source}: spec.as", "only a call may go without")
    client = await target.identities.client(attempt.identity)
    if attempt.patch is not None:
        return await _patch(client, attempt.patch, namespace)
    return await _create(target, client, attempt.identity, attempt.create, namespace)


def _called(answer: CallAnswer) -> tuple[Outcome, str, list[str]]:
    if answer.status is None:
        return Outcome.REFUSED, f"connection refused in the TLS handshake: {answer.message}", []
    if answer.status in REFUSED_STATUSES:
        return Outcome.REFUSED, f"HTTP {answer.status}: {answer.message}", []
    return Outcome.ALLOWED, f"HTTP {answer.status}: the caller reached the handler", []


async def _patch(
    client: KubeClient, patch: Patch, namespace: str
) -> tuple[Outcome, str, list[str]]:
    path = object_path(patch.kind, patch.name, patch.namespace or namespace, patch.subresource)
    try:
        await client.patch(path, patch.body)
    except ApiError as error:
        return Outcome.REFUSED, error.message, []
    return Outcome.ALLOWED, "the API server stored the patch", []


async def _create(
    target: Target,
    client: KubeClient,
    identity: Identity,
    objects: Sequence[dict[str, Any]],
    namespace: str,
) -> tuple[Outcome, str, list[str]]:
    """Each object in order as `identity`: the first refusal is the outcome."""
    placed: list[tuple[dict[str, Any], PlacedPod]] = []
    for obj in objects:
        where = (obj.get("metadata") or {}).get("namespace") or namespace
        if obj["kind"] == "Pod":
            result = await target.place_pod(obj, where, identity)
            if result.refusal:
                return Outcome.REFUSED, result.refusal, []
            placed.append((obj, result))
            continue
        try:
            await client.create(collection_path(obj["kind"], where), obj)
        except ApiError as error:
            return Outcome.REFUSED, error.message, []
    if not placed:
        return Outcome.ALLOWED, "the API server stored every object", []
    return await _judge_pods(target, placed)


async def _judge_pods(
    target: Target, placed: list[tuple[dict[str, Any], PlacedPod]]
) -> tuple[Outcome, str, list[str]]:
    """The first pod refused on the way is the attempt's outcome; else the verdict on all."""
    verdicts = []
    for submitted, result in placed:
        report, stored = result.report, result.stored
        if report is None or stored is None or report.phase != "Running":
            reason = report.reason if report is not None else ""
            return Outcome.REFUSED, reason, []
        verdicts.append(judge_running_pod(await _running_pod(target, submitted, stored, report)))
    worst = next((v for v in verdicts if v.outcome is Outcome.ALLOWED), verdicts[0])
    details = [line for verdict in verdicts for line in verdict.details]
    return worst.outcome, worst.reason, details


async def _running_pod(
    target: Target, submitted: dict[str, Any], stored: Mapping[str, Any], report: PodReport
) -> RunningPod:
    namespace = stored["metadata"]["namespace"]
    maps = (await target.admin.list(f"/api/v1/namespaces/{namespace}/configmaps")).get("items")
    claims = {name for name in pod_claim_names(stored).values() if name}
    events = (await target.admin.list(f"/api/v1/namespaces/{namespace}/events")).get("items")
    return RunningPod(
        submitted=submitted,
        stored=stored,
        driver_env={name: c.env for name, c in report.containers.items()},
        driver_env_wins=target.driver_env_wins,
        config_maps={m["metadata"]["name"]: m.get("data") or {} for m in maps or []},
        claim_events=[
            event
            for event in events or []
            if (event.get("involvedObject") or {}).get("kind") == "ResourceClaim"
            and (event.get("involvedObject") or {}).get("name") in claims
        ],
    )
