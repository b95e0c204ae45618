"""What the DRA controller reads off claims and pods: allocation, node, phase, verdict.

Pure functions over the API's objects (plain dicts), so the view, the writer,
the sweeper and the decision loop answer each question about an object in one
place and the same way. May import only the pure `dra_driver.objects` helpers.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

from controller.allocation_gate import blocking_gates
from dra_driver.objects.node_predicates import TERMINAL_PHASES

STALE_CYCLE_MESSAGES = ("cannot allocate all claims", "waiting for resource claim")
"""kube-scheduler's DRA messages for claims it saw unallocated (a cycle that raced us)."""

SHARED_TEXT_MAX = 64
"""Texts up to this length are shared between the objects the controller keeps (names,
uids, timestamps, quantities); longer ones (messages) are rarely repeated."""

UNSHARED_FIELDS = frozenset({"resourceVersion"})
"""Fields whose text no other object holds: every version of every object has its own
resourceVersion. Interned, each watch event added one more entry to Python's table of
interned texts (a dict, which keeps the size it grew to), and at 10,000 pods and claims
that table doubled to about 8 MiB in one burst or the next, whichever happened to
resize it while the most texts were alive."""

ConditionSignature = tuple[str, str]
"""A PodScheduled condition as (lastTransitionTime, message): a new one means a new verdict."""


def allocation_of(claim: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return ((claim or {}).get("status") or {}).get("allocation")


def reservations_of(claim: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((claim.get("status") or {}).get("reservedFor") or [])


def allocated_node(claim: Mapping[str, Any]) -> str | None:
    """The node an allocation's nodeSelector names (this driver's allocations name one)."""
    selector = (allocation_of(claim) or {}).get("nodeSelector") or {}
    for term in selector.get("nodeSelectorTerms") or []:
        for requirement in term.get("matchFields") or []:
            if requirement.get("key") == "metadata.name" and requirement.get("values"):
                return str(requirement["values"][0])
    return None


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled":
            return condition
    return None


def condition_signature(condition: Mapping[str, Any] | None) -> ConditionSignature | None:
    if condition is None:
        return None
    return (str(condition.get("lastTransitionTime")), str(condition.get("message")))


def is_gated(pod: Mapping[str, Any]) -> bool:
    """The pod names a scheduling gate other than the controller's own allocation gate,
    which it removes itself once the pod's claims are allocated (allocation_gate.py):
    nobody may schedule the pod until the last of those is gone."""
    return bool(blocking_gates(pod))


def is_pending(pod: Mapping[str, Any]) -> bool:
    """Not bound, not gated, not being deleted, phase Pending: a pod whose claims may be
    allocated now. A gated pod is not scheduled, so its claims are neither allocated nor
    reserved nor held for it; its gates can only be removed, and the update that removes
    the last one makes it pending."""
    return (
        not is_gated(pod)
        and not (pod.get("spec") or {}).get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
    )


def is_terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in TERMINAL_PHASES


def refused_with_claims_allocated(condition: Mapping[str, Any] | None) -> bool:
    """A PodScheduled=False that kube-scheduler wrote knowing the claims were allocated.

    A cycle that read the claims before the allocation reports them as not
    allocatable (`cannot allocate all claims`); only a filter failure on an
    allocated claim's node (reason Unschedulable, another message) means the
    pod cannot go there.
    """
    return (
        condition is not None
        and condition.get("status") == "False"
        and condition.get("reason") == "Unschedulable"
        and not any(text in str(condition.get("message")) for text in STALE_CYCLE_MESSAGES)
    )


def compact_object(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the controller keeps it: without `metadata.managedFields`, which
    it never reads (its writes replace only the status, so the server keeps their
    owners as they were), and with every key and short text shared (`sys.intern`) but
    those of UNSHARED_FIELDS.
    json decodes each object's keys afresh, so 10,000 pods and claims held the same
    few hundred names (and values: namespaces, class names, tolerations) 10,000
    times over; shared, a pod or claim costs about half the memory."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return _shared(obj)


def _shared(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            sys.intern(key): item if key in UNSHARED_FIELDS else _shared(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_shared(item) for item in value]
    if isinstance(value, str) and len(value) <= SHARED_TEXT_MAX:
        return sys.intern(value)
    return value
