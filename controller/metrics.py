"""The controller's Prometheus metrics, bound to an injected registry (no globals).

HAMi's scheduler metrics (reference/hami-protocol.md §8), computed at scrape
time from the controller's own view (inventory and usage), with HAMi's names,
labels and the `zone="vGPU"` label, and the devices that share one uuid
(both allocators count each node's card on its own, but the cause needs
fixing); plus the controller's own: allocation latency, the engine's decision
time, pending claims and failures by reason.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.quantity import MIB
from controller.inventory import Inventory
from dra_driver.engine.model import DeviceUsage
from dra_driver.process.allocator import allocator_in_use, live_memory

ZONE = "vGPU"
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
DEVICE_LABELS = ("node", "device_uuid", "device_index", "device_type", "zone")
VGPU_LABELS = ("namespace", "node", "pod", "container_index", "device_uuid", "zone")
QUOTA_LABELS = ("namespace", "quota_name", "zone")
QUOTA_USED_LABELS = ("namespace", "quota_name", "limit", "zone")


@dataclass(frozen=True, slots=True)
class ShareRecord:
    """One allocated share, for the per-pod `hami_vgpu_*` series."""

    namespace: str
    node: str
    pod: str
    container_index: int
    device_uuid: str
    memory_bytes: int
    cores: int


@dataclass(frozen=True, slots=True)
class QuotaRecord:
    """One ResourceQuota limit HAMi enforces (`limits.nvidia.com/gpumem|gpucores`) and its use,
    in the quota's own unit (MiB, or percent of a card)."""

    namespace: str
    resource: str
    limit: int
    used: int


@dataclass(frozen=True, slots=True)
class ViewSnapshot:
    """What the collector reads: the inventory, usage per node and uuid, the shares, quotas."""

    inventory: Inventory = field(default_factory=Inventory)
    usage: Mapping[str, Mapping[str, DeviceUsage]] = field(default_factory=dict)
    """Only the devices holding something: an idle one reads as DeviceUsage()."""
    shares: Sequence[ShareRecord] = ()
    quotas: Sequence[QuotaRecord] = ()


