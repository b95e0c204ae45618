"""`dra-driver status` marks shares whose HAMi-core enforcement is off: rules and output."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from api.hami_annotations import (
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    ContainerDevice,
    RegisteredDevice,
    encode_node_devices,
    encode_pod_devices,
)
from dra_driver.objects.enforcement_events import ENFORCEMENT_DISABLED, OPT_OUT_IGNORED
from dra_driver.status.enforcement import LIMITS_KEPT, NOT_PREPARED
from dra_driver.status.model import build_status
from dra_driver.status.render import render_data, render_text
from dra_driver.status.views import ShareView

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
UID = "0b6f0e2c-claim"
ALLOCATED_AT = "2026-11-30T10:00:00Z"
DISABLED_MESSAGE = "claim ns/train: disableControl honoured (--allow-claim-opt-out)"
IGNORED_MESSAGE = "claim ns/train: ...parameters.disableControl ignored; the limits stay"
UUIDS = ("GPU-aaaaaaaa-0000-4000-8000-000000000000", "GPU-bbbbbbbb-0000-4000-8000-000000000000")


def resource_slice(pool: str, devices: int = 2) -> dict[str, Any]:
    return {
        "spec": {
            "driver": DRIVER,
            "nodeName": pool,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{index}",
                    "capacity": {"memory": {"value": "80Gi"}, "cores": {"value": "100"}},
                }
                for index in range(devices)
            ],
        }
    }


def result(request: str = "gpu", pool: str = "node-a", device: str = "gpu-0") -> dict[str, Any]:
    return {
        "request": request,
        "driver": DRIVER,
        "pool": pool,
        "device": device,
        "consumedCapacity": {"memory": "10Gi", "cores": "20"},
    }


def config(source: str, parameters: dict[str, Any], requests: list[str] | None = None) -> dict:
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {
            "driver": DRIVER,
            "parameters": {
                "apiVersion": "vgpu.hami.io/v1alpha1",
                "kind": "VGPUConfig",
                **parameters,
            },
        },
    }
    if requests is not None:
        entry["requests"] = requests
    return entry


def claim(
    configs: list[dict[str, Any]],
    results: list[dict[str, Any]] | None = None,
    requests: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "train", "namespace": "ns", "uid": UID},
        "spec": {
            "devices": {
                "requests": requests or [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]
            }
        },
        "status": {
            "allocation": {
                "devices": {"results": results or [result()], "config": configs},
                "allocationTimestamp": ALLOCATED_AT,
            }
        },
    }


def event(reason: str, message: str, stamp: str, uid: str = UID) -> dict[str, Any]:
    return {
        "metadata": {"name": f"train.{stamp}", "namespace": "ns"},
        "involvedObject": {"kind": "ResourceClaim", "namespace": "ns", "name": "train", "uid": uid},
        "type": "Normal" if reason == ENFORCEMENT_DISABLED else "Warning",
        "reason": reason,
        "message": message,
        "lastTimestamp": stamp,
    }


def dra_shares(
    claims: list[dict[str, Any]],
    events: list[dict[str, Any]] | None = None,
    pools: tuple[str, ...] = ("node-a",),
) -> dict[tuple[str, str], ShareView]:
    status = build_status(
        driver=DRIVER,
        slices=[resource_slice(pool) for pool in pools],
        claims=claims,
        pods=[],
        nodes=[],
        events=events or [],
        device_classes=[],
    )
    return {(gpu.node, gpu.device): share for gpu in status.gpus for share in gpu.shares}


def only_share(claims: list[dict[str, Any]], events: list[dict[str, Any]] | None = None):
    [share] = dra_shares(claims, events).values()
    return share.enforced, share.enforcement_note


CLAIM_OPT_OUT = config("FromClaim", {"disableControl": True})


def test_a_share_without_opt_out_is_enforced_and_unnoted():
    assert only_share([claim([config("FromClass", {"cores": 20})])]) == (True, "")


@pytest.mark.parametrize(
    ("parameters", "why"),
    [
        ({"disableControl": True}, f"DeviceClass {CLASS} config sets disableControl"),
        (
            {"coreLimitPolicy": "disable"},
            f"DeviceClass {CLASS} config sets coreLimitPolicy: disable",
        ),
        (
            {"disableControl": True, "coreLimitPolicy": "disable"},
            f"DeviceClass {CLASS} config sets disableControl and coreLimitPolicy: disable",
        ),
    ],
)
def test_a_class_opt_out_turns_enforcement_off_and_names_the_class(parameters, why):
    assert only_share([claim([config("FromClass", parameters)])]) == (False, why)


def test_a_class_opt_out_holds_whatever_the_plugin_reported():
    events = [event(OPT_OUT_IGNORED, IGNORED_MESSAGE, "2026-11-30T10:05:00Z")]
    enforced, why = only_share([claim([config("FromClass", {"disableControl": True})])], events)
    assert (enforced, why) == (False, f"DeviceClass {CLASS} config sets disableControl")


def test_a_claim_config_that_sets_the_opt_out_back_keeps_the_limits():
    configs = [
        config("FromClass", {"disableControl": True}),
        config("FromClaim", {"disableControl": False}),
    ]
    assert only_share([claim(configs)]) == (True, "")


def test_a_class_opt_out_scoped_to_another_request_leaves_the_share_enforced():
    configs = [config("FromClass", {"disableControl": True}, requests=["other"])]
    assert only_share([claim(configs)]) == (True, "")


def test_a_first_available_result_belongs_to_its_main_request_and_names_the_subrequest_class():
    requests = [
        {
            "name": "gpu",
            "firstAvailable": [
                {"name": "small", "deviceClassName": "small.vgpu.hami.io"},
                {"name": "big", "deviceClassName": "big.vgpu.hami.io"},
            ],
        }
    ]
    configs = [config("FromClass", {"disableControl": True}, requests=["gpu"])]
    enforced, why = only_share([claim(configs, [result("gpu/big")], requests)])
    assert (enforced, why) == (False, "DeviceClass big.vgpu.hami.io config sets disableControl")


def test_one_opted_out_request_marks_every_share_the_claim_holds_in_that_pool():
    """The plugin prepares a claim's devices on a node as one plan: one preload mount."""
    requests = [
        {"name": "a", "exactly": {"deviceClassName": "off.vgpu.hami.io"}},
        {"name": "b", "exactly": {"deviceClassName": CLASS}},
    ]
    results = [result("a", "node-a", "gpu-0"), result("b", "node-a", "gpu-1")]
    results.append(result("b", "node-b", "gpu-0"))
    configs = [config("FromClass", {"disableControl": True}, requests=["a"])]
    shares = dra_shares([claim(configs, results, requests)], pools=("node-a", "node-b"))
    marks = {key: (s.enforced, s.enforcement_note) for key, s in shares.items()}
    off = (False, "DeviceClass off.vgpu.hami.io config sets disableControl")
    assert marks == {
        ("node-a", "gpu-0"): off,
        ("node-a", "gpu-1"): off,
        ("node-b", "gpu-0"): (True, ""),
    }


