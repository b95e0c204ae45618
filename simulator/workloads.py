"""User workloads: YAML documents read from files and created in dependency order."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.objects.yaml_files import read_yaml_documents


@dataclass(frozen=True, slots=True)
class Kind:
    api_version: str
    collection: str
    """URL of the collection; `{namespace}` for namespaced kinds."""
    order: int
    """Creation order: what others refer to first."""


KINDS: Mapping[str, Kind] = {
    "Namespace": Kind("v1", "/api/v1/namespaces", 0),
    "DeviceClass": Kind("resource.k8s.io/v1", f"{RESOURCE_API}/deviceclasses", 1),
    "ResourceQuota": Kind("v1", "/api/v1/namespaces/{namespace}/resourcequotas", 2),
    "ResourceClaimTemplate": Kind(
        "resource.k8s.io/v1", f"{RESOURCE_API}/namespaces/{{namespace}}/resourceclaimtemplates", 3
    ),
    "ResourceClaim": Kind(
        "resource.k8s.io/v1", f"{RESOURCE_API}/namespaces/{{namespace}}/resourceclaims", 4
    ),
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


def load_workloads(paths: Iterable[Path]) -> list[Workload]:
    """Every document of every file, checked for a kind the simulator knows, in apply order."""
    workloads = []
    for path in paths:
        for position, document in enumerate(read_yaml_documents(path)):
            if document is None:
                continue
            source = f"{path}#{position}"
            if not isinstance(document, dict):
                raise InvalidParameterError(source, "a document must be a Kubernetes object")
            kind = document.get("kind")
            if kind not in KINDS:
                raise InvalidParameterError(
                    f"{source}: kind", f"{kind!r} is not one of {', '.join(KINDS)}"
                )
            if document.get("apiVersion") != KINDS[kind].api_version:
                raise InvalidParameterError(
                    f"{source}: apiVersion",
                    f"{kind} needs apiVersion {KINDS[kind].api_version}",
                )
            workloads.append(Workload(source, document))
    return sorted(workloads, key=lambda w: KINDS[w.kind].order)


async def apply_workloads(
    client: KubeClient, workloads: Iterable[Workload], default_namespace: str
) -> list[Workload]:
    """Create each object (namespaced ones in `default_namespace` unless they name one).

    A refusal by the API server is the user's to fix: it is raised with the source
    document and the server's message, before anything else is created.
    """
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
            await client.create(path, workload.body)
        except ApiError as error:
            raise InvalidParameterError(
                f"{workload.source} ({workload.kind} {workload.name})", error.message
            ) from None
        created.append(workload)
    return created


async def _ensure_namespace(client: KubeClient, name: str) -> None:
    try:
        await client.create("/api/v1/namespaces", {"metadata": {"name": name}})
    except ApiError as error:
        if error.status != 409:
            raise
