"""Scenario phases: what is applied after what has settled.

A scenario is one phase unless it holds `Phase` documents (simulator-only, never
sent to the API server). Each starts a new phase: the documents after it, in file
order (a directory's files in name order), belong to it. The DRA simulation
applies a phase only once every pod of the ones before has run or been refused
with a reason, so a later pod meets a cluster the earlier ones already hold (how
a high-priority pod comes to preempt). A phase may first remove a scheduling gate
from a pod, as the gate's owner (Kueue) does when it admits the pod; the removal
is the administrator's, not a tenant's tamper attempt.

    apiVersion: simulate.vgpu.hami.io/v1alpha1
    kind: Phase
    metadata: {name: <name>}
    spec:
      removeSchedulingGates:            # optional
        - {pod: <name>, namespace: <ns>, gate: <gate name>}   # namespace optional
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dra_driver.errors import InvalidParameterError
from dra_driver.kube.rest import ApiError, KubeClient, object_path
from dra_driver.objects.pod_scheduling import scheduling_gate_names
from simulator.attempts import API_VERSION

KIND = "Phase"
DRA_MODES = ("dra", "dra-scheduler-allocated")
"""The modes whose simulation waits between phases."""


@dataclass(frozen=True, slots=True)
class GateRemoval:
    pod: str
    namespace: str | None
    gate: str
    source: str
    """Where it is written, for messages."""


@dataclass(frozen=True, slots=True)
class PhaseStart:
    name: str
    removals: tuple[GateRemoval, ...] = ()


def parse_phase(document: dict[str, Any], source: str) -> PhaseStart:
    """A `Phase` document, each field checked."""
    if document.get("apiVersion") != API_VERSION:
        raise InvalidParameterError(f"{source}: apiVersion", f"{KIND} needs {API_VERSION}")
    name = (document.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"{source}: metadata.name", f"a {KIND} needs a name")
    entries = (document.get("spec") or {}).get("removeSchedulingGates") or []
    if not isinstance(entries, list):
        raise InvalidParameterError(f"{source}: spec.removeSchedulingGates", "must be a list")
    removals = []
    for index, entry in enumerate(entries):
        where = f"{source} ({KIND} {name}): spec.removeSchedulingGates[{index}]"
        if not isinstance(entry, dict):
            raise InvalidParameterError(where, "must be {pod, gate, namespace (optional)}")
        for key in ("pod", "gate"):
            if not isinstance(entry.get(key), str) or not entry[key]:
                raise InvalidParameterError(f"{where}.{key}", "must be a non-empty string")
        namespace = entry.get("namespace")
        if namespace is not None and not isinstance(namespace, str):
            raise InvalidParameterError(f"{where}.namespace", "must be a string")
        removals.append(GateRemoval(entry["pod"], namespace, entry["gate"], where))
    return PhaseStart(name, tuple(removals))


async def remove_gate(client: KubeClient, removal: GateRemoval, default_namespace: str) -> None:
    """Remove the gate as its owner would: the pod's other gates stay, in order. A pod or
    gate that is not there is the scenario's mistake, raised naming the entry."""
    namespace = removal.namespace or default_namespace
    path = object_path(f"/api/v1/namespaces/{namespace}/pods", removal.pod)
    try:
        pod = await client.get(path)
        gates = scheduling_gate_names(pod)
        if removal.gate not in gates:
            raise InvalidParameterError(
                f"{removal.source}.gate",
                f"pod {namespace}/{removal.pod} has no scheduling gate {removal.gate} "
                f"(it has: {', '.join(gates) or 'none'})",
            )
        remaining = [{"name": gate} for gate in gates if gate != removal.gate]
        await client.patch(
            path,
            {
                "metadata": {"resourceVersion": pod["metadata"]["resourceVersion"]},
                "spec": {"schedulingGates": remaining},
            },
        )
    except ApiError as error:
        raise InvalidParameterError(f"{removal.source}.pod", error.message) from None
