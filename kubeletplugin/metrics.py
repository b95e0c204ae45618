"""The plugin's Prometheus metrics, bound to an injected registry (no globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubeletplugin.checkpoint_schema import CheckpointCorruptError, CheckpointTooNewError
from kubeletplugin.state_refusal import CHECKPOINT_FILE, JOURNAL_FILE

STATE_FILES = (CHECKPOINT_FILE, JOURNAL_FILE)
STATE_REFUSAL_REASONS = (CheckpointTooNewError.reason, CheckpointCorruptError.reason)
"""Every series of `vgpu_dra_state_refused` is exported (0 when fine), so an alert on
`== 1` and a dashboard see the plugin report before anything goes wrong."""

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
        self.state_refused = Gauge(
            "vgpu_dra_state_refused",
            "1 while the plugin refuses its checkpoint or journal (from a newer release, or "
            "corrupt) and prepares, unprepares and cleans up nothing; 0 otherwise.",
            ["file", "reason"],
            registry=registry,
        )
        for file in STATE_FILES:
            for reason in STATE_REFUSAL_REASONS:
                self.state_refused.labels(file, reason).set(0)
