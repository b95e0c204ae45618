"""The controller refuses a capacity request exactly where kube-scheduler would: a device
whose requestPolicy refuses it is never chosen, and the reason names the claim's request,
the capacity, the amount asked and the published policy."""

from __future__ import annotations

from typing import Any

from controller.decide import NoFit, PodAllocation, decide_pod
from controller.inventory import Inventory, build_inventory
from controller.requests import RequestContext, pod_variants
from dra_driver.engine.engine import Engine
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.objects.claim_workloads import DEVICE_CLASSES
from dra_driver.objects.dra_cel import cel_device_from_slice
from dra_driver.objects.dra_cel_cache import SelectorCache
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {}}
CORES_POLICY = "{validRange {min: 0, max: 100, step: 1}; default 0}"


def gpu(node: str, index: int = 0) -> GpuInfo:
    return GpuInfo(
        uuid=f"GPU-{node}-{index}",
        index=index,
        minor=index,
        product_name="NVIDIA A100-SXM4-80GB",
        memory_bytes=80 << 30,
        numa_node=0,
    )


def inventory_of(**nodes: SliceSettings) -> Inventory:
    slices = [
        item
        for name, settings in nodes.items()
        for item in build_resource_slices(name, f"{name}-uid", [gpu(name)], settings, 1)
    ]
    return build_inventory(slices, DRIVER)


def decide(inventory: Inventory, **requested: str) -> PodAllocation | NoFit:
    cache = SelectorCache()
    context = RequestContext(
        driver=DRIVER,
        device_classes=DEVICE_CLASSES,
        classes={CLASS: {"spec": {}}},
        inventory=inventory,
        selector_match=lambda expression, device: cache.matches(
            expression, device.cache_key, cel_device_from_slice(DRIVER, device.spec)
        ),
        vendors=VendorRegistry(),
    )
    claim: dict[str, Any] = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": CLASS,
                            "capacity": {"requests": requested},
                        },
                    }
                ]
            }
        },
    }
    variants = pod_variants(POD, [claim], context)
    return decide_pod(Engine(inventory.nodes.values()), variants, inventory, inventory.nodes, {})


def test_cores_above_the_published_max_are_refused_naming_capacity_request_and_policy() -> None:
    outcome = decide(inventory_of(**{"node-a": SliceSettings()}), cores="101")

    assert isinstance(outcome, NoFit)
    assert outcome.reasons == {"node-a": "CapacityRequestPolicyNotFit"}
    assert (
        "ResourceClaim ns/c (u1) request gpu: capacity cores: request 101 is outside its "
        f"requestPolicy {CORES_POLICY}"
    ) in outcome.message
    assert outcome.message.startswith(
        "no available node, 1 nodes do not meet: 1 nodes CapacityRequestPolicyNotFit(node-a)"
    )


def test_the_largest_valid_request_is_allocated_as_asked() -> None:
    outcome = decide(inventory_of(**{"node-a": SliceSettings()}), cores="100", memory="10Gi")

    assert isinstance(outcome, PodAllocation)
    [[result]] = outcome.results
    assert result.consumed is not None and result.consumed["cores"] == 100
    assert result.consumed["memory"] == 10 << 30


def test_a_fraction_that_rounds_past_the_max_is_refused_like_kube_scheduler() -> None:
    outcome = decide(inventory_of(**{"node-a": SliceSettings()}), cores="100500m")

    assert isinstance(outcome, NoFit)
    assert "request 100500m (rounded up to 101) is outside" in outcome.message


def test_a_device_whose_policy_serves_the_request_is_chosen_over_one_that_refuses() -> None:
    inventory = inventory_of(
        **{"node-a": SliceSettings(), "node-b": SliceSettings(core_scaling=2.0)}
    )

    outcome = decide(inventory, cores="150")

    assert isinstance(outcome, PodAllocation) and outcome.node == "node-b"


def test_a_capacity_the_device_does_not_publish_refuses_it() -> None:
    outcome = decide(inventory_of(**{"node-a": SliceSettings()}), bandwidth="1")

    assert isinstance(outcome, NoFit)
    assert outcome.reasons == {"node-a": "CapacityRequestPolicyNotFit"}
    assert "capacity bandwidth: request 1 names a capacity the device does not publish" in (
        outcome.message
    )
