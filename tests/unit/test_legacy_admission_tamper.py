"""The webhook refuses GPU containers that would lift HAMi-core's limits (issue 17, legacy).

Each case is a bypass that the webhook of issue 11 admitted: it is tried here and
seen refused, naming the container and the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from controller.legacy.admission import review_pod
from controller.legacy.config import LegacySettings
from controller.legacy.pod_shape import check_pod_shape
from dra_driver.errors import InvalidParameterError
from simulator.standins.admission import apply_json_patch

SETTINGS = LegacySettings()
OPT_OUT = LegacySettings(enforcement_opt_out_namespaces=frozenset({"trusted"}))
LIBRARY = "/usr/local/vgpu/libvgpu.so"


def gpu(name: str = "cuda", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}, **extra}


def pod(*containers: dict[str, Any], init: tuple = ()) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}


def with_env(*env: dict[str, Any]) -> dict[str, Any]:
    """A pod whose second container, a GPU one, sets `env` after a harmless entry."""
    return pod(gpu("first"), gpu("second", env=[{"name": "A", "value": "1"}, *env]))


def refused(obj: dict[str, Any], namespace: str = "ns", config: LegacySettings = SETTINGS) -> str:
    decision = review_pod(obj, namespace, config)
    assert not decision.allowed and decision.code == 403
    return decision.message


def admitted(
    obj: dict[str, Any], namespace: str = "ns", config: LegacySettings = SETTINGS
) -> dict[str, Any]:
    decision = review_pod(obj, namespace, config)
    assert decision.allowed, decision.message
    return apply_json_patch(obj, decision.patch)


@pytest.mark.parametrize(
    "variable",
    [
        {"name": "CUDA_DEVICE_MEMORY_LIMIT", "value": "80g"},
        {"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80000m"},
        {"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"},
        {"name": "CUDA_DEVICE_SM_LIMIT_3", "value": "100"},
        {"name": "CUDA_DEVICE_MEMORY_SHARED_CACHE", "value": "/tmp/mine.cache"},
        {"name": "CUDA_REDIRECT", "value": "/tmp/passthrough.so"},
        {"name": "CUDA_DISABLE_CONTROL", "value": "true"},
        {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "disable"},
        {"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "valueFrom": {"fieldRef": {"fieldPath": "x"}}},
        {"name": "LD_PRELOAD", "value": "/tmp/hook.so"},
        {"name": "LD_PRELOAD", "value": f"{LIBRARY}:/tmp/hook.so"},
        {"name": "LD_PRELOAD", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}},
    ],
)
def test_hami_core_variable_in_env_is_refused_naming_container_and_field(
    variable: dict[str, Any],
) -> None:
    message = refused(with_env(variable))
    assert message.startswith(f"container second: spec.containers[1].env[1] ({variable['name']})")


def test_init_container_is_held_to_the_same_rules() -> None:
    setup = gpu("setup", env=[{"name": "CUDA_DEVICE_SM_LIMIT", "value": "100"}])
    message = refused(pod(gpu(), init=(setup,)))
    assert "container setup: spec.initContainers[0].env[0] (CUDA_DEVICE_SM_LIMIT)" in message


def test_container_without_gpu_and_libvgpu_preload_are_left_alone() -> None:
    side = {"name": "side", "image": "x", "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "1"}]}
    preload = gpu(env=[{"name": "LD_PRELOAD", "value": LIBRARY}])
    admitted(pod(preload, side))


def test_opt_out_namespace_may_turn_enforcement_off_but_not_lift_limits() -> None:
    off = [
        {"name": "CUDA_DISABLE_CONTROL", "value": "true"},
        {"name": "GPU_CORE_UTILIZATION_POLICY", "value": "disable"},
    ]
    result = admitted(pod(gpu(env=off)), "trusted", OPT_OUT)
    assert result["spec"]["containers"][0]["env"] == off
    refused(pod(gpu(env=off)), "ns", OPT_OUT)
    limit = gpu(env=[{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80g"}])
    assert "(CUDA_DEVICE_MEMORY_LIMIT_0)" in refused(pod(limit), "trusted", OPT_OUT)


@pytest.mark.parametrize(
    "prefix", [None, "", "CUDA_", "CUDA_DEVICE_", "CUDA_DEVICE_SM_LIMIT_", "CUDA_RE", "LD_"]
)
def test_env_from_that_could_spell_a_hami_core_variable_is_refused(prefix: str | None) -> None:
    source: dict[str, Any] = {"configMapRef": {"name": "limits"}}
    if prefix is not None:
        source["prefix"] = prefix
    message = refused(pod(gpu("app", envFrom=[{**source, "prefix": "APP_"}, source])))
    assert message.startswith(
        f"container app: spec.containers[0].envFrom[1] (prefix {prefix or ''!r})"
    )


def test_cuda_redirect_is_refused_even_where_opt_outs_are_allowed() -> None:
    """CUDA_REDIRECT names the library libvgpu loads for its dlsym override; the device
    plugin sets it to libvgpu's container path, and the container's value would win."""
    redirect = {"name": "CUDA_REDIRECT", "value": LIBRARY}
    message = refused(pod(gpu(env=[redirect])), "trusted", OPT_OUT)
    assert message.startswith("container cuda: spec.containers[0].env[0] (CUDA_REDIRECT)")
    assert "is set by the device plugin" in message
    source = {"prefix": "CUDA_REDIREC", "configMapRef": {"name": "c"}}
    refused(pod(gpu(envFrom=[source])), "trusted", OPT_OUT)


def test_env_from_core_policy_prefix_only_in_an_opt_out_namespace() -> None:
    source = {"prefix": "GPU_", "configMapRef": {"name": "c"}}
    refused(pod(gpu(envFrom=[source])), "ns", OPT_OUT)
    admitted(pod(gpu(envFrom=[source])), "trusted", OPT_OUT)


@pytest.mark.parametrize(
    "path",
    [
        "/usr/local/vgpu",
        "/usr/local/vgpu/",
        "/usr//local/vgpu",
        LIBRARY,
        "/usr/local/vgpu/containers",
        "/usr/local",
        "/",
        "/etc",
        "/etc/ld.so.preload",
        "/tmp",
        "/tmp/vgpulock/lock",
    ],
)
def test_mount_at_inside_or_above_hami_core_paths_is_refused(path: str) -> None:
    mounts = [{"name": "data", "mountPath": "/data"}, {"name": "v", "mountPath": path}]
    message = refused(pod(gpu(volumeMounts=mounts)))
    assert message.startswith(f"container cuda: spec.containers[0].volumeMounts[1] ({path})")


@pytest.mark.parametrize("path", ["/data", "/etc/config", "/usr/local/vgpu2", "/tmpdata"])
def test_mount_beside_hami_core_paths_is_allowed(path: str) -> None:
    admitted(pod(gpu(volumeMounts=[{"name": "v", "mountPath": path}])))


def test_disable_control_is_pinned_last_so_a_value_from_env_from_loses() -> None:
    app = gpu(
        env=[{"name": "A", "value": "1"}],
        envFrom=[{"prefix": "APP_", "configMapRef": {"name": "c"}}],
    )
    result = admitted(pod(app, init=(gpu("setup"),)))
    for key in ("initContainers", "containers"):
        env = result["spec"][key][0]["env"]
        assert env[-1] == {"name": "CUDA_DISABLE_CONTROL", "value": "false"}
    trusted = admitted(pod(gpu()), "trusted", OPT_OUT)
    assert "env" not in trusted["spec"]["containers"][0]


@pytest.mark.parametrize("part", ["env", "envFrom", "volumeMounts"])
def test_malformed_env_from_and_mounts_name_the_field(part: str) -> None:
    with pytest.raises(InvalidParameterError) as error:
        check_pod_shape(pod(gpu(**{part: ["oops"]})))
    assert error.value.field == f"Pod.spec.containers[0].{part}[0]"


def test_a_sidecar_with_cap_sys_admin_in_a_gpu_pod_is_refused() -> None:
    sidecar = {
        "name": "helper",
        "image": "x",
        "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}},
    }
    message = refused(pod(gpu(), sidecar))
    assert "container helper: spec.containers[1].securityContext.capabilities.add" in message


@pytest.mark.parametrize("host", ["/usr/local/vgpu", "/usr/local", "/tmp/vgpulock/x", "/"])
def test_a_hostpath_volume_over_libvgpus_host_files_is_refused(host: str) -> None:
    obj = pod(gpu(volumeMounts=[{"name": "h", "mountPath": "/data"}]))
    obj["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": host}}]
    message = refused(obj)
    assert "container cuda: spec.containers[0].volumeMounts[0]" in message
    assert f"hostPath {host}" in message


def test_cap_sys_admin_and_host_paths_elsewhere_are_left_alone() -> None:
    elsewhere = pod(gpu(volumeMounts=[{"name": "h", "mountPath": "/data"}]))
    elsewhere["spec"]["volumes"] = [{"name": "h", "hostPath": {"path": "/srv/datasets"}}]
    admitted(elsewhere)
    no_gpu = {"name": "tool", "image": "x", "securityContext": {"capabilities": {"add": ["ALL"]}}}
    decision = review_pod(pod(no_gpu), "ns", SETTINGS)
    assert decision.allowed
