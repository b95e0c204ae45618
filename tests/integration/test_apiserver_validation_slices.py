"""ResourceSlice validation and rewriting as a real kube-apiserver v1.36 does it (§9)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from api_refusals import refusal, send
from kubernetes import client
from kubernetes.client import ApiClient

DRIVER = "gpushare.example.com"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
TAINT = {"key": f"{DRIVER}/unhealthy", "value": "xid-79", "effect": "NoSchedule"}


@pytest.fixture
def resource(api: ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api)


def _device(index: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "attributes": {"index": {"int": index}},
        "capacity": {
            "memory": {
                "value": "81920Mi",
                "requestPolicy": {
                    "default": "1024Mi",
                    "validRange": {"min": "256Mi", "max": "80Gi", "step": "256Mi"},
                },
            }
        },
        **extra,
    }


def _slice(name: str, devices: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def _policy(device: dict[str, Any]) -> dict[str, Any]:
    policy: dict[str, Any] = device["capacity"]["memory"]["requestPolicy"]
    return policy


def _without_policy_multiple(device: dict[str, Any]) -> None:
    device["allowMultipleAllocations"] = False


def _no_min(device: dict[str, Any]) -> None:
    del _policy(device)["validRange"]["min"]


def _min_above_max(device: dict[str, Any]) -> None:
    _policy(device)["validRange"].update({"min": "40Gi", "max": "20Gi", "step": "20Gi"})
    _policy(device)["default"] = "40Gi"


def _two_policies(device: dict[str, Any]) -> None:
    _policy(device)["validValues"] = ["1Gi", "2Gi"]


def _default_outside(device: dict[str, Any]) -> None:
    _policy(device)["default"] = "128Mi"


def _default_off_step(device: dict[str, Any]) -> None:
    _policy(device)["default"] = "300Mi"


def _default_not_a_value(device: dict[str, Any]) -> None:
    del _policy(device)["validRange"]
    _policy(device)["validValues"] = ["1Gi", "2Gi"]
    _policy(device)["default"] = "3Gi"


def _many_attributes(device: dict[str, Any]) -> None:
    device["attributes"] = {f"a{i}": {"int": i} for i in range(32)}


def _many_taints(device: dict[str, Any]) -> None:
    device["taints"] = [{**TAINT, "key": f"{DRIVER}/t{i}"} for i in range(17)]


def _bad_effect(device: dict[str, Any]) -> None:
    device["taints"] = [{**TAINT, "effect": "Foo"}]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            _without_policy_multiple,
            "spec.devices[0].capacity[memory].requestPolicy",
            "Forbidden: allowMultipleAllocations must be true",
        ),
        (
            _no_min,
            "spec.devices[0].capacity[memory].requestPolicy.validRange.min",
            "Required value: required when validRange is defined",
        ),
        (
            _min_above_max,
            "spec.devices[0].capacity[memory].requestPolicy.validRange",
            "min is larger than max",
        ),
        (
            _two_policies,
            "spec.devices[0].capacity[memory].requestPolicy",
            "exactly one policy can be specified",
        ),
        (
            _default_outside,
            "spec.devices[0].capacity[memory].requestPolicy.default",
            "default value is not valid according to the requestPolicy",
        ),
        (
            _default_off_step,
            "spec.devices[0].capacity[memory].requestPolicy.default",
            "value is not a multiple of a given step (256Mi) from (256Mi)",
        ),
        (
            _default_not_a_value,
            "spec.devices[0].capacity[memory].requestPolicy.default",
            "default value is not valid according to the requestPolicy",
        ),
        (
            _many_attributes,
            "spec.devices[0]",
            "Invalid value: 33: the total number of attributes and capacities must not exceed 32",
        ),
        (_many_taints, "spec.devices[0].taints", "Too many: 17: must have at most 16 items"),
        (
            _bad_effect,
            "spec.devices[0].taints[0].effect",
            'Unsupported value: "Foo": supported values: "NoExecute", "NoSchedule", "None"',
        ),
    ],
)
def test_device_rules_are_refused_with_the_real_messages(
    api: ApiClient, change: Any, field: str, message: str
) -> None:
    device = _device(0)
    change(device)
    code, status = send(api, "POST", SLICES, _slice("bad-device", [device]))
    assert code == 422 and status["reason"] == "Invalid"
    assert f"{field}: " in status["message"] and message in status["message"]
    assert field in [cause["field"] for cause in status["details"]["causes"]]


def test_a_tainted_slice_holds_at_most_64_devices(resource: client.ResourceV1Api) -> None:
    untainted = [_device(i) for i in range(128)]
    resource.create_resource_slice(_slice("wide", untainted))
    tainted = copy.deepcopy(untainted)
    tainted[5]["taints"] = [TAINT]
    status = refusal(resource.create_resource_slice, _slice("wide-tainted", tainted))
    assert status["code"] == 422
    assert "spec.devices: Too many: 128: must have at most 64 items" in status["message"]


def test_a_duplicate_device_names_the_device_entry(resource: client.ResourceV1Api) -> None:
    status = refusal(resource.create_resource_slice, _slice("twice", [_device(0), _device(0)]))
    assert status["code"] == 422
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.devices[1]"]


@pytest.mark.parametrize("where", ["value", "default"])
def test_a_capacity_that_is_not_a_quantity_is_a_bad_request(
    resource: client.ResourceV1Api, where: str
) -> None:
    device = _device(0)
    if where == "value":
        device["capacity"]["memory"]["value"] = "eighty gigs"
    else:
        _policy(device)["default"] = "1 Gi"
    status = refusal(resource.create_resource_slice, _slice(f"bad-{where}", [device]))
    assert status["code"] == 400 and status["reason"] == "BadRequest"
    assert "quantities must match the regular expression" in status["message"]
    names = [s.metadata.name for s in resource.list_resource_slice().items]
    assert f"bad-{where}" not in names


def test_quantities_are_stored_canonically_and_taints_get_time_added(
    resource: client.ResourceV1Api,
) -> None:
    tainted = _device(1, taints=[dict(TAINT)])
    created = resource.create_resource_slice(
        _slice("canonical", [_device(0), tainted]), _preload_content=False
    )
    stored = json.loads(created.data)
    devices = stored["spec"]["devices"]
    memory = devices[0]["capacity"]["memory"]
    assert memory["value"] == "80Gi"
    assert memory["requestPolicy"]["default"] == "1Gi"
    stamp = devices[1]["taints"][0]["timeAdded"]
    assert stamp.endswith("Z") and "." not in stamp

    again = copy.deepcopy(stored)
    del again["spec"]["devices"][1]["taints"][0]["timeAdded"]
    again["spec"]["devices"][0]["capacity"]["memory"]["value"] = "81920Mi"
    replaced = json.loads(
        resource.replace_resource_slice("canonical", again, _preload_content=False).data
    )
    assert replaced["spec"]["devices"][1]["taints"][0]["timeAdded"] == stamp
    assert replaced["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.update(taints="NoSchedule"), "spec.devices[0].taints"),
        (lambda d: _policy(d).update(validValues="1Gi"), "requestPolicy.validValues"),
        (lambda d: d["capacity"].update(memory="80Gi"), "spec.devices[0].capacity[memory]"),
    ],
)
def test_a_field_of_the_wrong_type_is_a_bad_request(
    api: ApiClient, change: Any, field: str
) -> None:
    device = _device(0)
    change(device)
    code, status = send(api, "POST", SLICES, _slice("wrong-type", [device]))
    assert code == 400 and field in status["message"]
    assert "cannot be handled as a ResourceSlice" in status["message"]
