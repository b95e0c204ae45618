"""`dra-driver status` summary: a row per node, busiest first, holders counted once, pending short;
the JSON keeps every key it had and adds the summary beside them."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from api.hami_annotations import (
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    ContainerDevice,
    RegisteredDevice,
    encode_node_devices,
    encode_pod_devices,
)
from dra_driver.status.model import (
    ClusterStatus,
    build_status,
    claim_pods,
    newest_warning,
    pods_by_claim,
)
from dra_driver.status.render import render_data, render_text
from dra_driver.status.render_summary import DETAILS, render_summary
from dra_driver.status.summary import PENDING_SHOWN, cluster_totals, gpu_kind, summarize_nodes
from dra_driver.status.views import GpuView, PendingClaimView, ShareView
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
GIB = 1 << 30
MIB = 1 << 20
LEGACY_UUID = "GPU-1e9acy00-0"


def gpu(node: str, device: str, *shares: ShareView, memory_gib: int = 80, healthy: bool = True):
    return GpuView(
        node=node,
        device=device,
        uuid=f"{node}-{device}",
        type="NVIDIA-A100-SXM4-80GB",
        mode="dra",
        memory_bytes=memory_gib * GIB,
        cores=100,
        shares_total=10,
        healthy=healthy,
        shares=list(shares),
        vendor="NVIDIA",
    )


def share(holder: str, memory_gib: int, cores: int, *, enforced: bool = True) -> ShareView:
    return ShareView("dra", "ns", holder, [f"{holder}-pod"], memory_gib * GIB, cores, enforced)


def test_nodes_come_busiest_first_by_memory_then_cores_then_name():
    gpus = [
        gpu("idle", "gpu-0"),
        gpu("b-half", "gpu-0", share("x", 40, 10)),
        gpu("a-half", "gpu-0", share("y", 40, 10)),
        gpu("half-more-cores", "gpu-0", share("z", 40, 90)),
        gpu("full", "gpu-0", share("w", 80, 5)),
    ]
    assert [node.node for node in summarize_nodes(gpus)] == [
        "full",
        "half-more-cores",
        "a-half",
        "b-half",
        "idle",
    ]


def test_a_node_sums_its_gpus_and_counts_a_holder_of_two_gpus_once():
    gpus = [
        gpu("n", "gpu-0", share("both", 10, 20), share("off", 5, 5, enforced=False)),
        gpu("n", "gpu-1", share("both", 10, 20), healthy=False),
    ]
    (node,) = summarize_nodes(gpus)
    assert (node.gpus, node.unhealthy_gpus, node.kinds, node.modes) == (
        2,
        1,
        {"NVIDIA-A100-SXM4-80GB": 2},
        ["dra"],
    )
    assert (node.memory_bytes, node.allocated_memory_bytes) == (160 * GIB, 25 * GIB)
    assert (node.cores, node.allocated_cores) == (200, 45)
    assert (node.holders, node.limits_off) == (2, 1)


def test_cluster_totals_add_up_the_nodes_and_count_pending_claims():
    nodes = summarize_nodes(
        [gpu("a", "gpu-0", share("x", 40, 10)), gpu("b", "gpu-0", share("y", 20, 30))]
    )
    pending = [PendingClaimView("ns", "wait", [], "waiting for allocation")]
    totals = cluster_totals(nodes, pending)
    assert (totals.nodes, totals.gpus, totals.holders, totals.pending) == (2, 2, 2, 1)
    assert (totals.allocated_memory_bytes, totals.memory_bytes) == (60 * GIB, 160 * GIB)
    assert (totals.allocated_cores, totals.cores) == (40, 200)


def test_gpu_kind_names_the_vendor_once():
    assert gpu_kind("NVIDIA", "NVIDIA-A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert gpu_kind("Cambricon", "MLU370-X8") == "Cambricon MLU370-X8"
    assert gpu_kind("", "") == "-"


def summary_text(status: ClusterStatus) -> str:
    out = io.StringIO()
    render_summary(status, Console(file=out, width=160, color_system=None))
    return out.getvalue()


def test_the_summary_is_a_row_per_node_with_a_total_and_says_where_the_details_are():
    status = ClusterStatus(
        gpus=[
            gpu("quiet", "gpu-0"),
            gpu("quiet", "gpu-1"),
            gpu("busy", "gpu-0", share("train", 72, 90, enforced=False)),
            gpu("busy", "gpu-1", share("serve", 8, 10)),
        ],
        pending=[],
    )
    text = summary_text(status)
    rows = [line for line in text.splitlines() if line.startswith(("busy", "quiet"))]
    assert [row.split()[0] for row in rows] == ["busy", "quiet"]
    assert "2 x NVIDIA-A100-SXM4-80GB" in rows[0]
    assert "80.0Gi/160.0Gi" in rows[0] and "100/200" in rows[0]
    assert rows[0].endswith("2 (1 limits off)")
    assert rows[1].endswith("0")
    assert "train" not in text
    assert DETAILS in text
    assert "Cluster: 2 nodes, 4 GPUs; memory 80.0Gi/320.0Gi (25%)" in text
    assert "1 shares with limits off; 0 pending claims" in text
    assert "Pending claims" not in text


def test_the_summary_lists_the_first_pending_claims_and_counts_all():
    pending = [
        PendingClaimView("ns", f"claim-{i}", [], f"reason-{i}") for i in range(PENDING_SHOWN + 3)
    ]
    text = summary_text(ClusterStatus(gpus=[gpu("n", "gpu-0")], pending=pending))
    assert f"Pending claims: {PENDING_SHOWN + 3} (first {PENDING_SHOWN}; all of them: -o wide)" in (
        text
    )
    assert [f"reason-{i}" in text for i in range(PENDING_SHOWN + 3)] == [True] * PENDING_SHOWN + [
        False
    ] * 3


def test_the_wide_view_lists_every_holder_on_its_own_line():
    status = ClusterStatus(
        gpus=[gpu("n", "gpu-0", share("a", 10, 10), share("b", 20, 20)), gpu("n", "gpu-1")],
        pending=[],
    )
    out = io.StringIO()
    render_text(status, Console(file=out, width=160, color_system=None))
    lines = out.getvalue().splitlines()
    first = next(line for line in lines if line.startswith("n  ") and "gpu-0" in line)
    second = lines[lines.index(first) + 1]
    assert first.endswith("ns/a 10.0Gi 10% pods=a-pod")
    assert second.strip() == "ns/b 20.0Gi 20% pods=b-pod"
    assert second.index("ns/b") == first.index("ns/a")
    assert any(line.startswith("n  ") and "gpu-1" in line and line.endswith("-") for line in lines)


def cluster_objects() -> dict[str, Any]:
    """A DRA node with two claims, a legacy node with a pod, a pending claim with a Warning."""
    cards = [GpuInfo(f"GPU-d-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 * GIB) for i in range(2)]
    register = encode_node_devices(
        [RegisteredDevice(LEGACY_UUID, 0, 10, 15360, 100, "NVIDIA-Tesla-T4", 0, "hami-core", True)]
    )

    def claim(name: str, device: str | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "metadata": {"name": name, "namespace": "ns", "uid": f"{name}-uid"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}
            },
        }
        if device:
            result = {
                "request": "gpu",
                "driver": DRIVER,
                "pool": "dra",
                "device": device,
                "consumedCapacity": {"memory": "20Gi", "cores": "30"},
            }
            body["status"] = {
                "allocation": {"devices": {"results": [result]}},
                "reservedFor": [{"resource": "pods", "name": f"{name}-pod", "uid": "u"}],
            }
        return body

    def pod(name: str, claim_name: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": claim_name}]},
        }

    allocated = encode_pod_devices([[ContainerDevice(LEGACY_UUID, "NVIDIA", 3000, 30)]])
    return {
        "driver": DRIVER,
        "slices": build_resource_slices("dra", "uid", cards, SliceSettings(), 1),
        "claims": [claim("a", "gpu-0"), claim("b", "gpu-1"), claim("wait", None)],
        "pods": [
            pod("a-pod", "a"),
            pod("b-pod", "b"),
            pod("wait-pod", "wait"),
            {
                "metadata": {
                    "name": "legacy-app",
                    "namespace": "ns",
                    "annotations": {VGPU_DEVICES_ALLOCATED: allocated},
                },
                "status": {"phase": "Running"},
            },
        ],
        "nodes": [
            {"metadata": {"name": "legacy", "annotations": {NODE_NVIDIA_REGISTER: register}}}
        ],
        "events": [
            {
                "metadata": {"name": "wait.1", "namespace": "ns"},
                "involvedObject": {"kind": "Pod", "namespace": "ns", "name": "wait-pod"},
                "type": "Warning",
                "reason": "FailedScheduling",
                "message": "no node fits",
                "lastTimestamp": "2026-12-01T10:00:00Z",
            }
        ],
        "device_classes": [
            {
                "metadata": {"name": CLASS},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            }
        ],
    }


def test_json_keeps_its_keys_and_adds_nodes_and_totals():
    data = json.loads(render_data(build_status(**cluster_objects()), "json"))
    assert list(data) == ["version", "commit", "gpus", "pending", "nodes", "totals"]
    assert set(data["gpus"][0]) == {
        "node",
        "device",
        "uuid",
        "type",
        "mode",
        "memoryBytes",
        "cores",
        "sharesTotal",
        "healthy",
        "shares",
        "vendor",
        "allocatedMemoryBytes",
        "allocatedCores",
    }
    assert set(data["gpus"][0]["shares"][0]) == {
        "mode",
        "namespace",
        "holder",
        "pods",
        "memoryBytes",
        "cores",
        "enforced",
        "enforcementNote",
        "enforcedBy",
    }
    assert data["pending"] == [
        {
            "namespace": "ns",
            "name": "wait",
            "pods": ["wait-pod"],
            "reason": "FailedScheduling: no node fits",
        }
    ]
    nodes = {node["node"]: node for node in data["nodes"]}
    assert [node["node"] for node in data["nodes"]] == ["dra", "legacy"]
    assert nodes["dra"]["kinds"] == {"NVIDIA-A100-SXM4-80GB": 2}
    assert (nodes["dra"]["allocatedMemoryBytes"], nodes["dra"]["holders"]) == (40 * GIB, 2)
    assert (nodes["legacy"]["allocatedMemoryBytes"], nodes["legacy"]["modes"]) == (
        3000 * MIB,
        ["legacy"],
    )
    assert data["totals"]["holders"] == 3
    assert data["totals"]["pending"] == 1


def test_pods_are_indexed_by_the_claims_they_name_or_were_generated():
    pods = [
        {
            "metadata": {"name": "direct", "namespace": "ns"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]},
        },
        {
            "metadata": {"name": "templated", "namespace": "ns"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "t"}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "c"}]},
        },
        {
            "metadata": {"name": "elsewhere", "namespace": "other"},
            "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimName": "c"}]},
        },
    ]
    assert pods_by_claim(pods) == {
        ("ns", "c"): ["direct", "templated"],
        ("other", "c"): ["elsewhere"],
    }
    assert claim_pods({"metadata": {"name": "c", "namespace": "ns"}}, pods) == [
        "direct",
        "templated",
    ]


def test_newest_warning_picks_the_latest_warning_of_the_named_objects():
    def event(name: str, stamp: str, reason: str, kind_type: str = "Warning") -> dict[str, Any]:
        return {
            "metadata": {"namespace": "ns"},
            "involvedObject": {"kind": "Pod", "name": name},
            "type": kind_type,
            "reason": reason,
            "message": "m",
            "lastTimestamp": stamp,
        }

    events = [
        event("a", "2026-12-01T10:00:02Z", "Newer"),
        event("b", "2026-12-01T10:00:01Z", "Older"),
        event("a", "2026-12-01T10:00:09Z", "Normal", kind_type="Normal"),
        event("c", "2026-12-01T10:00:05Z", "OtherPod"),
    ]
    assert newest_warning(events, "Pod", "ns", {"a", "b"}) == "Newer: m"
    assert newest_warning(events, "Pod", "ns", {"b"}) == "Older: m"
    assert newest_warning(events, "Pod", "ns", {"d"}) == ""
