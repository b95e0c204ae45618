"""Which ResourceClaims each container of a pod uses, read from the pod manifest.

The kubelet plugin is told only about a claim; the pod that reserved it says
which containers use it and with which other claims. libvgpu numbers a
container's limits by device ordinal from 0 (`CUDA_DEVICE_MEMORY_LIMIT_<i>`),
and each claim's CDI spec numbers its own devices, so two claims of this
driver in one container would clobber each other's limits.
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


def _claim_names(pod: Mapping[str, Any]) -> dict[str, str]:
    """Pod claim entry -> ResourceClaim name; template claims not yet made are left out."""
    generated = {
        status.get("name"): status.get("resourceClaimName")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    names = {}
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or generated.get(entry.get("name"))
        if name:
            names[entry.get("name")] = name
    return names


def container_claims(pod: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Container name (init containers included) -> the ResourceClaims it uses."""
    names = _claim_names(pod)
    spec = pod.get("spec") or {}
    result = {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        used = ((container.get("resources") or {}).get("claims")) or []
        claims = frozenset(names[entry["name"]] for entry in used if entry.get("name") in names)
        if claims:
            result[str(container.get("name"))] = claims
    return result
