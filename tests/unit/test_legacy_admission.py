"""The webhook's decisions (pure): every rule of issue 11 "Mutating webhook"."""

from __future__ import annotations

from typing import Any

import pytest

from controller.legacy.admission import review_pod
from controller.legacy.config import LegacySettings, parse_device_config
from dra_driver.engine.quota import QuotaLedger
from dra_driver.objects.quotas import quota_limits
from simulator.standins.admission import apply_json_patch

SETTINGS = LegacySettings()


def settings(**nvidia: Any) -> LegacySettings:
    return LegacySettings(device_config=parse_device_config({"nvidia": nvidia}))


def ctr(name: str = "c", **limits: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "x"}
    if limits:
        container["resources"] = {"limits": {f"nvidia.com/{k}": str(v) for k, v in limits.items()}}
    return container


def pod(*containers: dict[str, Any], init: tuple = (), **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"containers": list(containers), **spec}
    if init:
        body["initContainers"] = list(init)
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": body}


def mutated(obj: dict[str, Any], config: LegacySettings = SETTINGS, quota=None) -> dict[str, Any]:
    decision = review_pod(obj, "ns", config, quota)
    assert decision.allowed, decision.message
    return apply_json_patch(obj, decision.patch)


def limits(obj: dict[str, Any], index: int = 0) -> dict[str, str]:
    return obj["spec"]["containers"][index]["resources"]["limits"]


def env(obj: dict[str, Any], index: int = 0) -> dict[str, str]:
    return {e["name"]: e["value"] for e in obj["spec"]["containers"][index].get("env", [])}


def test_pod_without_containers_is_denied() -> None:
    decision = review_pod({"metadata": {}, "spec": {"containers": []}}, "ns", SETTINGS)
    assert not decision.allowed and "add at least one container" in decision.message


def test_pod_of_another_scheduler_is_untouched() -> None:
    decision = review_pod(pod(ctr(gpu=1), schedulerName="volcano"), "ns", SETTINGS)
    assert decision.allowed and decision.patch == []


def test_pod_without_gpu_is_untouched() -> None:
    decision = review_pod(pod(ctr(), schedulerName="default-scheduler"), "ns", SETTINGS)
    assert decision.allowed and decision.patch == []


@pytest.mark.parametrize("scheduler", [None, "default-scheduler", "hami-scheduler"])
def test_gpu_pod_with_default_or_empty_scheduler_gets_ours(scheduler: str | None) -> None:
    spec = {"schedulerName": scheduler} if scheduler else {}
    assert mutated(pod(ctr(gpu=1, gpumem=3000), **spec))["spec"]["schedulerName"] == (
        "hami-scheduler"
    )


def test_without_force_overwrite_default_scheduler_is_left_alone() -> None:
    config = LegacySettings(force_overwrite_default_scheduler=False)
    decision = review_pod(pod(ctr(gpu=1), schedulerName="default-scheduler"), "ns", config)
    assert decision.allowed and decision.patch == []


def test_memory_only_gets_default_gpu_count() -> None:
    assert limits(mutated(pod(ctr(gpumem=3000))))["nvidia.com/gpu"] == "1"
    assert limits(mutated(pod(ctr(gpucores=30)), settings(defaultGPUNum=2)))["nvidia.com/gpu"] == (
        "2"
    )


@pytest.mark.parametrize(
    ("given", "cores"),
    [
        ({"gpu": 1}, "100"),
        ({"gpu": 1, "gpumem-percentage": 100}, "100"),
        ({"gpu": 1, "gpumem-percentage": 50}, None),
        ({"gpu": 1, "gpumem": 3000}, None),
        ({"gpu": 1, "gpucores": 20}, "20"),
    ],
)
def test_exclusive_core_default(given: dict[str, int], cores: str | None) -> None:
    assert limits(mutated(pod(ctr(**given)))).get("nvidia.com/gpucores") == cores


def test_percentage_outside_range_is_denied_naming_the_field() -> None:
    decision = review_pod(pod(ctr(gpu=1, **{"gpumem-percentage": 150})), "ns", SETTINGS)
    assert not decision.allowed and decision.code == 400
    assert "spec.containers[0].resources.limits.nvidia.com/gpumem-percentage" in decision.message


def test_priority_core_policy_runtime_class_and_overwrite_env() -> None:
    config = settings(gpuCorePolicy="force", runtimeClassName="nvidia", overwriteEnv=True)
    result = mutated(pod(ctr("gpu", gpu=1, priority=1), ctr("side")), config)
    assert env(result, 0) == {
        "CUDA_TASK_PRIORITY": "1",
        "GPU_CORE_UTILIZATION_POLICY": "force",
        "CUDA_DISABLE_CONTROL": "false",
    }
    assert env(result, 1) == {
        "GPU_CORE_UTILIZATION_POLICY": "force",
        "NVIDIA_VISIBLE_DEVICES": "none",
    }
    assert result["spec"]["runtimeClassName"] == "nvidia"