def test_a_claim_opt_out_not_prepared_yet_is_marked_requested():
    assert only_share([claim([CLAIM_OPT_OUT])]) == (True, NOT_PREPARED)


def test_a_claim_opt_out_the_plugin_honoured_is_off_with_its_message():
    events = [event(ENFORCEMENT_DISABLED, DISABLED_MESSAGE, "2026-11-30T10:01:00Z")]
    assert only_share([claim([CLAIM_OPT_OUT])], events) == (False, DISABLED_MESSAGE)


def test_a_class_that_allows_claim_opt_outs_is_no_opt_out_itself_and_the_event_decides():
    configs = [config("FromClass", {"allowClaimOptOut": True}), CLAIM_OPT_OUT]
    assert only_share([claim(configs[:1])]) == (True, "")
    events = [event(ENFORCEMENT_DISABLED, DISABLED_MESSAGE, "2026-11-30T10:01:00Z")]
    assert only_share([claim(configs)], events) == (False, DISABLED_MESSAGE)


def test_a_claim_opt_out_the_plugin_dropped_keeps_the_limits():
    events = [event(OPT_OUT_IGNORED, IGNORED_MESSAGE, "2026-11-30T10:01:00Z")]
    assert only_share([claim([CLAIM_OPT_OUT])], events) == (True, LIMITS_KEPT + IGNORED_MESSAGE)