class HamiSchedulerCollector(Collector):
    """HAMi's per-device and per-share gauges from a snapshot function."""

    def __init__(self, snapshot: Callable[[], ViewSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> list[GaugeMetricFamily]:
        return []

    def collect(self) -> Iterator[GaugeMetricFamily]:
        view = self._snapshot()
        limit = GaugeMetricFamily(
            "hami_gpu_memory_limit_bytes", "GPU device memory limit", labels=DEVICE_LABELS
        )
        core_limit = GaugeMetricFamily(
            "hami_gpu_core_limit_ratio", "GPU device core limit", labels=DEVICE_LABELS
        )
        shared = GaugeMetricFamily(
            "hami_gpu_shared_count", "Number of shares on the GPU device", labels=DEVICE_LABELS
        )
        cores = GaugeMetricFamily(
            "hami_gpu_core_allocated_ratio", "GPU device cores allocated", labels=DEVICE_LABELS
        )
        memory_ratio = GaugeMetricFamily(
            "hami_node_gpu_memory_allocated_ratio",
            "GPU device memory allocated ratio",
            labels=DEVICE_LABELS,
        )
        memory = GaugeMetricFamily(
            "hami_gpu_memory_allocated_bytes",
            "GPU device memory allocated",
            labels=(*DEVICE_LABELS, "device_cores"),
        )
        for node_name, node in sorted(view.inventory.nodes.items()):
            usage = view.usage.get(node_name, {})
            for device in node.devices:
                used = usage.get(device.id, DeviceUsage())
                labels = [node_name, device.id, str(device.index), device.type, ZONE]
                limit.add_metric(labels, device.memory_mib * MIB)
                core_limit.add_metric(labels, device.cores)
                shared.add_metric(labels, used.used)
                cores.add_metric(labels, used.cores)
                ratio = used.memory_mib / device.memory_mib if device.memory_mib else 0.0
                memory_ratio.add_metric(labels, ratio)
                memory.add_metric([*labels, str(device.cores)], used.memory_mib * MIB)
        vgpu_memory = GaugeMetricFamily(
            "hami_vgpu_memory_allocated_bytes", "vGPU memory allocated", labels=VGPU_LABELS
        )
        vgpu_cores = GaugeMetricFamily(
            "hami_vgpu_core_allocated_ratio", "vGPU cores allocated", labels=VGPU_LABELS
        )
        for share in view.shares:
            labels = [
                share.namespace,
                share.node,
                share.pod,
                str(share.container_index),
                share.device_uuid,
                ZONE,
            ]
            vgpu_memory.add_metric(labels, share.memory_bytes)
            vgpu_cores.add_metric(labels, share.cores)
        quota_used = GaugeMetricFamily(
            "hami_resource_quota_used",
            "ResourceQuota usage of a GPU resource",
            labels=QUOTA_USED_LABELS,
        )
        quota_limit = GaugeMetricFamily(
            "hami_resource_quota_limit",
            "ResourceQuota limit of a GPU resource",
            labels=QUOTA_LABELS,
        )
        for quota in view.quotas:
            quota_used.add_metric(
                [quota.namespace, quota.resource, str(quota.limit), ZONE], quota.used
            )
            quota_limit.add_metric([quota.namespace, quota.resource, ZONE], quota.limit)
        duplicates = GaugeMetricFamily(
            "vgpu_device_uuid_duplicates",
            "Devices published or registered with this uuid, for uuids on more than one device.",
            labels=("device_uuid",),
        )
        for uuid, places in sorted(view.inventory.duplicate_uuids.items()):
            duplicates.add_metric([uuid], len(places))
        yield from (limit, core_limit, shared, cores, memory_ratio, memory, vgpu_memory, vgpu_cores)
        yield from (quota_used, quota_limit, duplicates)


class LiveMemoryCollector(Collector):
    """What the process uses, fragmentation left out: after a burst its RSS may stay up
    while these fall back, which tells fragmentation from a leak."""

    def describe(self) -> list[GaugeMetricFamily]:
        return list(self.collect())

    def collect(self) -> Iterator[GaugeMetricFamily]:
        memory = live_memory()
        allocator = GaugeMetricFamily(
            "vgpu_controller_memory_allocator_info",
            "What serves the process's memory (jemalloc as deployed, or Python's and glibc's).",
            labels=("allocator",),
        )
        allocator.add_metric([allocator_in_use()], 1)
        yield allocator
        yield GaugeMetricFamily(
            "vgpu_controller_python_allocated_blocks",
            "Blocks Python's allocator has handed out and not got back.",
            value=memory.python_blocks,
        )
        if memory.c_heap_bytes is not None:
            yield GaugeMetricFamily(
                "vgpu_controller_c_heap_in_use_bytes",
                "Bytes the C allocator (jemalloc or glibc) has handed out and not got back.",
                value=memory.c_heap_bytes,
            )


class ControllerMetrics:
    """The controller's own series, plus HAMi's collector once a view is attached."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.allocation_latency = Histogram(
            "vgpu_controller_allocation_seconds",
            "From first seeing a pod's unallocated claims to their allocation being written.",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.decision_latency = Histogram(
            "vgpu_controller_decision_seconds",
            "Time the engine took to decide one pod's claims (fit or no fit).",
            buckets=DECISION_BUCKETS,
            registry=registry,
        )
        self.allocations = Counter(
            "vgpu_controller_allocations",
            "Claims allocated by this controller.",
            registry=registry,
        )
        self.failures = Counter(
            "vgpu_controller_failures",
            "Pods whose claims could not be allocated, by reason.",
            ["reason"],
            registry=registry,
        )
        self.pending_claims = Gauge(
            "vgpu_controller_pending_claims",
            "Unallocated claims of this driver that a pending pod waits for.",
            registry=registry,
        )
        self.memory_releases = Counter(
            "vgpu_controller_memory_releases",
            "Times the controller gave its free memory back to the system after a burst's "
            "pods and claims were gone.",
            registry=registry,
        )
        self.preemption_attempts = Counter(
            "vgpu_controller_preemption_attempts",
            "Times a pod that fit nowhere was considered for preemption, by result "
            "(preempted, not_helpful, not_eligible, waiting_for_victims, failed).",
            ["result"],
            registry=registry,
        )
        self.preemption_victims = Counter(
            "vgpu_controller_preemption_victims",
            "Pods deleted to make room for a pod of higher priority.",
            registry=registry,
        )
        registry.register(LiveMemoryCollector())
        self._collector: HamiSchedulerCollector | None = None

    def attach_view(self, snapshot: Callable[[], ViewSnapshot]) -> None:
        """Serve HAMi's device metrics from `snapshot` (replacing an earlier view)."""
        self.detach_view()
        self._collector = HamiSchedulerCollector(snapshot)
        self.registry.register(self._collector)

    def detach_view(self) -> None:
        if self._collector is not None:
            self.registry.unregister(self._collector)
            self._collector = None
