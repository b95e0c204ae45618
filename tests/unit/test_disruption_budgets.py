"""Which pods a PodDisruptionBudget covers for preemption (filterPodsWithPDBViolation)."""

from __future__ import annotations

from typing import Any

from controller.disruption_budgets import disruption_budgets
from controller.preemption import DisruptionBudget


def pod(name: str, namespace: str = "default", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels}
    }


def budget(selector: Any, allowed: int = 0, namespace: str = "default", **status: Any) -> Any:
    return {
        "metadata": {"name": "b", "namespace": namespace},
        "spec": {"selector": selector},
        "status": {"disruptionsAllowed": allowed, **status},
    }


PODS = [pod("a", app="web"), pod("b", app="db"), pod("c", "other", app="web"), pod("d")]


def test_match_labels_in_the_budgets_namespace_with_its_allowance() -> None:
    found = disruption_budgets([budget({"matchLabels": {"app": "web"}}, 2)], PODS)
    assert found == [DisruptionBudget(2, frozenset({"uid-a"}))]


def test_match_expressions() -> None:
    selector = {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}
    assert disruption_budgets([budget(selector)], PODS) == [
        DisruptionBudget(0, frozenset({"uid-b", "uid-d"}))
    ]
    exists = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    assert disruption_budgets([budget(exists)], PODS)[0].pods == {"uid-a", "uid-b"}


def test_an_empty_or_invalid_selector_covers_nothing() -> None:
    invalid = {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]}
    assert disruption_budgets([budget({}), budget(None), budget(invalid)], PODS) == []


def test_pods_already_disrupted_are_not_counted_again() -> None:
    found = disruption_budgets(
        [budget({"matchLabels": {"app": "web"}}, disruptedPods={"a": "2026-01-01T00:00:00Z"})],
        [*PODS, pod("e", app="web")],
    )
    assert found == [DisruptionBudget(0, frozenset({"uid-e"}))]