def test_env_is_appended_to_existing_env() -> None:
    container = ctr(gpu=1, priority=0)
    container["env"] = [{"name": "A", "value": "1"}]
    assert mutated(pod(container))["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "1"},
        {"name": "CUDA_TASK_PRIORITY", "value": "0"},
        {"name": "CUDA_DISABLE_CONTROL", "value": "false"},
    ]


def test_overwrite_env_hides_gpus_from_a_pod_without_any_gpu_container() -> None:
    config = settings(overwriteEnv=True, runtimeClassName="nvidia")
    result = mutated(pod(ctr("app"), ctr("side"), init=(ctr("setup"),)), config)
    assert env(result, 0) == env(result, 1) == {"NVIDIA_VISIBLE_DEVICES": "none"}
    init_env = result["spec"]["initContainers"][0]["env"]
    assert init_env == [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]
    assert "schedulerName" not in result["spec"] and "runtimeClassName" not in result["spec"]


def test_core_policy_env_reaches_a_pod_without_gpu() -> None:
    result = mutated(pod(ctr("app")), settings(gpuCorePolicy="disable"))
    assert env(result) == {"GPU_CORE_UTILIZATION_POLICY": "disable"}


def privileged(container: dict[str, Any]) -> dict[str, Any]:
    return {**container, "securityContext": {"privileged": True}}


def test_privileged_gpu_container_is_denied() -> None:
    decision = review_pod(pod(privileged(ctr("cuda", gpu=1))), "ns", SETTINGS)
    assert not decision.allowed and decision.code == 403
    assert decision.message.startswith("container cuda is privileged")
    assert "remove its securityContext.privileged" in decision.message


@pytest.mark.parametrize(
    "obj",
    [
        pod(ctr("cuda", gpu=1), privileged(ctr("side"))),
        pod(ctr("cuda", gpu=1), init=(privileged(ctr("side")),)),
        pod(ctr("cuda", gpumem=3000), privileged(ctr("side"))),
    ],
    ids=["app-sidecar", "init-container", "memory-only-gpu-container"],
)
def test_any_privileged_container_of_a_gpu_pod_is_denied(obj: dict[str, Any]) -> None:
    decision = review_pod(obj, "ns", SETTINGS)
    assert not decision.allowed
    assert decision.message.startswith("container side is privileged")
    assert "(in cuda)" in decision.message


def test_privileged_pod_without_gpu_is_allowed() -> None:
    assert review_pod(pod(privileged(ctr("side"))), "ns", SETTINGS).allowed


def test_preset_node_name_is_denied() -> None:
    decision = review_pod(pod(ctr(gpu=1), nodeName="n1"), "ns", SETTINGS)
    assert not decision.allowed and "remove spec.nodeName" in decision.message


def quota(hard: dict[str, str]) -> QuotaLedger:
    rq = {"metadata": {"namespace": "ns"}, "spec": {"hard": hard}}
    return quota_limits([rq], SETTINGS.vendors())


def test_quota_app_sum_vs_largest_init_against_used() -> None:
    limit = quota({"limits.nvidia.com/gpumem": "10000"})
    limit.charge("ns", "NVIDIA", 4000, 0)
    apps = pod(ctr("a", gpu=1, gpumem=3000), ctr("b", gpu=1, gpumem=3000))
    assert review_pod(apps, "ns", SETTINGS, limit).allowed
    big_init = pod(ctr("a", gpu=1, gpumem=3000), init=(ctr("i", gpu=1, gpumem=7000),))
    decision = review_pod(big_init, "ns", SETTINGS, limit)
    assert not decision.allowed
    assert "limits.nvidia.com/gpumem is 10000 MiB with 4000 MiB in use" in decision.message
    assert "asks for 7000 MiB; lower nvidia.com/gpumem or raise the quota" in decision.message


def test_quota_on_cores_counts_the_injected_exclusive_cores() -> None:
    limit = quota({"limits.nvidia.com/gpucores": "150"})
    assert review_pod(pod(ctr(gpu=1)), "ns", SETTINGS, limit).allowed
    assert not review_pod(pod(ctr(gpu=2)), "ns", SETTINGS, limit).allowed


def test_quota_entry_without_hard_limit_does_not_limit() -> None:
    assert quota({"limits.nvidia.com/gpu": "1", "pods": "3"}).quotas == {}
