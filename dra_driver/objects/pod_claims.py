"""Pods and their ResourceClaims, read from the manifests: which claim each pod entry
names, which claims each container uses, which pods reserved a claim.

The kubelet plugin is told only about a claim; the pod that reserved it says
which containers use it and with which other claims. libvgpu numbers a
container's limits by device ordinal from 0 (`CUDA_DEVICE_MEMORY_LIMIT_<i>`),
and each claim's CDI spec numbers its own devices, so two claims of this
driver in one container would clobber each other's limits. The controller,
the stand-ins and the simulator resolve a pod's claims the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PodReference:
    """A pod named in a claim's `status.reservedFor`."""

    name: str
    uid: str


def reserving_pods(claim: Mapping[str, Any]) -> tuple[PodReference, ...]:
    """The pods (core group, resource `pods`) that reserved the claim."""
    references = (claim.get("status") or {}).get("reservedFor") or []
    return tuple(
        PodReference(str(entry.get("name") or ""), str(entry.get("uid") or ""))
        for entry in references
        if entry.get("resource") == "pods" and not entry.get("apiGroup")
    )


def pod_claim_names(pod: Mapping[str, Any]) -> dict[str, str | None]:
    """Pod claim entry -> ResourceClaim name: `resourceClaimName`, or for a template entry
    the claim kube-controller-manager made (`status.resourceClaimStatuses`); None while
    that claim is not made yet."""
    generated = {
        status.get("name"): status.get("resourceClaimName")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    return {
        entry.get("name"): entry.get("resourceClaimName") or generated.get(entry.get("name"))
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []
    }


def container_claims(pod: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Container name (init containers included) -> the ResourceClaims it uses."""
    names = {entry: name for entry, name in pod_claim_names(pod).items() if name}
    spec = pod.get("spec") or {}
    result = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        used = ((container.get("resources") or {}).get("claims")) or []
        claims = frozenset(names[entry["name"]] for entry in used if entry.get("name") in names)
        if claims:
            result[str(container.get("name"))] = claims
    return result


def container_claim_entries(pod: Mapping[str, Any]) -> dict[str, tuple[tuple[str, str], ...]]:
    """Container name (init containers included) -> `(ResourceClaim, request)` per entry of
    its `resources.claims`, request "" for the whole claim, in the order kubelet hands the
    runtime their CDI devices: by the pod's claim entries, then the container's."""
    entries = [(entry, name) for entry, name in pod_claim_names(pod).items() if name]
    spec = pod.get("spec") or {}
    result = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        used = ((container.get("resources") or {}).get("claims")) or []
        named = tuple(
            (name, str(claim.get("request") or ""))
            for entry, name in entries
            for claim in used
            if claim.get("name") == entry
        )
        if named:
            result[str(container.get("name"))] = named
    return result
