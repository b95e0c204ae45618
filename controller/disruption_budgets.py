"""PodDisruptionBudgets as kube-scheduler's preemption reads them. Pure.

`filterPodsWithPDBViolation` (defaultpreemption, v1.36) counts a pod against a
budget when the budget is in the pod's namespace, its selector is valid and not
empty (a nil or empty selector matches nothing there, unlike in the disruption
controller) and matches the pod's labels, and the pod is not already in the
budget's `status.disruptedPods`. What a budget still allows is
`status.disruptionsAllowed` as kube-controller-manager's disruption controller
last wrote it; the dry run never computes it itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controller.preemption import DisruptionBudget
from dra_driver.objects.node_predicates import label_selector_matches

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})


def disruption_budgets(
    budgets: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> list[DisruptionBudget]:
    """One DisruptionBudget per PodDisruptionBudget that covers at least one pod."""
    usable = [b for b in budgets if _usable((b.get("spec") or {}).get("selector"))]
    if not usable:
        return []
    by_namespace: dict[str, list[Mapping[str, Any]]] = {}
    for pod in pods:
        by_namespace.setdefault(pod["metadata"].get("namespace", ""), []).append(pod)
    found: list[DisruptionBudget] = []
    for budget in usable:
        selector = budget["spec"]["selector"]
        status = budget.get("status") or {}
        disrupted = status.get("disruptedPods") or {}
        covered = frozenset(
            str(pod["metadata"].get("uid"))
            for pod in by_namespace.get(budget["metadata"].get("namespace", ""), ())
            if pod["metadata"].get("name") not in disrupted
            and label_selector_matches(pod["metadata"].get("labels") or {}, selector)
        )
        if covered:
            found.append(DisruptionBudget(int(status.get("disruptionsAllowed") or 0), covered))
    return found


def _usable(selector: Any) -> bool:
    """Not empty and valid (LabelSelectorAsSelector would refuse the rest)."""
    if not isinstance(selector, Mapping):
        return False
    expressions = selector.get("matchExpressions") or []
    if not selector.get("matchLabels") and not expressions:
        return False
    return all(
        isinstance(e, Mapping)
        and e.get("operator") in _OPERATORS
        and bool(e.get("values")) == (e.get("operator") in ("In", "NotIn"))
        for e in expressions
    )
