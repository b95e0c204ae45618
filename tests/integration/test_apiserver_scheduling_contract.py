"""The scheduling contract a real kube-apiserver v1.36 keeps (reference §10): PriorityClass
and the Priority admission plugin, the scheduling gate rules, and the status fields a
preempting allocator writes (nominatedNodeName, the DisruptionTarget condition)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from api_refusals import refusal, send
from kubernetes import client
from kubernetes.client import ApiClient

MERGE = "application/merge-patch+json"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


@pytest.fixture
def core(api: ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def scheduling(api: ApiClient) -> client.SchedulingV1Api:
    return client.SchedulingV1Api(api)


@pytest.fixture
def priority_class(scheduling: client.SchedulingV1Api) -> Iterator[str]:
    """A user class of value 1000 that never preempts, removed after the test."""
    name = "batch-never"
    body = {"metadata": {"name": name}, "value": 1000, "preemptionPolicy": "Never"}
    scheduling.create_priority_class(body)
    yield name
    scheduling.delete_priority_class(name)


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def _create(core: client.CoreV1Api, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    response = core.create_namespaced_pod(ns, body, _preload_content=False)
    created: dict[str, Any] = json.loads(response.data)
    return created


# ---- PriorityClass -----------------------------------------------------------------


def test_the_two_system_classes_are_always_there(scheduling: client.SchedulingV1Api) -> None:
    classes = {c.metadata.name: c for c in scheduling.list_priority_class().items}
    assert classes["system-cluster-critical"].value == 2000000000
    assert classes["system-node-critical"].value == 2000001000
    assert classes["system-node-critical"].preemption_policy == "PreemptLowerPriority"
    assert not classes["system-node-critical"].global_default


def test_priority_classes_are_discoverable(api: ApiClient) -> None:
    code, resources = send(api, "GET", "/apis/scheduling.k8s.io/v1")
    assert code == 200
    entry = next(r for r in resources["resources"] if r["name"] == "priorityclasses")
    assert (entry["kind"], entry["namespaced"], entry["shortNames"]) == (
        "PriorityClass",
        False,
        ["pc"],
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"metadata": {"name": "too-high"}, "value": 1000000001},
            'PriorityClass.scheduling.k8s.io "too-high" is invalid: value: Forbidden: '
            "maximum allowed value of a user defined priority is 1000000000",
        ),
        (
            {"metadata": {"name": "system-mine"}, "value": 5},
            'PriorityClass.scheduling.k8s.io "system-mine" is invalid: metadata.name: Forbidden: '
            "priority class names with 'system-' prefix are reserved for system use only. "
            "error: system-mine is not a known system priority class",
        ),
        (
            {"metadata": {"name": "odd"}, "value": 5, "preemptionPolicy": "Sometimes"},
            'PriorityClass.scheduling.k8s.io "odd" is invalid: preemptionPolicy: Unsupported '
            'value: "Sometimes": supported values: "Never", "PreemptLowerPriority"',
        ),
    ],
)
def test_a_bad_priority_class_is_refused(
    scheduling: client.SchedulingV1Api, body: dict[str, Any], message: str
) -> None:
    status = refusal(scheduling.create_priority_class, body)
    assert (status["code"], status["message"]) == (422, message)


def test_a_priority_class_value_is_immutable(
    scheduling: client.SchedulingV1Api, priority_class: str
) -> None:
    status = refusal(scheduling.patch_priority_class, priority_class, {"value": 7})
    assert status["message"] == (
        f'PriorityClass.scheduling.k8s.io "{priority_class}" is invalid: '
        "value: Forbidden: may not be changed in an update."
    )


def test_a_class_defaults_to_preempt_lower_priority(scheduling: client.SchedulingV1Api) -> None:
    created = scheduling.create_priority_class({"metadata": {"name": "plain"}, "value": 3})
    try:
        assert created.preemption_policy == "PreemptLowerPriority"
    finally:
        scheduling.delete_priority_class("plain")


# ---- the Priority admission plugin -----------------------------------------------------


def test_a_class_name_resolves_to_priority_and_policy(
    core: client.CoreV1Api, ns: str, priority_class: str
) -> None:
    spec = _create(core, ns, _pod("batch", priorityClassName=priority_class))["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (1000, "Never")


def test_a_system_class_resolves_too(core: client.CoreV1Api, ns: str) -> None:
    spec = _create(core, ns, _pod("crit", priorityClassName="system-node-critical"))["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (2000001000, "PreemptLowerPriority")


def test_no_class_and_no_default_is_priority_zero(core: client.CoreV1Api, ns: str) -> None:
    spec = _create(core, ns, _pod("plain"))["spec"]
    assert (spec["priority"], spec["preemptionPolicy"]) == (0, "PreemptLowerPriority")
    assert "priorityClassName" not in spec


def test_the_global_default_class_applies_to_a_pod_naming_none(
    core: client.CoreV1Api, scheduling: client.SchedulingV1Api, ns: str
) -> None:
    body = {"metadata": {"name": "everyone"}, "value": 42, "globalDefault": True}
    scheduling.create_priority_class(body)
    try:
        second = {"metadata": {"name": "another"}, "value": 43, "globalDefault": True}
        status = refusal(scheduling.create_priority_class, second)
        assert (status["code"], status["message"]) == (
            403,
            'priorityclasses.scheduling.k8s.io "another" is forbidden: '
            "PriorityClass everyone is already marked as default. Only one default can exist",
        )
        spec = _create(core, ns, _pod("defaulted"))["spec"]
        assert (spec["priorityClassName"], spec["priority"]) == ("everyone", 42)
    finally:
        scheduling.delete_priority_class("everyone")


def test_a_missing_class_refuses_the_pod(core: client.CoreV1Api, ns: str) -> None:
    status = refusal(core.create_namespaced_pod, ns, _pod("lost", priorityClassName="nope"))
    assert (status["code"], status["reason"], status["message"]) == (
        403,
        "Forbidden",
        'pods "lost" is forbidden: no PriorityClass with name nope was found',
    )


def test_a_priority_disagreeing_with_the_class_refuses_the_pod(
    core: client.CoreV1Api, ns: str, priority_class: str
) -> None:
    body = _pod("cheat", priorityClassName=priority_class, priority=999999)
    status = refusal(core.create_namespaced_pod, ns, body)
    assert (status["code"], status["message"]) == (
        403,
        'pods "cheat" is forbidden: the integer value of priority (999999) must not be '
        "provided in pod spec; priority admission controller computed 1000 from the given "
        "PriorityClass name",
    )
    agreeing = _pod("honest", priorityClassName=priority_class, priority=1000)
    assert _create(core, ns, agreeing)["spec"]["priority"] == 1000


def test_a_preemption_policy_disagreeing_with_the_class_refuses_the_pod(
    core: client.CoreV1Api, ns: str, priority_class: str
) -> None:
    body = _pod("pushy", priorityClassName=priority_class, preemptionPolicy="PreemptLowerPriority")
    status = refusal(core.create_namespaced_pod, ns, body)
    assert status["message"] == (
        'pods "pushy" is forbidden: the string value of PreemptionPolicy (PreemptLowerPriority) '
        "must not be provided in pod spec; priority admission controller computed Never from "
        "the given PriorityClass name"
    )


# ---- scheduling gates ----------------------------------------------------------------------


def _gated(name: str, *gates: str, **spec: Any) -> dict[str, Any]:
    return _pod(name, schedulingGates=[{"name": g} for g in gates], **spec)


def test_a_gated_pod_is_created_scheduling_gated(core: client.CoreV1Api, ns: str) -> None:
    status = _create(core, ns, _gated("held", "example.com/quota"))["status"]
    assert status["conditions"] == [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "SchedulingGated",
            "message": GATED_MESSAGE,
            "lastProbeTime": None,
            "lastTransitionTime": None,
        }
    ]


def test_an_ungated_pod_has_no_condition_yet(core: client.CoreV1Api, ns: str) -> None:
    assert "conditions" not in _create(core, ns, _pod("free"))["status"]


def test_a_gate_cannot_be_added(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _gated("held", "example.com/quota"))
    patch = {"spec": {"schedulingGates": [{"name": "example.com/quota"}, {"name": "x.io/more"}]}}
    status = refusal(core.patch_namespaced_pod, "held", ns, patch)
    assert (status["code"], status["message"]) == (
        422,
        'Pod "held" is invalid: spec.schedulingGates[1].name: Forbidden: '
        "only deletion is allowed, but found new scheduling gate 'x.io/more'",
    )
    _create(core, ns, _pod("open"))
    late = {"spec": {"schedulingGates": [{"name": "x.io/late"}]}}
    status = refusal(core.patch_namespaced_pod, "open", ns, late)
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueForbidden",
            "message": "Forbidden: only deletion is allowed, but found new scheduling gate "
            "'x.io/late'",
            "field": "spec.schedulingGates[0].name",
        }
    ]


def test_gates_can_be_removed_one_by_one(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _gated("held", "a.io/first", "b.io/second"))
    core.patch_namespaced_pod("held", ns, {"spec": {"schedulingGates": [{"name": "b.io/second"}]}})
    code, pod = send(
        core.api_client,
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/held",
        {"spec": {"schedulingGates": None}},
        MERGE,
    )
    assert code == 200
    assert "schedulingGates" not in pod["spec"]


def test_node_name_cannot_be_set_on_a_gated_pod(core: client.CoreV1Api, ns: str) -> None:
    body = _gated("pinned", "a.io/gate", nodeName="node-1")
    status = refusal(core.create_namespaced_pod, ns, body)
    assert status["message"] == (
        'Pod "pinned" is invalid: spec.nodeName: Forbidden: '
        "cannot be set until all schedulingGates have been cleared"
    )


def test_a_gated_pod_cannot_be_bound(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _gated("held", "a.io/gate"))
    binding = {"metadata": {"name": "held"}, "target": {"kind": "Node", "name": "node-1"}}
    code, status = send(
        core.api_client, "POST", f"/api/v1/namespaces/{ns}/pods/held/binding", binding
    )
    assert (code, status["reason"], status["message"]) == (
        409,
        "Conflict",
        'Operation cannot be fulfilled on pods/binding "held": '
        "pod held has non-empty .spec.schedulingGates",
    )
    core.patch_namespaced_pod("held", ns, {"spec": {"schedulingGates": []}})
    code, _ = send(core.api_client, "POST", f"/api/v1/namespaces/{ns}/pods/held/binding", binding)
    assert code == 201
    assert core.read_namespaced_pod("held", ns).spec.node_name == "node-1"


def _required_terms(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": list(t)} for t in terms]
            }
        }
    }


ZONE = {"key": "zone", "operator": "In", "values": ["a"]}
FLAVOUR = {"key": "flavour", "operator": "In", "values": ["h100"]}


def test_a_gated_pod_may_gain_node_selector_and_affinity(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _gated("held", "kueue.x-k8s.io/admission", nodeSelector={"zone": "a"}))
    placed = {
        "spec": {
            "nodeSelector": {"zone": "a", "flavour": "h100"},
            "affinity": _required_terms([ZONE]),
        }
    }
    core.patch_namespaced_pod("held", ns, placed)
    narrowed = {"spec": {"affinity": _required_terms([ZONE, FLAVOUR])}}
    pod = core.patch_namespaced_pod("held", ns, narrowed)
    assert pod.spec.node_selector == {"zone": "a", "flavour": "h100"}
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    assert [e.key for e in terms.node_selector_terms[0].match_expressions] == ["zone", "flavour"]


def test_a_gated_pod_may_not_change_or_drop_a_selector(core: client.CoreV1Api, ns: str) -> None:
    _create(
        core,
        ns,
        _gated("held", "a.io/gate", nodeSelector={"zone": "a"}, affinity=_required_terms([ZONE])),
    )
    changed = {"spec": {"nodeSelector": {"zone": "b"}}}
    status = refusal(core.patch_namespaced_pod, "held", ns, changed)
    cause = status["details"]["causes"][0]
    assert (cause["field"], cause["reason"]) == ("spec.nodeSelector", "FieldValueInvalid")
    assert cause["message"].endswith(
        "only additions to spec.nodeSelector are allowed (no mutations or deletions)"
    )
    two_terms = {"spec": {"affinity": _required_terms([ZONE], [FLAVOUR])}}
    status = refusal(core.patch_namespaced_pod, "held", ns, two_terms)
    cause = status["details"]["causes"][0]
    assert cause["field"] == (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
    )
    assert cause["message"].endswith(
        "no additions/deletions to non-empty NodeSelectorTerms list are allowed"
    )
    swapped = {"spec": {"affinity": _required_terms([FLAVOUR])}}
    status = refusal(core.patch_namespaced_pod, "held", ns, swapped)
    cause = status["details"]["causes"][0]
    assert cause["field"].endswith("nodeSelectorTerms[0]")
    assert cause["message"].endswith("only additions are allowed (no mutations or deletions)")


def test_an_ungated_pod_may_not_gain_a_node_selector(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _pod("free"))
    status = refusal(core.patch_namespaced_pod, "free", ns, {"spec": {"nodeSelector": {"z": "a"}}})
    assert status["message"].startswith(
        'Pod "free" is invalid: spec: Forbidden: pod updates may not change fields other than'
    )


# ---- what a preempting allocator writes -------------------------------------------------------


def test_a_status_patch_writes_nomination_and_disruption_target(
    core: client.CoreV1Api, ns: str
) -> None:
    _create(core, ns, _pod("preemptor"))
    _create(core, ns, _pod("victim"))
    core.patch_namespaced_pod_status("preemptor", ns, {"status": {"nominatedNodeName": "node-1"}})
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "default-scheduler: preempting to accommodate a higher priority pod",
    }
    core.patch_namespaced_pod_status("victim", ns, {"status": {"conditions": [condition]}})
    assert core.read_namespaced_pod("preemptor", ns).status.nominated_node_name == "node-1"
    kept = core.read_namespaced_pod("victim", ns).status.conditions
    assert [(c.type, c.status, c.reason, c.message) for c in kept] == [
        (condition["type"], condition["status"], condition["reason"], condition["message"])
    ]


def test_a_bad_nominated_node_name_is_refused(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _pod("preemptor"))
    status = refusal(
        core.patch_namespaced_pod_status, "preemptor", ns, {"status": {"nominatedNodeName": "A_B"}}
    )
    assert status["details"]["causes"][0]["field"] == "status.nominatedNodeName"


def test_binding_clears_the_nomination(core: client.CoreV1Api, ns: str) -> None:
    _create(core, ns, _pod("preemptor"))
    core.patch_namespaced_pod_status("preemptor", ns, {"status": {"nominatedNodeName": "node-1"}})
    binding = {"metadata": {"name": "preemptor"}, "target": {"kind": "Node", "name": "node-1"}}
    send(core.api_client, "POST", f"/api/v1/namespaces/{ns}/pods/preemptor/binding", binding)
    assert core.read_namespaced_pod("preemptor", ns).status.nominated_node_name is None