@pytest.mark.parametrize(
    ("disabled_at", "ignored_at", "expected"),
    [
        ("2026-11-30T10:01:00Z", "2026-11-30T10:02:00Z", (True, LIMITS_KEPT + IGNORED_MESSAGE)),
        ("2026-11-30T10:02:00Z", "2026-11-30T10:01:00Z", (False, DISABLED_MESSAGE)),
        ("2026-11-30T10:02:00.250000Z", "2026-11-30T10:02:00Z", (False, DISABLED_MESSAGE)),
    ],
)
def test_the_newest_verdict_wins(disabled_at, ignored_at, expected):
    events = [
        event(ENFORCEMENT_DISABLED, DISABLED_MESSAGE, disabled_at),
        event(OPT_OUT_IGNORED, IGNORED_MESSAGE, ignored_at),
    ]
    assert only_share([claim([CLAIM_OPT_OUT])], events) == expected


@pytest.mark.parametrize("disabled_first", [True, False])
def test_at_equal_stamps_disabled_wins_whatever_the_list_order(disabled_first):
    """One prepare that honours one request's opt-out and drops another's writes both."""
    disabled = event(ENFORCEMENT_DISABLED, DISABLED_MESSAGE, "2026-11-30T10:01:00Z")
    ignored = event(OPT_OUT_IGNORED, IGNORED_MESSAGE, "2026-11-30T10:01:00Z")
    events = [disabled, ignored] if disabled_first else [ignored, disabled]
    assert only_share([claim([CLAIM_OPT_OUT])], events) == (False, DISABLED_MESSAGE)


def test_verdicts_from_before_the_allocation_or_on_another_claim_do_not_count():
    events = [
        event(ENFORCEMENT_DISABLED, DISABLED_MESSAGE, "2026-11-30T09:59:59Z"),
        event(ENFORCEMENT_DISABLED, DISABLED_MESSAGE, "2026-11-30T10:01:00Z", uid="an-older-claim"),
    ]
    assert only_share([claim([CLAIM_OPT_OUT])], events) == (True, NOT_PREPARED)


def test_a_config_that_does_not_parse_leaves_the_share_as_is():
    configs = [
        config("FromClass", {"disableControl": True}),
        config("FromClaim", {"cores": "many"}),
    ]
    assert only_share([claim(configs)]) == (True, "")


def test_another_drivers_opt_out_is_not_ours():
    other = config("FromClass", {"disableControl": True})
    other["opaque"]["driver"] = "gpu.example.com"
    assert only_share([claim([other])]) == (True, "")


def legacy_container(name: str, env: list[tuple[str, str]], gpus: int = 1) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": "cuda"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    container["env"] = [{"name": key, "value": value} for key, value in env]
    return container


def legacy_shares(
    containers: list[dict[str, Any]], devices: list[list[str]], init: int = 0
) -> dict[str, tuple[bool, str]]:
    node = {
        "metadata": {
            "name": "legacy-a",
            "annotations": {
                NODE_NVIDIA_REGISTER: encode_node_devices(
                    [
                        RegisteredDevice(
                            uuid, index, 10, 15360, 100, "NVIDIA-Tesla-T4", 0, "", True
                        )
                        for index, uuid in enumerate(UUIDS)
                    ]
                )
            },
        }
    }
    allocated = encode_pod_devices(
        [[ContainerDevice(uuid, "NVIDIA", 3000, 30) for uuid in entry] for entry in devices]
    )
    pod = {
        "metadata": {
            "name": "app",
            "namespace": "ns",
            "annotations": {VGPU_DEVICES_ALLOCATED: allocated},
        },
        "spec": {"initContainers": containers[:init], "containers": containers[init:]},
    }
    status = build_status(
        driver=DRIVER, slices=[], claims=[], pods=[pod], nodes=[node], events=[], device_classes=[]
    )
    return {
        gpu.uuid: (share.enforced, share.enforcement_note)
        for gpu in status.gpus
        for share in gpu.shares
    }


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ([], (True, "")),
        (
            [("CUDA_DISABLE_CONTROL", "true")],
            (False, "container main sets CUDA_DISABLE_CONTROL=true"),
        ),
        ([("CUDA_DISABLE_CONTROL", "false")], (True, "")),
        (
            [("GPU_CORE_UTILIZATION_POLICY", "DISABLE")],
            (False, "container main sets GPU_CORE_UTILIZATION_POLICY=DISABLE"),
        ),
        ([("GPU_CORE_UTILIZATION_POLICY", "force")], (True, "")),
        # Outside the opt-out namespaces the webhook appends `false` last; the last value wins.
        ([("CUDA_DISABLE_CONTROL", "true"), ("CUDA_DISABLE_CONTROL", "false")], (True, "")),
    ],
)
def test_a_legacy_gpu_containers_env_decides(env, expected):
    assert legacy_shares([legacy_container("main", env)], [[UUIDS[0]]]) == {UUIDS[0]: expected}


