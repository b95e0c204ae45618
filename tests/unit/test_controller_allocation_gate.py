"""The allocation gate's rules: which pods admission gates, which gates keep the
controller off a pod, and when the controller may remove its own gate."""

from __future__ import annotations

from typing import Any

import pytest

from controller.allocation_gate import (
    ALLOCATION_GATE,
    blocking_gates,
    gate_patch,
    gate_removal,
    names_class,
    needs_gate,
)
from controller.object_state import is_pending
from simulator.apiserver.patch import PatchError, json_patch

OURS = frozenset({"nvidia.vgpu.hami.io"})
KUEUE = "kueue.x-k8s.io/admission"


def spec_of(device_class: str, *, first_available: bool = False) -> dict[str, Any]:
    if first_available:
        request = {
            "name": "gpu",
            "firstAvailable": [{"name": "a", "deviceClassName": device_class}],
        }
    else:
        request = {"name": "gpu", "exactly": {"deviceClassName": device_class}}
    return {"devices": {"requests": [request]}}


def pod(*gates: str, node: str = "", deleting: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if node:
        spec["nodeName"] = node
    metadata: dict[str, Any] = {"name": "p", "namespace": "ns", "uid": "pod-uid"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": metadata, "spec": spec}


def claim(
    device_class: str = "nvidia.vgpu.hami.io", *, allocated: bool = True, reserved: str = "pod-uid"
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if allocated:
        status["allocation"] = {"devices": {"results": []}}
    if reserved:
        status["reservedFor"] = [{"resource": "pods", "name": "p", "uid": reserved}]
    return {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": spec_of(device_class),
        "status": status,
    }


@pytest.mark.parametrize("first_available", [False, True])
def test_a_claim_spec_names_our_class_directly_or_among_its_alternatives(
    first_available: bool,
) -> None:
    assert names_class(spec_of("nvidia.vgpu.hami.io", first_available=first_available), OURS)
    assert not names_class(spec_of("gpu.example.com", first_available=first_available), OURS)
    assert not names_class({}, OURS)


def test_admission_gates_a_pod_one_of_whose_claims_or_templates_is_of_our_class() -> None:
    assert needs_gate(pod(), [spec_of("gpu.example.com"), spec_of("nvidia.vgpu.hami.io")], OURS)
    assert needs_gate(pod(KUEUE), [spec_of("nvidia.vgpu.hami.io")], OURS)


@pytest.mark.parametrize(
    ("the_pod", "specs"),
    [
        (pod(), [spec_of("gpu.example.com")]),
        (pod(), []),
        (pod(), [None]),
        (pod(ALLOCATION_GATE), [spec_of("nvidia.vgpu.hami.io")]),
        (pod(node="node-1"), [spec_of("nvidia.vgpu.hami.io")]),
    ],
    ids=["other class", "no claims", "template missing", "gated already", "bound"],
)
def test_admission_leaves_other_pods_ungated(
    the_pod: dict[str, Any], specs: list[dict[str, Any] | None]
) -> None:
    assert not needs_gate(the_pod, specs, OURS)


@pytest.mark.parametrize("gates", [(), (KUEUE,)])
def test_the_admission_patch_adds_our_gate_after_the_pods_own(gates: tuple[str, ...]) -> None:
    patched = json_patch(pod(*gates), gate_patch(pod(*gates)))
    assert [g["name"] for g in patched["spec"]["schedulingGates"]] == [*gates, ALLOCATION_GATE]


def test_only_gates_other_than_ours_keep_the_controller_off_a_pod() -> None:
    assert blocking_gates(pod(ALLOCATION_GATE)) == []
    assert blocking_gates(pod(KUEUE, ALLOCATION_GATE)) == [KUEUE]
    assert is_pending(pod(ALLOCATION_GATE))
    assert not is_pending(pod(KUEUE, ALLOCATION_GATE))
    assert not is_pending(pod(KUEUE))


def test_the_controller_removes_its_gate_once_our_claims_are_allocated_and_reserved() -> None:
    the_pod = pod(ALLOCATION_GATE)
    patch = gate_removal(the_pod, [claim(), claim("gpu.example.com", allocated=False)], OURS)
    assert patch == [
        {"op": "test", "path": "/spec/schedulingGates/0", "value": {"name": ALLOCATION_GATE}},
        {"op": "remove", "path": "/spec/schedulingGates/0"},
    ]
    assert json_patch(the_pod, patch)["spec"]["schedulingGates"] == []


@pytest.mark.parametrize(
    ("the_pod", "claims"),
    [
        (pod(KUEUE, ALLOCATION_GATE), [claim()]),
        (pod(ALLOCATION_GATE, KUEUE), [claim()]),
        (pod(KUEUE), [claim()]),
        (pod(), [claim()]),
        (pod(ALLOCATION_GATE), [claim(allocated=False, reserved="")]),
        (pod(ALLOCATION_GATE), [claim(reserved="")]),
        (pod(ALLOCATION_GATE), [claim(reserved="another-pod")]),
        (pod(ALLOCATION_GATE), [claim(), None]),
        (pod(ALLOCATION_GATE, deleting=True), [claim()]),
    ],
    ids=[
        "kueue's gate first",
        "kueue's gate after ours",
        "only kueue's gate",
        "no gate",
        "unallocated",
        "allocated, not reserved",
        "reserved for another pod",
        "a claim not made yet",
        "being deleted",
    ],
)
def test_the_controller_keeps_its_gate_otherwise(
    the_pod: dict[str, Any], claims: list[dict[str, Any] | None]
) -> None:
    assert gate_removal(the_pod, claims, OURS) is None


def test_the_removal_patch_fails_rather_than_remove_a_gate_added_in_its_place() -> None:
    patch = gate_removal(pod(ALLOCATION_GATE), [claim()], OURS)
    assert patch is not None
    with pytest.raises(PatchError, match="test failed"):
        json_patch(pod(KUEUE), patch)
