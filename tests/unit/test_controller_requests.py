"""A pod's claims -> engine request variants: firstAvailable, CEL selectors as uuid filters,
matchAttribute groups, pod annotations, and errors that name the claim and the field."""

from __future__ import annotations

from typing import Any

import pytest

from controller.inventory import Inventory, PublishedDevice
from controller.requests import NO_DEVICE, RequestContext, pod_variants
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.claim_workloads import DEVICE_CLASSES
from dra_driver.objects.dra_cel import cel_device_from_slice
from dra_driver.objects.dra_cel_cache import SelectorCache

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"


def published(index: int, numa: int, memory: str) -> PublishedDevice:
    spec = {
        "name": f"gpu-{index}",
        "allowMultipleAllocations": True,
        "attributes": {"uuid": {"string": f"GPU-{index}"}, "numa": {"int": numa}},
        "capacity": {"memory": {"value": memory}},
    }
    return PublishedDevice(DRIVER, "node-a", "node-a", spec, "slice", 1, f"GPU-{index}")


def context(classes: dict[str, Any] | None = None) -> RequestContext:
    devices = [published(0, 0, "40Gi"), published(1, 1, "80Gi"), published(2, 1, "80Gi")]
    inventory = Inventory(
        by_key={d.key: d for d in devices}, by_node_uuid={(d.node, d.uuid): d for d in devices}
    )
    cache = SelectorCache()
    return RequestContext(
        driver=DRIVER,
        device_classes=DEVICE_CLASSES,
        classes=classes or {CLASS: {"spec": {}}},
        inventory=inventory,
        selector_match=lambda expression, device: cache.matches(
            expression, device.cache_key, cel_device_from_slice(DRIVER, device.spec)
        ),
        vendors=VendorRegistry(),
    )


def claim(*requests: dict[str, Any], **devices: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": {"devices": {"requests": list(requests), **devices}},
    }


POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}


def test_first_available_yields_each_subrequest_in_order() -> None:
    subrequests = [
        {"name": "big", "deviceClassName": CLASS, "capacity": {"requests": {"memory": "60Gi"}}},
        {"name": "small", "deviceClassName": CLASS, "count": 2},
    ]
    variants = pod_variants(POD, [claim({"name": "gpu", "firstAvailable": subrequests})], context())
    assert [v.claims[0].result_names for v in variants] == [("gpu/big",), ("gpu/small",)]
    assert variants[0].request.containers[0][0].memory_mib == 60 * 1024
    assert variants[1].request.containers[0][0].count == 2


def test_selectors_become_a_uuid_filter_and_match_nothing_explicitly() -> None:
    big = {
        "cel": {
            "expression": "device.capacity['vgpu.hami.io'].memory.compareTo(quantity('64Gi')) > 0"
        }
    }
    none = {"cel": {"expression": "device.attributes['vgpu.hami.io'].numa == 7"}}
    variants = pod_variants(
        POD,
        [
            claim(
                {"name": "a", "exactly": {"deviceClassName": CLASS, "selectors": [big]}},
                {"name": "b", "exactly": {"deviceClassName": CLASS, "selectors": [none]}},
            )
        ],
        context(),
    )
    [variant] = variants
    first, second = (container[0] for container in variant.request.containers)
    assert first.filters.use_uuids == ("GPU-1", "GPU-2")
    assert second.filters.use_uuids == (NO_DEVICE,)


def test_match_attribute_tries_one_group_per_value() -> None:
    requests = [
        {"name": "a", "exactly": {"deviceClassName": CLASS}},
        {"name": "b", "exactly": {"deviceClassName": CLASS}},
    ]
    constraint = {"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/numa"}
    variants = pod_variants(POD, [claim(*requests, constraints=[constraint])], context())
    groups = [
        [container[0].filters.use_uuids for container in v.request.containers] for v in variants
    ]
    assert groups == [[("GPU-0",), ("GPU-0",)], [("GPU-1", "GPU-2"), ("GPU-1", "GPU-2")]]


def test_pod_annotations_set_policies_and_weights() -> None:
    pod = {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "annotations": {
                "hami.io/gpu-scheduler-policy": "binpack",
                "hami.io/node-scheduler-policy": "spread",
                "hami.io/device-scoring-weights": "slot=1,core=2,memory=0",
            },
        }
    }
    [variant] = pod_variants(
        pod, [claim({"name": "g", "exactly": {"deviceClassName": CLASS}})], context()
    )
    request = variant.request
    assert (request.gpu_policy, request.node_policy) == ("binpack", "spread")
    assert (request.weights.slot, request.weights.core, request.weights.memory) == (1, 2, 0)


def test_a_bad_request_names_the_claim_and_the_field() -> None:
    bad = claim({"name": "g", "exactly": {"deviceClassName": "elsewhere.example.com"}})
    with pytest.raises(InvalidParameterError) as caught:
        pod_variants(POD, [bad], context())
    assert caught.value.field.startswith("ResourceClaim ns/c (u1) spec.devices.requests[0]")
    assert "elsewhere.example.com" in caught.value.reason


def opt_out_switch() -> dict[str, Any]:
    parameters = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}
    return {"opaque": {"driver": DRIVER, "parameters": {**parameters, "allowClaimOptOut": True}}}


def test_allow_claim_opt_out_is_accepted_from_the_class_and_refused_from_the_claim() -> None:
    """The controller reports at allocation time what the kubelet plugin would refuse
    at prepare: a claim setting the class-only switch."""
    gpu = {"name": "g", "exactly": {"deviceClassName": CLASS}}
    classes = {CLASS: {"spec": {"config": [opt_out_switch()]}}}
    assert list(pod_variants(POD, [claim(gpu)], context(classes)))
    with pytest.raises(InvalidParameterError) as caught:
        pod_variants(POD, [claim(gpu, config=[opt_out_switch()])], context())
    assert caught.value.field == "ResourceClaim ns/c (u1) spec.devices.config[0].opaque.parameters"
    assert caught.value.reason == (
        "allowClaimOptOut: only a DeviceClass's config may set it, not a claim's"
    )
