"""Which pod and container an Allocate call serves, decided from plain objects."""

from __future__ import annotations

from typing import Any

import pytest

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    ContainerDevice,
)
from api.quantity import MIB
from kubeletplugin.deviceplugin.allocation import (
    AllocateError,
    PodRef,
    lock_holder,
    next_container,
    require_bound,
    share_set,
)
from kubeletplugin.gpus import GpuInfo
from libvgpu.cache_paths import CacheLocation
from libvgpu.container_edits import CorePolicy

NODE = "n1"
UID = "6f1c3d0e-8a4b-4c2d-9e7f-0a1b2c3d4e5f"
CACHE = CacheLocation("/host/containers/x_main", "/usr/local/vgpu", "f.cache")


def node(lock: str | None) -> dict[str, Any]:
    annotations = {NODE_LOCK: lock} if lock is not None else {}
    return {"metadata": {"name": NODE, "annotations": annotations}}


def pod(to_allocate: str, *, phase: str = "allocating", where: str = NODE, env=()) -> dict:
    """As /bind leaves it: the allocated list is the list to allocate."""
    return {
        "metadata": {
            "namespace": "ns",
            "name": "p",
            "uid": UID,
            "annotations": {
                VGPU_NODE: where,
                BIND_PHASE: phase,
                VGPU_DEVICES_TO_ALLOCATE: to_allocate,
                VGPU_DEVICES_ALLOCATED: to_allocate,
            },
        },
        "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "a", "env": [{"name": k, "value": v} for k, v in env]},
                {"name": "b", "env": [{"name": "FROM_SECRET", "valueFrom": {}}]},
            ],
        },
    }


def test_the_lock_names_the_pod() -> None:
    assert lock_holder(node("2026-11-30T08:00:00Z,ns,p")) == PodRef("ns", "p")


@pytest.mark.parametrize(
    ("lock", "message"),
    [
        (None, "node n1 has no hami.io/mutex.lock"),
        ("", "node n1 has no hami.io/mutex.lock"),
        ("2026-11-30T08:00:00Z", "names no pod (old bare-time format)"),
        ("soon,ns", "node n1: unreadable lock 'soon,ns'"),
    ],
)
def test_no_servable_lock_is_an_error_naming_the_node(lock: str | None, message: str) -> None:
    with pytest.raises(AllocateError) as raised:
        lock_holder(node(lock))
    assert message in str(raised.value)


def test_containers_are_popped_in_order_init_first() -> None:
    value = "GPU-a,NVIDIA,100,0:;;GPU-b,NVIDIA,200,10:GPU-a,NVIDIA,50,0:;"
    first = next_container(pod(value), NODE, 1)
    assert (first.container, first.remaining, first.finished) == (
        "init",
        ";;GPU-b,NVIDIA,200,10:GPU-a,NVIDIA,50,0:;",
        False,
    )
    second = next_container(pod(first.remaining), NODE, 2)
    assert second.container == "b"
    assert second.devices == (
        ContainerDevice("GPU-b", "NVIDIA", 200, 10),
        ContainerDevice("GPU-a", "NVIDIA", 50, 0),
    )
    assert (second.remaining, second.finished) == (";;;", True)
    assert second.env == {}


@pytest.mark.parametrize(
    ("kwargs", "requested", "message"),
    [
        ({"where": "n2"}, 1, "holds the lock of node n1 but hami.io/vgpu-node is 'n2'"),
        ({"phase": "success"}, 1, "hami.io/bind-phase is 'success', expected 'allocating'"),
        ({}, 2, "container init: hami.io/vgpu-devices-to-allocate assigns 1 device(s)"),
    ],
)
def test_a_pod_not_ready_for_this_call_is_refused(kwargs, requested: int, message: str) -> None:
    with pytest.raises(AllocateError) as raised:
        next_container(pod("GPU-a,NVIDIA,1,0:;", **kwargs), NODE, requested)
    assert message in str(raised.value)
    assert "pod ns/p" in str(raised.value)


def test_the_share_follows_the_device_list_and_the_containers_env() -> None:
    grant = next_container(
        pod(
            ";GPU-a,NVIDIA,3000,150:;",
            env=[
                ("CUDA_DISABLE_CONTROL", "True"),
                ("GPU_CORE_UTILIZATION_POLICY", "FORCE"),
                ("CUDA_TASK_PRIORITY", "0"),
            ],
        ),
        NODE,
        1,
    )
    gpus = {"GPU-a": GpuInfo("GPU-a", 3, 3, "Tesla T4", 16 << 30)}
    shares = share_set(grant, gpus, CACHE)
    (device,) = shares.devices
    assert (device.uuid, device.host_index, device.memory_limit_bytes) == ("GPU-a", 3, 3000 * MIB)
    assert device.core_limit_percent == 100
    assert (shares.policy, shares.priority, shares.disable_control) == (CorePolicy.FORCE, 0, True)
    assert share_set(grant, gpus, CACHE, disable_core_limit=True).policy is CorePolicy.DISABLE


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ([("GPU_CORE_UTILIZATION_POLICY", "sometimes")], "GPU_CORE_UTILIZATION_POLICY 'sometimes'"),
        ([("CUDA_TASK_PRIORITY", "high")], "CUDA_TASK_PRIORITY 'high' is not an integer"),
    ],
)
def test_bad_container_env_is_named(env, message: str) -> None:
    grant = next_container(pod(";GPU-a,NVIDIA,10,0:;", env=env), NODE, 1)
    with pytest.raises(AllocateError) as raised:
        share_set(grant, {"GPU-a": GpuInfo("GPU-a", 0, 0, "T4", 1 << 30)}, CACHE)
    assert message in str(raised.value)
    assert "container a" in str(raised.value)


@pytest.mark.parametrize("value", ["false", "yes", "", "TRUE "])
def test_disable_control_needs_a_go_true(value: str) -> None:
    grant = next_container(
        pod(";GPU-a,NVIDIA,10,0:;", env=[("CUDA_DISABLE_CONTROL", value)]), NODE, 1
    )
    shares = share_set(grant, {"GPU-a": GpuInfo("GPU-a", 0, 0, "T4", 1 << 30)}, CACHE)
    assert not shares.disable_control


def test_a_lock_holder_not_bound_here_is_not_this_calls_pod() -> None:
    holder = pod("GPU-a,NVIDIA,1,0:;")
    require_bound({**holder, "spec": {"nodeName": NODE}}, NODE)
    with pytest.raises(AllocateError) as raised:
        require_bound(holder, NODE)
    assert "pod ns/p holds the lock of node n1 but is not bound to it (spec.nodeName '')" in str(
        raised.value
    )
