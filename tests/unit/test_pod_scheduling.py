"""The pod's priority and gates as every scheduler-side component reads them."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.objects.pod_scheduling import (
    pod_priority,
    preemption_policy,
    scheduling_gate_names,
)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [({"priority": 1000}, 1000), ({"priority": -5}, -5), ({}, 0), ({"priority": None}, 0)],
)
def test_priority_as_admission_set_it_or_zero(spec: dict[str, Any], expected: int) -> None:
    assert pod_priority({"spec": spec}) == expected


def test_gates_in_order() -> None:
    pod = {"spec": {"schedulingGates": [{"name": "kueue.x-k8s.io/admission"}, {"name": "b"}]}}
    assert scheduling_gate_names(pod) == ["kueue.x-k8s.io/admission", "b"]
    assert scheduling_gate_names({"spec": {}}) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "PreemptLowerPriority"),
        ({"preemptionPolicy": "Never"}, "Never"),
        ({"preemptionPolicy": "PreemptLowerPriority"}, "PreemptLowerPriority"),
    ],
)
def test_preemption_policy_defaults_to_preempt_lower_priority(
    spec: dict[str, Any], expected: str
) -> None:
    assert preemption_policy({"spec": spec}) == expected