def test_a_container_without_a_gpu_limit_does_not_count():
    containers = [
        legacy_container("side", [("CUDA_DISABLE_CONTROL", "true")], gpus=0),
        legacy_container("main", []),
    ]
    assert legacy_shares(containers, [[], [UUIDS[0]]]) == {UUIDS[0]: (True, "")}


def test_each_gpu_is_marked_by_the_containers_that_hold_it_init_containers_first():
    containers = [
        legacy_container("warmup", [("GPU_CORE_UTILIZATION_POLICY", "disable")]),
        legacy_container("main", [("CUDA_DISABLE_CONTROL", "True")]),
        legacy_container("eval", []),
    ]
    shares = legacy_shares(containers, [[UUIDS[0]], [UUIDS[0]], [UUIDS[1]]], init=1)
    assert shares == {
        UUIDS[0]: (
            False,
            "container warmup sets GPU_CORE_UTILIZATION_POLICY=disable; "
            "container main sets CUDA_DISABLE_CONTROL=True",
        ),
        UUIDS[1]: (True, ""),
    }


def mixed_status():
    events = [event(OPT_OUT_IGNORED, IGNORED_MESSAGE, "2026-11-30T10:01:00Z")]
    off = claim([config("FromClass", {"disableControl": True})])
    kept = claim([CLAIM_OPT_OUT], [result(device="gpu-1")])
    kept["metadata"] = {"name": "serve", "namespace": "ns", "uid": "serve-uid"}
    events[0]["involvedObject"].update(name="serve", uid="serve-uid")
    return build_status(
        driver=DRIVER,
        slices=[resource_slice("node-a")],
        claims=[off, kept],
        pods=[],
        nodes=[],
        events=events,
        device_classes=[],
    )


def text_of(status) -> str:
    out = io.StringIO()
    render_text(status, Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_the_text_tags_the_holder_and_lists_why():
    text = text_of(mixed_status())
    assert "ns/train [limits off] 10.0Gi 20%" in text
    assert "ns/serve 10.0Gi 20%" in text
    assert "Enforcement opt-outs" in text
    rows = [line for line in text.splitlines() if "node-a/gpu-" in line]
    assert len(rows) == 2
    assert "ns/train" in rows[0] and " off " in rows[0]
    assert f"DeviceClass {CLASS} config sets disableControl" in rows[0]
    assert "ns/serve" in rows[1] and " on " in rows[1] and "limits kept" in rows[1]


def test_the_text_has_no_opt_out_table_when_every_share_is_enforced():
    status = build_status(
        driver=DRIVER,
        slices=[resource_slice("node-a")],
        claims=[claim([])],
        pods=[],
        nodes=[],
        events=[],
        device_classes=[],
    )
    text = text_of(status)
    assert "ns/train 10.0Gi 20%" in text
    assert "limits off" not in text and "Enforcement opt-outs" not in text


def test_json_output_carries_the_marks_in_camel_case():
    data = json.loads(render_data(mixed_status(), "json"))
    marks = {
        share["holder"]: (share["enforced"], share["enforcementNote"])
        for gpu in data["gpus"]
        for share in gpu["shares"]
    }
    assert marks == {
        "train": (False, f"DeviceClass {CLASS} config sets disableControl"),
        "serve": (True, LIMITS_KEPT + IGNORED_MESSAGE),
    }
