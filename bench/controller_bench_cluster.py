"""What bench/controller_bench.py stands on: the cluster it builds, the objects it
creates, and how it reads the controller's /metrics and /proc figures.

The cluster is N Ready, untainted nodes (simulator.nodes.register_node, as the
simulation registers them) with G GPUs each, published as the kubelet plugin does in
the controller-allocated mode (the allocation taint on every device), and the
DeviceClasses deploy/ installs. Claims ask for 1..8 GiB of one GPU, either
pre-created by the bench or made by the kube-controller-manager stand-in from one of
eight ResourceClaimTemplates (one per size).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dra_driver.kube.rest import KubeClient
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices
from simulator.deviceclasses import device_classes
from simulator.nodes import CONTROLLER_TAINT, register_node

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
NAMESPACE = "default"
SIZES_GIB = range(1, 9)
SLICE_SETTINGS = SliceSettings(driver=DRIVER, allocation_taint=CONTROLLER_TAINT)
CLUSTER_CONCURRENCY = 32
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
TEMPLATES = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


async def build_cluster(client: KubeClient, nodes: int, gpus: int) -> None:
    """DeviceClasses, templates, then every node Ready with its slice."""
    for device_class in device_classes():
        await client.create("/apis/resource.k8s.io/v1/deviceclasses", device_class)
    for size in SIZES_GIB:
        await client.create(TEMPLATES, template_body(size))
    semaphore = asyncio.Semaphore(CLUSTER_CONCURRENCY)

    async def one(n: int) -> None:
        name = f"node-{n:04d}"
        async with semaphore:
            await register_node(client, name)
            node = await client.get(f"/api/v1/nodes/{name}")
            devices = [
                GpuInfo(f"GPU-{n:04d}-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 << 30, i // 4)
                for i in range(gpus)
            ]
            for item in build_resource_slices(
                name, node["metadata"]["uid"], devices, SLICE_SETTINGS, 1
            ):
                await client.create("/apis/resource.k8s.io/v1/resourceslices", item)

    await asyncio.gather(*(one(n) for n in range(nodes)))


def claim_spec(size_gib: int) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": CLASS,
                        "capacity": {"requests": {"memory": f"{size_gib}Gi"}},
                    },
                }
            ]
        }
    }


def template_name(size_gib: int) -> str:
    return f"gpu-{size_gib}gi"


def template_body(size_gib: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(size_gib), "namespace": NAMESPACE},
        "spec": {"spec": claim_spec(size_gib)},
    }


def claim_body(name: str, size_gib: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": claim_spec(size_gib),
    }


def pod_body(name: str, claim_entry: dict[str, str]) -> dict[str, Any]:
    """A pod with one claim entry (`resourceClaimName` or `resourceClaimTemplateName`)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "gpu", **claim_entry}],
        },
    }


# ---- the controller's /metrics --------------------------------------------------------

Buckets = list[tuple[float, float]]


def histogram(text: str, name: str) -> tuple[float, float, Buckets]:
    """(sum, count, cumulative buckets) of a Prometheus histogram in exposition text."""
    total = count = 0.0
    buckets: Buckets = []
    for line in text.splitlines():
        if line.startswith(f"{name}_sum"):
            total = float(line.split()[-1])
        elif line.startswith(f"{name}_count"):
            count = float(line.split()[-1])
        elif line.startswith(f"{name}_bucket"):
            bound = line.split('le="')[1].split('"')[0]
            buckets.append(
                (float("inf") if bound == "+Inf" else float(bound), float(line.split()[-1]))
            )
    return total, count, buckets


def bucket_delta(after: Buckets, before: Buckets) -> Buckets:
    """The cumulative counts observed between two scrapes."""
    seen = dict(before)
    return [(bound, count - seen.get(bound, 0.0)) for bound, count in after]


def interpolated_quantile(buckets: Buckets, q: float) -> float:
    """The q-quantile, linear within its bucket (as PromQL's histogram_quantile)."""
    count = buckets[-1][1] if buckets else 0.0
    rank = q * count
    lower_bound = lower_count = 0.0
    for bound, seen in buckets:
        if seen >= rank:
            if bound == float("inf"):
                return lower_bound
            inside = seen - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / inside)
        lower_bound, lower_count = bound, seen
    return float("inf")


def share_at_most(buckets: Buckets, bound: float) -> float:
    """The share of observations <= `bound` (a bucket bound: exact, no interpolation)."""
    count = buckets[-1][1] if buckets else 0.0
    below = next((seen for upper, seen in buckets if upper == bound), None)
    return below / count if below is not None and count else float("nan")


def gauge_sum(text: str, name: str) -> float:
    """The sum of a gauge's samples over all its label sets."""
    prefix = f"{name}{{"
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix)
    )


def series_count(text: str, name: str) -> int:
    """How many label sets a metric has."""
    prefix = f"{name}{{"
    return sum(1 for line in text.splitlines() if line.startswith(prefix))


def label_value(text: str, name: str, label: str) -> str:
    """`label` of the first sample of `name` (an info series); "unknown" if none."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and label in sample.labels:
                return sample.labels[label]
    return "unknown"


def counter_value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(f"{name}_total") or line.startswith(f"{name} "):
            return float(line.split()[-1])
    return 0.0


# ---- /proc -------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB: resident now, and the peak so far."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


# ---- figures -----------------------------------------------------------------------


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def write_lines(
    counts: dict[str, dict[str, int]], refused: dict[str, dict[str, int]], pods: int
) -> list[str]:
    """One line per client: writes per pod by resource[/subresource], and the total;
    how many of them the server refused (conflicts included), where any were."""
    lines = []
    for client, by_resource in sorted(counts.items()):
        total = sum(by_resource.values())
        parts = ", ".join(
            f"{resource} {count / pods:.2f}" for resource, count in sorted(by_resource.items())
        )
        line = f"  {client}: {total / pods:.2f}/pod ({parts})"
        if refused_total := sum((refused.get(client) or {}).values()):
            line += f", refused {refused_total / pods:.2f}/pod"
        lines.append(line)
    return lines
