"""`dra-driver status` against the emulator: DRA and legacy shares on one view, pending reasons."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client import ApiClient

from api.hami_annotations import (
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    ContainerDevice,
    RegisteredDevice,
    encode_node_devices,
    encode_pod_devices,
)
from dra_driver.cli import main
from dra_driver.objects.enforcement_events import ENFORCEMENT_DISABLED
from dra_driver.version import build_info
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

GIB = 1 << 30
DRIVER = "vgpu.hami.io"
LEGACY_UUID = "GPU-1e9acy00-0000-4000-8000-000000000000"


def legacy_uuid(suffix: str) -> str:
    """One legacy card per fixture: the tests share one emulator, and a uuid is one card."""
    return f"GPU-1e9acy00-0000-4000-8000-000000{suffix}"


OPT_OUT_UUID = "GPU-0pt0u700-0000-4000-8000-000000000000"


def create_dra_node(api: ApiClient, name: str) -> None:
    node = client.CoreV1Api(api).create_node({"metadata": {"name": name}})
    gpus = [
        GpuInfo(f"GPU-{uuid.uuid4()}", index, index, "NVIDIA A100-SXM4-80GB", 80 * GIB)
        for index in range(2)
    ]
    for item in build_resource_slices(name, node.metadata.uid, gpus, SliceSettings(), 1):
        client.ResourceV1Api(api).create_resource_slice(item)


def create_legacy_node(api: ApiClient, name: str, gpu: str = LEGACY_UUID) -> None:
    register = encode_node_devices(
        [RegisteredDevice(gpu, 0, 10, 15360, 100, "NVIDIA-Tesla-T4", 0, "hami-core", True)]
    )
    client.CoreV1Api(api).create_node(
        {"metadata": {"name": name, "annotations": {NODE_NVIDIA_REGISTER: register}}}
    )


def claim_body(name: str, memory: str = "20Gi") -> dict:
    return {
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "nvidia.vgpu.hami.io",
                            "capacity": {"requests": {"memory": memory, "cores": "30"}},
                        },
                    }
                ]
            }
        },
    }


def allocate(
    api: ApiClient,
    ns: str,
    name: str,
    node: str,
    pod: str,
    device: str = "gpu-1",
    config: list[dict] | None = None,
) -> None:
    """Allocate the claim on `node` and reserve it for a (real) pod named `pod`."""
    resource = client.ResourceV1Api(api)
    pod_uid = (
        client.CoreV1Api(api)
        .create_namespaced_pod(
            ns,
            {
                "metadata": {"name": pod},
                "spec": {
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                    "containers": [
                        {"name": "app", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
                    ],
                },
            },
        )
        .metadata.uid
    )
    claim = resource.read_namespaced_resource_claim(name, ns)
    status = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": DRIVER,
                        "pool": node,
                        "device": device,
                        "shareID": str(uuid.uuid4()),
                        "consumedCapacity": {"memory": "20Gi", "cores": "30", "shares": "1"},
                    }
                ],
                "config": config or [],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
            "allocationTimestamp": "2026-11-30T10:00:00Z",
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": pod_uid}],
    }
    version = claim.metadata.resource_version
    resource.patch_namespaced_resource_claim_status(
        name, ns, {"metadata": {"resourceVersion": version}, "status": status}
    )


@pytest.fixture
def cluster(api: ApiClient, ns: str) -> str:
    suffix = uuid.uuid4().hex[:6]
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    resource.create_device_class(
        {
            "metadata": {"name": f"nvidia.vgpu.hami.io-{suffix}"},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        }
    )
    create_dra_node(api, f"dra-{suffix}")
    create_legacy_node(api, f"legacy-{suffix}", legacy_uuid(suffix))
    resource.create_namespaced_resource_claim(ns, claim_body("serving"))
    allocate(api, ns, "serving", f"dra-{suffix}", "server-0")
    pending = claim_body("huge", memory="200Gi")
    pending["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        f"nvidia.vgpu.hami.io-{suffix}"
    )
    resource.create_namespaced_resource_claim(ns, pending)
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": f"huge.{suffix}"},
            "involvedObject": {"kind": "ResourceClaim", "namespace": ns, "name": "huge"},
            "type": "Warning",
            "reason": "FailedAllocation",
            "message": "no node fits: 2/2 CardInsufficientMemory",
        },
    )
    allocated = encode_pod_devices([[ContainerDevice(legacy_uuid(suffix), "NVIDIA", 3000, 30)]])
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "legacy-app", "annotations": {VGPU_DEVICES_ALLOCATED: allocated}},
            "spec": {"containers": [{"name": "app", "image": "cuda"}]},
        },
    )
    return suffix


def run_status(kubeconfig: Path, capsys, *args: str) -> str:
    assert main(["status", "--kubeconfig", str(kubeconfig), *args]) == 0
    return capsys.readouterr().out


def test_json_view_has_dra_and_legacy_shares_and_pending_reason(
    cluster: str, kubeconfig: Path, ns: str, capsys
):
    view = json.loads(run_status(kubeconfig, capsys, "-o", "json", "--namespace", ns))
    assert list(view)[:2] == ["version", "commit"]
    assert {key: view[key] for key in ("version", "commit")} == build_info().fields()
    gpus = {(gpu["node"], gpu["device"]): gpu for gpu in view["gpus"]}
    dra = gpus[(f"dra-{cluster}", "gpu-1")]
    assert dra["mode"] == "dra"
    assert dra["allocatedMemoryBytes"] == 20 * GIB
    assert dra["allocatedCores"] == 30
    assert [(s["holder"], s["pods"]) for s in dra["shares"]] == [("serving", ["server-0"])]
    assert gpus[(f"dra-{cluster}", "gpu-0")]["shares"] == []
    legacy = gpus[(f"legacy-{cluster}", legacy_uuid(cluster))]
    assert (legacy["mode"], legacy["allocatedMemoryBytes"], legacy["allocatedCores"]) == (
        "legacy",
        3000 << 20,
        30,
    )
    assert view["pending"] == [
        {
            "namespace": ns,
            "name": "huge",
            "pods": [],
            "reason": "FailedAllocation: no node fits: 2/2 CardInsufficientMemory",
        }
    ]


def test_node_filter_and_yaml(cluster: str, kubeconfig: Path, capsys):
    view = yaml.safe_load(run_status(kubeconfig, capsys, "-o", "yaml", "--node", f"dra-{cluster}"))
    assert view["version"] == build_info().version
    assert {gpu["node"] for gpu in view["gpus"]} == {f"dra-{cluster}"}
    assert len(view["gpus"]) == 2


def test_text_view_shows_bars_and_holders(cluster: str, kubeconfig: Path, ns: str, capsys):
    text = run_status(kubeconfig, capsys, "--node", f"dra-{cluster}", "--namespace", ns)
    assert "GPU shares" in text
    assert f"{ns}/serving" in text
    assert "25%" in text
    assert "Pending claims" in text
    assert "CardInsufficientMemory" in text


def test_the_default_is_a_row_per_node_busiest_first(
    cluster: str, kubeconfig: Path, ns: str, capsys
):
    text = run_status(kubeconfig, capsys, "--namespace", ns)
    lines = [line for line in text.splitlines() if line.startswith(("dra-", "legacy-"))]
    rows = {line.split()[0]: line for line in lines}
    nodes = [line.split()[0] for line in lines]
    # 3000Mi of the T4's 15Gi is a larger share than 20Gi of the two A100s' 160Gi.
    assert nodes.index(f"legacy-{cluster}") < nodes.index(f"dra-{cluster}")
    assert "2 x NVIDIA-A100-SXM4-80GB" in rows[f"dra-{cluster}"]
    assert "20.0Gi/160.0Gi" in rows[f"dra-{cluster}"]
    assert rows[f"dra-{cluster}"].endswith("  1")
    assert "GPU shares" not in text and f"{ns}/serving" not in text
    assert "dra-driver status --node <name>" in text and "-o wide" in text
    assert "Pending claims: 1" in text and "CardInsufficientMemory" in text


def test_wide_lists_every_gpu_and_share_like_node_does_for_one(
    cluster: str, kubeconfig: Path, ns: str, capsys
):
    wide = run_status(kubeconfig, capsys, "-o", "wide", "--namespace", ns)
    node = run_status(kubeconfig, capsys, "--node", f"dra-{cluster}", "--namespace", ns)
    for text in (wide, node):
        assert "GPU shares" in text
        assert f"{ns}/serving 20.0Gi 30% pods=server-0" in text
    assert f"legacy-{cluster}" in wide and f"legacy-{cluster}" not in node.split("Pending")[0]


def opt_out_config(source: str) -> list[dict]:
    parameters = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}
    return [
        {
            "source": source,
            "requests": ["gpu"],
            "opaque": {"driver": DRIVER, "parameters": {**parameters, "disableControl": True}},
        }
    ]


@pytest.fixture
def opt_outs(api: ApiClient, ns: str) -> str:
    """A class opt-out, a claim opt-out the plugin honoured, and a legacy pod opting out."""
    suffix = uuid.uuid4().hex[:6]
    resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
    create_dra_node(api, f"dra-{suffix}")
    create_legacy_node(api, f"legacy-{suffix}", OPT_OUT_UUID)
    resource.create_namespaced_resource_claim(ns, claim_body("batch"))
    allocate(api, ns, "batch", f"dra-{suffix}", "batch-0", "gpu-0", opt_out_config("FromClass"))
    resource.create_namespaced_resource_claim(ns, claim_body("tuning"))
    allocate(api, ns, "tuning", f"dra-{suffix}", "tuning-0", "gpu-1", opt_out_config("FromClaim"))
    tuning = resource.read_namespaced_resource_claim("tuning", ns)
    core.create_namespaced_event(
        ns,
        {
            "metadata": {"name": f"tuning.{suffix}"},
            "involvedObject": {
                "kind": "ResourceClaim",
                "namespace": ns,
                "name": "tuning",
                "uid": tuning.metadata.uid,
            },
            "type": "Normal",
            "reason": ENFORCEMENT_DISABLED,
            "message": "disableControl honoured: the kubelet plugin allows claim opt-outs",
            "lastTimestamp": "2026-11-30T10:00:05Z",
        },
    )
    allocated = encode_pod_devices([[ContainerDevice(OPT_OUT_UUID, "NVIDIA", 3000, 30)]])
    core.create_namespaced_pod(
        ns,
        {
            "metadata": {"name": "bench", "annotations": {VGPU_DEVICES_ALLOCATED: allocated}},
            "spec": {
                "containers": [
                    {
                        "name": "cuda",
                        "image": "cuda",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        "env": [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}],
                    }
                ]
            },
        },
    )
    return suffix


def test_shares_with_enforcement_off_are_marked_with_why(
    opt_outs: str, kubeconfig: Path, ns: str, capsys
):
    view = json.loads(run_status(kubeconfig, capsys, "-o", "json", "--namespace", ns))
    marks = {
        (gpu["node"], share["holder"]): (share["enforced"], share["enforcementNote"])
        for gpu in view["gpus"]
        for share in gpu["shares"]
    }
    assert marks == {
        (f"dra-{opt_outs}", "batch"): (
            False,
            "DeviceClass nvidia.vgpu.hami.io config sets disableControl",
        ),
        (f"dra-{opt_outs}", "tuning"): (
            False,
            "disableControl honoured: the kubelet plugin allows claim opt-outs",
        ),
        (f"legacy-{opt_outs}", "bench"): (False, "container cuda sets CUDA_DISABLE_CONTROL=true"),
    }
    text = run_status(kubeconfig, capsys, "-o", "wide", "--namespace", ns)
    assert text.count("[limits off]") == 3
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if " off " in line}
    assert set(rows) == {f"{ns}/batch", f"{ns}/tuning", f"{ns}/bench"}
    assert "container cuda sets CUDA_DISABLE_CONTROL=true" in rows[f"{ns}/bench"]
