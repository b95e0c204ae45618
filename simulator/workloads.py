"""User workloads: YAML documents read from files and created in dependency order.

A scenario's workloads come in phases (`phases.py`; one unless it says
otherwise), each created in dependency order. A scenario also holds tamper
attempts (`attempts.py`), kept apart and run once the workloads have settled; a
document marked for some modes only (`simulate.vgpu.hami.io/modes`) is left out
of the others, so one scenario serves `--mode dra` and `--mode legacy`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.objects.yaml_files import read_yaml_documents
from simulator import attempts, phases
from simulator.attempts import TamperAttempt
from simulator.gate_admission import NoGateAdmission, PodAdmission
from simulator.phases import DRA_MODES, PhaseStart, parse_phase


@dataclass(frozen=True, slots=True)
class Kind:
    api_version: str
    collection: str
    """URL of the collection; `{namespace}` for namespaced kinds."""
    order: int
    """Creation order: what others refer to first."""


KINDS: Mapping[str, Kind] = {
    "Namespace": Kind("v1", "/api/v1/namespaces", 0),
    "PriorityClass": Kind("scheduling.k8s.io/v1", "/apis/scheduling.k8s.io/v1/priorityclasses", 0),
    "DeviceClass": Kind("resource.k8s.io/v1", f"{RESOURCE_API}/deviceclasses", 1),
    "ResourceQuota": Kind("v1", "/api/v1/namespaces/{namespace}/resourcequotas", 2),
    "ResourceClaimTemplate": Kind(
        "resource.k8s.io/v1", f"{RESOURCE_API}/namespaces/{{namespace}}/resourceclaimtemplates", 3
    ),
    "ResourceClaim": Kind(
        "resource.k8s.io/v1", f"{RESOURCE_API}/namespaces/{{namespace}}/resourceclaims", 4
    ),
    "ConfigMap": Kind("v1", "/api/v1/namespaces/{namespace}/configmaps", 3),
    "Pod": Kind("v1", "/api/v1/namespaces/{namespace}/pods", 5),
}


@dataclass(frozen=True, slots=True)
class Workload:
    source: str
    """`file.yaml#<document index>`, for messages."""
    body: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.body.get("kind"))

    @property
    def name(self) -> str:
        return str((self.body.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str | None:
        return (self.body.get("metadata") or {}).get("namespace")


@dataclass(frozen=True, slots=True)
class Phase:
    start: PhaseStart
    workloads: list[Workload]
    """In apply order."""


@dataclass(frozen=True, slots=True)
class Scenario:
    phases: list[Phase]
    """In document order; the first starts unnamed, with the scenario."""
    attempts: list[TamperAttempt]
    """In document order: each may build on the ones before."""

    @property
    def workloads(self) -> list[Workload]:
        """Every phase's, in apply order."""
        return [workload for phase in self.phases for workload in phase.workloads]


def scenario_files(paths: Iterable[Path]) -> list[Path]:
    """The files themselves, and for a directory its `*.yaml` files in name order."""
    files = []
    for path in paths:
        files.extend(sorted(path.glob("*.yaml")) if path.is_dir() else [path])
    return files


def load_scenario(paths: Iterable[Path], mode: str, modes: tuple[str, ...]) -> Scenario:
    """Every document of every file (directories: their *.yaml) that applies to `mode`,
    checked for a kind the simulator knows; workloads in apply order, per phase."""
    starts: list[tuple[PhaseStart, list[Workload]]] = [(PhaseStart(""), [])]
    tampering = []
    for path in scenario_files(paths):
        for position, document in enumerate(read_yaml_documents(path)):
            if document is None:
                continue
            source = f"{path}#{position}"
            if not isinstance(document, dict):
                raise InvalidParameterError(source, "a document must be a Kubernetes object")
            if mode not in attempts.document_modes(document, source, modes):
                continue
            if document.get("kind") == attempts.KIND:
                tampering.append(_checked(attempts.parse_attempt(document, source), mode))
            elif document.get("kind") == phases.KIND:
                if mode not in DRA_MODES:
                    raise InvalidParameterError(
                        f"{source}: kind",
                        f"--mode {mode} applies every workload at once; phases run in the "
                        f"{' and '.join(DRA_MODES)} modes",
                    )
                starts.append((parse_phase(document, source), []))
            else:
                starts[-1][1].append(_workload(document, source))
    ordered = [
        Phase(start, sorted(found, key=lambda w: KINDS[w.kind].order)) for start, found in starts
    ]
    return Scenario(ordered, tampering)


LEGACY_MODE = "legacy"
PATCH_KINDS = (*KINDS, "Node")


def _checked(attempt: TamperAttempt, mode: str) -> TamperAttempt:
    """What an attempt creates or patches is a kind the simulator knows; a call goes to
    the legacy scheduler, which only the legacy mode runs."""
    where = f"{attempt.source} ({attempts.KIND} {attempt.name})"
    for index, obj in enumerate(attempt.create):
        _workload(obj, f"{where}: spec.create[{index}]")
    if attempt.patch is not None and attempt.patch.kind not in PATCH_KINDS:
        raise InvalidParameterError(
            f"{where}: spec.patch.kind",
            f"{attempt.patch.kind!r} is not one of {', '.join(PATCH_KINDS)}",
        )
    if attempt.call is not None and mode != LEGACY_MODE:
        raise InvalidParameterError(
            f"{where}: spec.call",
            f"calls go to the legacy scheduler, which --mode {mode} does not run; mark the "
            f"document {attempts.MODES_ANNOTATION}: {LEGACY_MODE}",
        )
    return attempt


def _workload(document: dict[str, Any], source: str) -> Workload:
    kind = document.get("kind")
    if kind not in KINDS:
        raise InvalidParameterError(
            f"{source}: kind",
            f"{kind!r} is not one of {', '.join([*KINDS, attempts.KIND, phases.KIND])}",
        )
    if document.get("apiVersion") != KINDS[kind].api_version:
        raise InvalidParameterError(
            f"{source}: apiVersion",
            f"{kind} needs apiVersion {KINDS[kind].api_version}",
        )
    return Workload(source, document)


async def apply_workloads(
    client: KubeClient,
    workloads: Iterable[Workload],
    default_namespace: str,
    admission: PodAdmission | None = None,
) -> list[Workload]:
    """Create each object (namespaced ones in `default_namespace` unless they name one),
    each pod as `admission` leaves it.

    A refusal by the API server is the user's to fix: it is raised with the source
    document and the server's message, before anything else is created.
    """
    admission = admission or NoGateAdmission()
    created = []
    namespaces = {default_namespace}
    for workload in workloads:
        namespace = workload.namespace or default_namespace
        if workload.kind == "Namespace":
            namespaces.add(workload.name)
        elif namespace not in namespaces:
            await _ensure_namespace(client, namespace)
            namespaces.add(namespace)
        path = KINDS[workload.kind].collection.format(namespace=namespace)
        try:
            body = workload.body
            if workload.kind == "Pod":
                body = await admission.admit(body, namespace)
            await client.create(path, body)
        except ApiError as error:
            raise InvalidParameterError(
                f"{workload.source} ({workload.kind} {workload.name})", error.message
            ) from None
        except InvalidParameterError as error:
            raise InvalidParameterError(
                f"{workload.source} ({workload.kind} {workload.name})", error.reason
            ) from None
        created.append(workload)
    return created


async def _ensure_namespace(client: KubeClient, name: str) -> None:
    try:
        await client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    except ApiError as error:
        if error.status != 409:
            raise
