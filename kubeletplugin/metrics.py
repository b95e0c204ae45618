"""The plugin's Prometheus metrics, bound to an injected registry (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class PluginMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.operations = Counter(
            "vgpu_dra_operations",
            "NodePrepareResources / NodeUnprepareResources per claim, by outcome.",
            ["operation", "outcome"],
            registry=registry,
        )
        self.errors = Counter(
            "vgpu_dra_errors",
            "Per-claim failures by operation and reason.",
            ["operation", "reason"],
            registry=registry,
        )
        self.latency = Histogram(
            "vgpu_dra_operation_seconds",
            "Time to prepare or unprepare one claim.",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.prepared_claims = Gauge(
            "vgpu_dra_prepared_claims", "Claims currently prepared on this node.", registry=registry
        )
