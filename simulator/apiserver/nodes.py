"""The node.kubernetes.io/not-ready taint: added at admission, kept while the node is not Ready.

The real TaintNodesByCondition admission plugin taints every new Node, and
kube-controller-manager's node-lifecycle controller removes the taint once the
node reports Ready (or reports no conditions yet). Schedulers see the window
in between, so the emulator reproduces it. Pure functions: no I/O.
"""

from __future__ import annotations

from typing import Any

NOT_READY = "node.kubernetes.io/not-ready"
NOT_READY_TAINT: dict[str, str] = {"key": NOT_READY, "effect": "NoSchedule"}


def has_not_ready_taint(node: dict[str, Any]) -> bool:
    return any(
        t.get("key") == NOT_READY and t.get("effect") == "NoSchedule"
        for t in (node.get("spec") or {}).get("taints") or ()
    )


def taint_new_node(node: dict[str, Any]) -> None:
    """Admission: a new Node is not ready until the lifecycle controller says otherwise."""
    if has_not_ready_taint(node):
        return
    spec = node["spec"] = dict(node.get("spec") or {})
    spec["taints"] = [*(spec.get("taints") or ()), dict(NOT_READY_TAINT)]


def is_ready_or_silent(node: dict[str, Any]) -> bool:
    """Ready=True, or no conditions at all: both lift the taint on a real cluster."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    if not conditions:
        return True
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def without_not_ready_taint(node: dict[str, Any]) -> dict[str, Any]:
    """A copy of the node with the taint removed (and `taints` dropped when it empties)."""
    spec = dict(node.get("spec") or {})
    taints = [
        t
        for t in spec.get("taints") or ()
        if not (t.get("key") == NOT_READY and t.get("effect") == "NoSchedule")
    ]
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)
    new = dict(node)
    new["metadata"] = dict(node["metadata"])
    new["spec"] = spec
    return new
