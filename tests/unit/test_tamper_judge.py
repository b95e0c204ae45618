"""The verdict on a tenant's running pod: what it set, what the driver gave, whose env wins."""

from __future__ import annotations

from simulator.attempts import Outcome
from simulator.tamper_judge import RunningPod, container_env, judge_running_pod


def pod(env: dict[str, str], env_from: list[dict] | None = None) -> dict:
    container = {"name": "app", "env": [{"name": k, "value": v} for k, v in env.items()]}
    if env_from is not None:
        container["envFrom"] = env_from
    return {"metadata": {"namespace": "default", "name": "p"}, "spec": {"containers": [container]}}


def test_cdi_env_replacing_the_tenants_value_is_neutralised():
    tried = pod({"CUDA_DEVICE_MEMORY_LIMIT_0": "80g", "APP_MODE": "fast"})
    verdict = judge_running_pod(
        RunningPod(tried, tried, {"app": {"CUDA_DEVICE_MEMORY_LIMIT_0": "10240m"}}, True)
    )
    assert verdict.outcome is Outcome.NEUTRALISED
    assert verdict.details == ["app CUDA_DEVICE_MEMORY_LIMIT_0: 80g -> 10240m"]


def test_a_pinned_value_equal_to_the_tenants_is_still_held_in_dra():
    tried = pod({"CUDA_DISABLE_CONTROL": "false"})
    verdict = judge_running_pod(
        RunningPod(tried, tried, {"app": {"CUDA_DISABLE_CONTROL": "false"}}, True)
    )
    assert verdict.outcome is Outcome.NEUTRALISED


def test_the_containers_env_winning_in_device_plugin_mode_is_a_bypass():
    tried = pod({"CUDA_DEVICE_MEMORY_LIMIT_0": "80g"})
    verdict = judge_running_pod(
        RunningPod(tried, tried, {"app": {"CUDA_DEVICE_MEMORY_LIMIT_0": "10240m"}}, False)
    )
    assert verdict.outcome is Outcome.ALLOWED
    assert verdict.reason == "app CUDA_DEVICE_MEMORY_LIMIT_0=80g stands"


def test_a_variable_the_driver_does_not_pin_stands():
    tried = pod({"CUDA_DEVICE_SM_LIMIT_7": "100"})
    verdict = judge_running_pod(RunningPod(tried, tried, {"app": {}}, True))
    assert verdict.outcome is Outcome.ALLOWED


def test_a_honoured_claim_opt_out_is_allowed_and_a_dropped_one_neutralised():
    quiet = pod({})
    event = {"involvedObject": {"kind": "ResourceClaim", "name": "c"}, "message": "m"}
    dropped = RunningPod(
        quiet, quiet, {}, True, claim_events=[{**event, "reason": "VGPUConfigOptOutIgnored"}]
    )
    honoured = RunningPod(
        quiet, quiet, {}, True, claim_events=[{**event, "reason": "VGPUEnforcementDisabled"}]
    )
    assert judge_running_pod(dropped).outcome is Outcome.NEUTRALISED
    assert judge_running_pod(honoured).outcome is Outcome.ALLOWED


def test_a_pod_that_runs_with_nothing_held_back_is_allowed():
    quiet = pod({"APP_MODE": "fast"})
    verdict = judge_running_pod(RunningPod(quiet, quiet, {"app": {}}, True))
    assert verdict.outcome is Outcome.ALLOWED


def test_env_from_a_config_map_takes_its_prefix_and_env_wins_over_it():
    container = {
        "name": "app",
        "envFrom": [
            {"configMapRef": {"name": "knobs"}, "prefix": "X_"},
            {"configMapRef": {"name": "knobs"}},
        ],
        "env": [
            {"name": "A", "value": "from-env"},
            {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "knobs", "key": "A"}}},
        ],
    }
    assert container_env(container, {"knobs": {"A": "1"}}) == {
        "X_A": "1",
        "A": "from-env",
        "B": "1",
    }
