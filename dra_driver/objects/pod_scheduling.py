"""What a pod's spec says to a scheduler's queue: its priority and its scheduling gates.

Read alike by the DRA controller (queue order, gates, preemption), the legacy
extender's preempt verb and the kube-scheduler stand-in, so the three agree on
which pod comes first and which one no scheduler may take yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pod_priority(pod: Mapping[str, Any]) -> int:
    """`spec.priority` as the Priority admission plugin set it (0 when absent or not an
    integer, as kube-scheduler's corev1helpers.PodPriority reads it)."""
    priority = (pod.get("spec") or {}).get("priority")
    return priority if isinstance(priority, int) and not isinstance(priority, bool) else 0


def scheduling_gate_names(pod: Mapping[str, Any]) -> list[str]:
    """The names of the pod's scheduling gates, in order."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    return [str(gate.get("name")) for gate in gates if isinstance(gate, Mapping)]


def preemption_policy(pod: Mapping[str, Any]) -> str:
    """`spec.preemptionPolicy` as the Priority admission plugin set it
    (`PreemptLowerPriority` when absent, the API's default)."""
    policy = (pod.get("spec") or {}).get("preemptionPolicy")
    return str(policy) if policy else "PreemptLowerPriority"
