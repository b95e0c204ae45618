"""The legacy webhook with Ascend enabled: HAMi's Ascend MutateAdmission through review_pod,
the JSON patch applied to the pod as the API server would."""

from __future__ import annotations

from typing import Any

from ascend_hami_configs import ASCEND_910A, ASCEND_910C_SUPERPOD, with_changes

from controller.legacy.admission import review_pod
from controller.legacy.config import LegacySettings, parse_device_config
from simulator.standins.admission import apply_json_patch

CHIPS = [
    with_changes(ASCEND_910A, runtimeClassName="ascend", overwriteEnv=True),
    ASCEND_910C_SUPERPOD,
]
SETTINGS = LegacySettings(
    device_config=parse_device_config({"nvidia": {}, "vnpus": {"configs": CHIPS}}),
    enabled_vendor_flags=frozenset({"enable-ascend"}),
)


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": list(containers), **spec},
    }


def ctr(
    name: str, limits: dict[str, str], requests: dict[str, str] | None = None
) -> dict[str, Any]:
    resources: dict[str, Any] = {"limits": limits}
    if requests is not None:
        resources["requests"] = requests
    return {"name": name, "image": "x", "resources": resources}


def admitted(obj: dict[str, Any]) -> dict[str, Any]:
    decision = review_pod(obj, "ns", SETTINGS)
    assert decision.allowed, decision.message
    return apply_json_patch(obj, decision.patch)


def test_npu_pod_gets_template_memory_scheduler_and_runtime_class() -> None:
    npu = ctr("npu", {"huawei.com/Ascend910A": "1", "huawei.com/Ascend910A-memory": "3000"})
    result = admitted(pod(npu, ctr("sidecar", {"cpu": "1"})))
    app, sidecar = result["spec"]["containers"]
    assert app["resources"]["limits"]["huawei.com/Ascend910A-memory"] == "4369"
    assert app["resources"]["requests"] == {"huawei.com/Ascend910A-memory": "4369"}
    assert "env" not in app
    assert sidecar["env"] == [{"name": "ASCEND_VISIBLE_DEVICES", "value": ""}]
    assert result["spec"]["schedulerName"] == "hami-scheduler"
    assert result["spec"]["runtimeClassName"] == "ascend"


def test_a_pod_naming_its_runtime_class_keeps_it() -> None:
    npu = ctr("npu", {"huawei.com/Ascend910A": "1"})
    result = admitted(pod(npu, runtimeClassName="mine"))
    assert result["spec"]["runtimeClassName"] == "mine"
    assert result["spec"]["containers"][0]["resources"]["limits"][
        "huawei.com/Ascend910A-memory"
    ] == ("32768")


def test_superpod_count_of_one_becomes_a_module() -> None:
    npu = ctr("npu", {"huawei.com/Ascend910C": "1"}, {"huawei.com/Ascend910C": "1"})
    resources = admitted(pod(npu))["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {
        "huawei.com/Ascend910C": "2",
        "huawei.com/Ascend910C-memory": "65536",
    }
    assert resources["requests"] == {
        "huawei.com/Ascend910C": "2",
        "huawei.com/Ascend910C-memory": "65536",
    }


def test_refusals_name_the_container_field() -> None:
    odd = review_pod(pod(ctr("npu", {"huawei.com/Ascend910C": "3"})), "ns", SETTINGS)
    assert not odd.allowed
    assert "spec.containers[0].resources.limits.huawei.com/Ascend910C" in odd.message
    assert "must be 1 or 2*n, got 3" in odd.message
    split = {"huawei.com/Ascend910A": "2", "huawei.com/Ascend910A-memory": "8738"}
    multi = review_pod(pod(ctr("npu", split)), "ns", SETTINGS)
    assert not multi.allowed and "vNPU not supported for multiple devices" in multi.message


def test_without_the_flag_ascend_resources_are_not_ours() -> None:
    settings = LegacySettings(device_config=SETTINGS.device_config)
    decision = review_pod(pod(ctr("npu", {"huawei.com/Ascend910A": "1"})), "ns", settings)
    assert decision.allowed and decision.patch == []
