"""The allocation gate: kube-scheduler meets a pod of our classes only once its shares are ready.

In controller-allocated DRA mode kube-scheduler would otherwise try such a pod
before the controller's allocation lands, fail it (`FailedScheduling`, a status
write) and put it in its backoff. So admission gives the pod the scheduling gate
ALLOCATION_GATE when it is created (a mutating webhook), the controller
allocates and reserves its claims as if the gate were not there, and then removes
the gate: kube-scheduler sees the pod once, with its claims allocated, and binds it.

The rules, one place each:
- `needs_gate`: admission gates a pod one of whose claims or templates names a
  DeviceClass this controller serves (`names_class`, the same test the controller
  applies to claims), unless it is bound or gated by us already. A claim or
  template that cannot be read counts as not ours: admission fails open.
- `blocking_gates`: every gate but ours keeps the controller off the pod (Kueue
  and other queues hold pods by their gates until quota admits them).
- `gate_removal`: the controller removes its gate only when it is the last one and
  every claim of our classes is allocated and reserved for the pod; the JSON patch
  tests the entry's index and value before removing it, so it never removes another
  gate, whatever changed meanwhile.

Pure: no client, no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from dra_driver.objects.pod_scheduling import scheduling_gate_names

ALLOCATION_GATE = "vgpu.hami.io/allocation"
"""The scheduling gate admission sets and only the controller removes."""

Patch = list[dict[str, Any]]
"""A JSON patch (RFC 6902), sent as application/json-patch+json."""


def names_class(claim_spec: Mapping[str, Any], classes: Collection[str]) -> bool:
    """Whether a request of the claim spec (a ResourceClaim's `spec`, or a template's
    `spec.spec`) names one of `classes`, directly or among its `firstAvailable`."""
    for request in (claim_spec.get("devices") or {}).get("requests") or []:
        exactly = request.get("exactly")
        if exactly is not None and exactly.get("deviceClassName") in classes:
            return True
        if any(s.get("deviceClassName") in classes for s in request.get("firstAvailable") or []):
            return True
    return False


def blocking_gates(pod: Mapping[str, Any]) -> list[str]:
    """The pod's gates that keep the controller off it: all but ours, which it removes
    itself once its allocation is written."""
    return [name for name in scheduling_gate_names(pod) if name != ALLOCATION_GATE]


def needs_gate(
    pod: Mapping[str, Any],
    claim_specs: Iterable[Mapping[str, Any] | None],
    classes: Collection[str],
) -> bool:
    """Whether admission should add our gate to a pod being created, given the specs
    of the claims and templates its `spec.resourceClaims` name (None for one that
    cannot be read: not ours, so the pod goes the ungated way)."""
    if (pod.get("spec") or {}).get("nodeName") or ALLOCATION_GATE in scheduling_gate_names(pod):
        return False
    return any(spec is not None and names_class(spec, classes) for spec in claim_specs)


def gate_patch(pod: Mapping[str, Any]) -> Patch:
    """The JSON patch admission returns to add our gate after the pod's own gates."""
    if (pod.get("spec") or {}).get("schedulingGates"):
        return [
            {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": ALLOCATION_GATE}}
        ]
    return [{"op": "add", "path": "/spec/schedulingGates", "value": [{"name": ALLOCATION_GATE}]}]


def gate_removal(
    pod: Mapping[str, Any],
    claims: Iterable[Mapping[str, Any] | None],
    classes: Collection[str],
) -> Patch | None:
    """The patch that removes our gate, if the controller may remove it now: it is the
    pod's only gate and each of the pod's claims (None: not made or not seen yet) of
    our classes is allocated and reserved for the pod. Claims of other classes are
    kube-scheduler's to allocate once the pod is ungated."""
    gates = scheduling_gate_names(pod)
    if gates != [ALLOCATION_GATE] or pod["metadata"].get("deletionTimestamp"):
        return None
    uid = pod["metadata"].get("uid")
    for claim in claims:
        if claim is None:
            return None
        if not names_class(claim.get("spec") or {}, classes):
            continue
        status = claim.get("status") or {}
        if status.get("allocation") is None or not any(
            r.get("uid") == uid for r in status.get("reservedFor") or []
        ):
            return None
    entry = (pod.get("spec") or {})["schedulingGates"][0]
    return [
        {"op": "test", "path": "/spec/schedulingGates/0", "value": entry},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]
