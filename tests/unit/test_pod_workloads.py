"""Pod manifests with HAMi resource names become the engine's requests."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dra_driver.engine.requests import MEMORY_PERCENT_UNSET
from dra_driver.engine.vendors import NVIDIA, ResourceNames, VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.pod_workloads import admission_limits, pod_request

VENDORS = VendorRegistry()


def manifest(limits=None, requests=None, annotations=None, init=None):
    container = {"name": "c", "resources": {}}
    if limits is not None:
        container["resources"]["limits"] = limits
    if requests is not None:
        container["resources"]["requests"] = requests
    spec = {"containers": [container]}
    if init is not None:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": init}}]
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", "annotations": annotations or {}},
        "spec": spec,
    }


def only(pod, **kw):
    request = pod_request(pod, VENDORS, **kw)
    ((device_request,),) = request.containers
    return device_request


def test_count_only_takes_whole_memory_and_exclusive_cores():
    request = only(manifest({"nvidia.com/gpu": 1}))
    assert (request.count, request.memory_percent, request.cores) == (1, 100, 100)


def test_count_only_without_admission_defaults_keeps_zero_cores():
    request = only(manifest({"nvidia.com/gpu": 1}), admission_defaults=False)
    assert (request.memory_percent, request.cores) == (100, 0)


def test_memory_without_count_gets_default_count():
    request = only(manifest({"nvidia.com/gpumem": "3000", "nvidia.com/gpucores": "30"}))
    assert (request.count, request.memory_mib, request.cores) == (1, 3000, 30)
    assert request.memory_percent == MEMORY_PERCENT_UNSET


def test_quantities_with_suffix_are_read_as_integers():
    request = only(
        manifest({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3k", "nvidia.com/gpucores": 5})
    )
    assert (request.count, request.memory_mib) == (2, 3000)


def test_limits_win_over_requests():
    pod = manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 100}, {"nvidia.com/gpumem": 999})
    assert only(pod).memory_mib == 100


@pytest.mark.parametrize("percent", [0, -5, "0"])
def test_percentage_zero_or_below_is_unset_and_takes_the_whole_card(percent):
    request = only(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": percent}))
    assert (request.memory_mib, request.memory_percent) == (0, 100)


def test_percentage_zero_or_below_falls_back_to_default_memory():
    vendors = VendorRegistry([replace(NVIDIA, default_memory_mib=2048)])
    pod = manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 0})
    ((request,),) = pod_request(pod, vendors).containers
    assert (request.memory_mib, request.memory_percent) == (2048, MEMORY_PERCENT_UNSET)


@pytest.mark.parametrize("percent", [101, 120, 2**31 + 7, "5Ki"])
def test_percentage_above_100_is_clamped(percent):
    request = only(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": percent}))
    assert request.memory_percent == 100


def test_explicit_gpumem_wins_over_a_zero_percentage():
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 3000, "nvidia.com/gpumem-percentage": 0}
    request = only(manifest(limits))
    assert (request.memory_mib, request.memory_percent) == (3000, MEMORY_PERCENT_UNSET)
    assert request.memory_on(81920) == 3000


@pytest.mark.parametrize("memory", ["16Gi", "1.5", "2147483648", "-1", "500m"])
def test_gpumem_outside_whole_int32_mib_drops_the_request(memory):
    pod = manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": memory})
    request = pod_request(pod, VENDORS)
    assert request.containers == ((),)
    assert not request.has_devices()
    (why,) = request.dropped
    assert why.startswith("spec.containers[0].resources.nvidia.com/gpumem: ")
    assert "not a whole number of MiB within int32" in why


def test_gpumem_int32_limit_applies_after_memory_factor():
    vendors = VendorRegistry([replace(NVIDIA, memory_factor=2)])
    fits = pod_request(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1073741823}), vendors)
    assert fits.containers[0][0].memory_mib == 2147483646
    assert fits.dropped == ()
    over = pod_request(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1073741824}), vendors)
    assert over.containers == ((),)
    assert "memoryFactor 2" in over.dropped[0]


def test_largest_int32_gpumem_is_kept():
    request = only(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "2147483647"}))
    assert request.memory_mib == 2147483647


def test_garbage_quantity_is_refused():
    with pytest.raises(InvalidParameterError, match=r"nvidia\.com/gpu"):
        pod_request(manifest({"nvidia.com/gpu": "lots"}), VENDORS)


def test_annotations_become_filters_and_policies():
    annotations = {
        "nvidia.com/use-gputype": "A100,H100",
        "nvidia.com/nouse-gpuuuid": "GPU-1, GPU-2",
        "nvidia.com/numa-bind": "true",
        "hami.io/gpu-scheduler-policy": "binpack",
        "hami.io/node-scheduler-policy": "spread",
        "hami.io/device-scoring-weights": "slot=2, core=1, memory=1",
    }
    pod = manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10}, annotations=annotations)
    request = pod_request(pod, VENDORS)
    filters = request.containers[0][0].filters
    assert filters.use_types == ("A100", "H100")
    assert filters.no_use_uuids == ("GPU-1", "GPU-2")
    assert filters.numa_bind
    assert (request.gpu_policy, request.node_policy, request.weights.slot) == (
        "binpack",
        "spread",
        2,
    )


def test_init_containers_come_first_and_containers_without_gpus_stay():
    pod = manifest({}, init={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 5})
    request = pod_request(pod, VENDORS)
    assert request.init_containers[0][0].memory_mib == 5
    assert request.containers == ((),)


@pytest.mark.parametrize(
    ("limits", "requests", "cores"),
    [
        ({"nvidia.com/gpu": 1}, {}, 100),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 100}, {}, 100),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 50}, {}, 0),
        ({"nvidia.com/gpu": 1}, {"nvidia.com/gpumem-percentage": 50}, 0),
        ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000}, {}, 0),
        ({"nvidia.com/gpu": 1}, {"nvidia.com/gpucores": 30}, 30),
        ({}, {"nvidia.com/gpu": 1}, 100),
        ({}, {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 100}, 100),
    ],
)
def test_exclusive_cores_only_for_a_whole_card(limits, requests, cores):
    assert only(manifest(limits, requests)).cores == cores


def test_exclusive_cores_when_no_memory_resource_is_configured():
    names = ResourceNames(
        count="nvidia.com/gpu",
        memory="",
        memory_percentage="nvidia.com/gpumem-percentage",
        cores="nvidia.com/gpucores",
    )
    vendors = VendorRegistry([replace(NVIDIA, resources=names)])
    pod = manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 1000})
    ((request,),) = pod_request(pod, vendors).containers
    assert (request.cores, request.memory_mib, request.memory_percent) == (100, 0, 100)


def test_admission_limits_add_count_only_for_limits_without_one():
    assert admission_limits(NVIDIA, {"nvidia.com/gpumem": 1000}, {}) == {"nvidia.com/gpu": "1"}
    assert admission_limits(NVIDIA, {"nvidia.com/gpumem-percentage": 50}, {}) == {
        "nvidia.com/gpu": "1"
    }
    assert admission_limits(NVIDIA, {}, {"nvidia.com/gpumem": 1000}) == {}
    assert admission_limits(NVIDIA, {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 5}, {}) == {}


def test_bad_scoring_weights_fail_the_pod_with_hamis_message():
    pod = manifest(
        {"nvidia.com/gpu": 1},
        annotations={"hami.io/device-scoring-weights": "slot=1,core=-1,memory=3"},
    )
    with pytest.raises(InvalidParameterError) as caught:
        pod_request(pod, VENDORS)
    assert caught.value.reason == (
        'invalid hami.io/device-scoring-weights annotation "slot=1,core=-1,memory=3": '
        '"core" weight must not be negative'
    )
