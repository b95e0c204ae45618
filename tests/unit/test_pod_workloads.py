"""Pod manifests with HAMi resource names become the engine's requests."""

from __future__ import annotations

import pytest

from dra_driver.engine.requests import MEMORY_PERCENT_UNSET
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.pod_workloads import pod_request

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


def test_percentage_is_validated():
    with pytest.raises(
        InvalidParameterError, match=r"gpumem-percentage: must be between 0 and 100"
    ):
        pod_request(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 120}), VENDORS)


def test_fractional_memory_is_refused_with_the_field_path():
    with pytest.raises(
        InvalidParameterError, match=r"spec.containers\[0\].resources.nvidia.com/gpumem"
    ):
        pod_request(manifest({"nvidia.com/gpu": 1, "nvidia.com/gpumem": "1.5"}), VENDORS)


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
        "hami.io/device-scoring-weights": "slot=2",
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
