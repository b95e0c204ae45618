"""resource.k8s.io/v1 through ResourceV1Api: round-trips, validation, set-once allocation."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, ApiException

DRIVER = "gpushare.example.com"


@pytest.fixture
def resource(api: ApiClient) -> client.ResourceV1Api:
    return client.ResourceV1Api(api)


def _slice(node: str, devices: int = 1, **spec: Any) -> client.V1ResourceSlice:
    return client.V1ResourceSlice(
        metadata=client.V1ObjectMeta(generate_name=f"{node}-{DRIVER}-"),
        spec=client.V1ResourceSliceSpec(
            driver=spec.pop("driver", DRIVER),
            node_name=node,
            pool=client.V1ResourcePool(name=node, generation=1, resource_slice_count=1),
            devices=[
                client.V1Device(
                    name=f"gpu-{index}",
                    allow_multiple_allocations=True,
                    attributes={"index": client.V1DeviceAttribute(int=index)},
                    capacity={
                        "memory": client.V1DeviceCapacity(
                            value="80Gi",
                            request_policy=client.V1CapacityRequestPolicy(
                                default="1Gi",
                                valid_range=client.V1CapacityRequestPolicyRange(
                                    min="256Mi", max="80Gi", step="256Mi"
                                ),
                            ),
                        )
                    },
                )
                for index in range(devices)
            ],
            **spec,
        ),
    )


def _claim(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": DRIVER,
                            "capacity": {"requests": {"memory": "10Gi"}},
                        },
                    }
                ]
            }
        },
    }


def _allocation(device: str = "gpu-0", share: str | None = None) -> dict[str, Any]:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "node-a",
        "device": device,
        "shareID": share or str(uuid.uuid4()),
        "consumedCapacity": {"memory": "10Gi"},
    }
    return {
        "devices": {"results": [result]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
            ]
        },
        "allocationTimestamp": "2026-10-01T00:00:00Z",
    }


def _status(error: ApiException) -> dict[str, Any]:
    return json.loads(error.body)


def test_slices_round_trip_and_select_by_field(resource: client.ResourceV1Api) -> None:
    created = resource.create_resource_slice(_slice("rt-node-a", devices=2))
    resource.create_resource_slice(_slice("rt-node-b"))
    resource.create_resource_slice(_slice("rt-node-b", driver="other.example.com"))
    assert created.metadata.name.startswith(f"rt-node-a-{DRIVER}-")
    capacity = created.spec.devices[0].capacity["memory"]
    assert capacity.request_policy.valid_range.step == "256Mi"
    assert created.spec.devices[1].attributes["index"].int == 1
    on_b = resource.list_resource_slice(
        field_selector=f"spec.nodeName=rt-node-b,spec.driver={DRIVER}"
    )
    assert [s.spec.node_name for s in on_b.items] == ["rt-node-b"]
    by_driver = resource.list_resource_slice(field_selector="spec.driver=other.example.com")
    assert "rt-node-b" in [s.spec.node_name for s in by_driver.items]
    assert {s.spec.driver for s in by_driver.items} == {"other.example.com"}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"nodeName": None}, "spec"),
        ({"allNodes": True}, "spec"),
        (
            {"pool": {"name": "p", "generation": 1, "resourceSliceCount": 0}},
            "spec.pool.resourceSliceCount",
        ),
        ({"driver": ""}, "spec.driver"),
        ({"devices": [{"name": "GPU_0"}]}, "spec.devices[0].name"),
        ({"devices": [{"name": f"d{i}"} for i in range(129)]}, "spec.devices"),
        ({"devices": [{"name": "d"}, {"name": "d"}]}, "spec.devices[1]"),
    ],
)
def test_invalid_slices_are_refused(
    resource: client.ResourceV1Api, api: ApiClient, change: dict[str, Any], field: str
) -> None:
    body = api.sanitize_for_serialization(_slice("bad-node"))
    body["spec"].update(change)
    with pytest.raises(ApiException) as error:
        resource.create_resource_slice(body)
    status = _status(error.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert field in [c["field"] for c in status["details"]["causes"]]
    assert status["details"]["kind"] == "ResourceSlice"
    assert status["details"]["group"] == "resource.k8s.io"


def test_slice_driver_is_immutable(resource: client.ResourceV1Api) -> None:
    created = resource.create_resource_slice(_slice("imm-node"))
    with pytest.raises(ApiException) as error:
        resource.patch_resource_slice(
            created.metadata.name, {"spec": {"driver": "other.example.com"}}
        )
    assert "spec.driver" in _status(error.value)["message"]
    bumped = resource.patch_resource_slice(
        created.metadata.name, {"spec": {"pool": {"generation": 2}}}
    )
    assert bumped.spec.pool.generation == 2
    assert bumped.metadata.generation == 2


def test_allocation_is_set_once(resource: client.ResourceV1Api, ns: str) -> None:
    claim = resource.create_namespaced_resource_claim(ns, _claim("once"))
    assert isinstance(claim, client.ResourceV1ResourceClaim)
    assert claim.status.allocation is None and claim.status.reserved_for is None
    first = _allocation()
    allocated = resource.patch_namespaced_resource_claim_status(
        "once", ns, {"status": {"allocation": first}}
    )
    result = allocated.status.allocation.devices.results[0]
    assert (result.device, result.share_id) == ("gpu-0", first["devices"]["results"][0]["shareID"])
    assert result.consumed_capacity == {"memory": "10Gi"}
    with pytest.raises(ApiException) as error:
        resource.patch_namespaced_resource_claim_status(
            "once", ns, {"status": {"allocation": _allocation("gpu-1")}}
        )
    status = _status(error.value)
    assert (status["code"], status["reason"]) == (422, "Invalid")
    assert "status.allocation: Invalid value: {" in status["message"]
    assert status["message"].endswith("field is immutable")
    same = resource.patch_namespaced_resource_claim_status(
        "once", ns, {"status": {"allocation": first}}
    )
    assert same.metadata.resource_version == allocated.metadata.resource_version
    cleared = resource.patch_namespaced_resource_claim_status(
        "once", ns, {"status": {"allocation": None}}
    )
    assert cleared.status.allocation is None
    again = resource.patch_namespaced_resource_claim_status(
        "once", ns, {"status": {"allocation": _allocation("gpu-1")}}
    )
    assert again.status.allocation.devices.results[0].device == "gpu-1"


def test_allocation_results_are_validated(resource: client.ResourceV1Api, ns: str) -> None:
    resource.create_namespaced_resource_claim(ns, _claim("checked"))
    bad = _allocation(share="not-a-uuid")
    del bad["devices"]["results"][0]["pool"]
    with pytest.raises(ApiException) as error:
        resource.patch_namespaced_resource_claim_status(
            "checked", ns, {"status": {"allocation": bad}}
        )
    fields = {c["field"] for c in _status(error.value)["details"]["causes"]}
    assert fields == {
        "status.allocation.devices.results[0].pool",
        "status.allocation.devices.results[0].shareID",
    }
    reservation = {"status": {"reservedFor": [{"resource": "pods", "name": "p", "uid": "u"}]}}
    with pytest.raises(ApiException) as unallocated:
        resource.patch_namespaced_resource_claim_status("checked", ns, reservation)
    assert "status.reservedFor" in _status(unallocated.value)["message"]


def test_claim_spec_is_immutable_and_requests_are_validated(
    resource: client.ResourceV1Api, ns: str
) -> None:
    resource.create_namespaced_resource_claim(ns, _claim("fixed"))
    with pytest.raises(ApiException) as changed:
        resource.patch_namespaced_resource_claim(
            "fixed",
            ns,
            {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "x.example.com"}}
                        ]
                    }
                }
            },
        )
    assert "field is immutable" in _status(changed.value)["message"]
    nameless = _claim("nameless")
    nameless["spec"]["devices"]["requests"][0]["name"] = ""
    with pytest.raises(ApiException) as missing:
        resource.create_namespaced_resource_claim(ns, nameless)
    assert [c["field"] for c in _status(missing.value)["details"]["causes"]] == [
        "spec.devices.requests[0].name"
    ]


def test_status_written_on_create_is_dropped(resource: client.ResourceV1Api, ns: str) -> None:
    body = _claim("pre-status")
    body["status"] = {"allocation": _allocation()}
    created = resource.create_namespaced_resource_claim(ns, body, _preload_content=False)
    assert json.loads(created.data)["status"] == {}


def test_device_classes_and_templates_round_trip(resource: client.ResourceV1Api, ns: str) -> None:
    device_class = resource.create_device_class(
        {
            "metadata": {"name": f"{DRIVER}-{ns}"},
            "spec": {
                "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}],
                "config": [
                    {
                        "opaque": {
                            "driver": DRIVER,
                            "parameters": {"apiVersion": "v1", "kind": "Cfg"},
                        }
                    }
                ],
            },
        }
    )
    assert device_class.spec.config[0].opaque.parameters == {"apiVersion": "v1", "kind": "Cfg"}
    assert f"{DRIVER}-{ns}" in [c.metadata.name for c in resource.list_device_class().items]
    template = resource.create_namespaced_resource_claim_template(
        ns, {"metadata": {"name": "tmpl"}, "spec": {"spec": _claim("x")["spec"]}}
    )
    assert template.spec.spec.devices.requests[0].exactly.device_class_name == DRIVER
