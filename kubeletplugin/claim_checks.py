"""What prepare refuses in what kubelet and the API server hand it, before using any of it.

A claim's namespace, name and uid come from kubelet and end up in URLs and
file names; a reserving pod comes from the API server and could lift the
limits its claim's spec sets. Both are checked here, once, before prepare
reads or writes anything for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cdi.naming import validate_claim_uid
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.names import is_dns_label, is_dns_subdomain
from dra_driver.objects.tamper_rules import tamper_findings
from libvgpu.settings import LibvgpuPaths, guarded_paths


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """What kubelet says about a claim: namespace, name and uid, nothing else."""

    namespace: str
    name: str
    uid: str


def checked_ref(ref: ClaimRef) -> ClaimRef:
    """Refuse anything that could escape a path or a URL before it is used."""
    validate_claim_uid(ref.uid)
    if not is_dns_label(ref.namespace):
        raise InvalidParameterError("claim.namespace", f"{ref.namespace!r} is not a DNS label")
    if not is_dns_subdomain(ref.name):
        raise InvalidParameterError("claim.name", f"{ref.name!r} is not a DNS subdomain")
    return ref


def refuse_tampering(pod: Mapping[str, Any], pod_name: str, paths: LibvgpuPaths) -> None:
    """The second line behind admission: a reserving pod with a container that could
    lift libvgpu's limits (privileged, CAP_SYS_ADMIN, a hostPath over its files) is not
    prepared, since its claim's shares would not hold."""
    findings = tamper_findings(pod, guarded_paths(paths))
    if findings:
        first = findings[0]
        raise InvalidParameterError(
            f"pod {pod_name} container {first.container} {first.field}", first.reason
        )
