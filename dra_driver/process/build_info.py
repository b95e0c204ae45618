"""`vgpu_build_info{version,commit,python} 1` on every `/metrics` a component serves.

The usual Prometheus idiom for what a process runs: during a rolling upgrade a query
such as `count by (version) (vgpu_build_info)` shows how many kubelet plugins, monitors
and controllers run each release, and a join on the labels puts the release beside any
other series. Each component calls `register_build_info` on the registry it serves, where
it makes that registry, so the series exists exactly once per endpoint.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge

from dra_driver.version import build_info

BUILD_INFO = "vgpu_build_info"
BUILD_INFO_LABELS = ("version", "commit", "python")


def register_build_info(registry: CollectorRegistry) -> None:
    info = build_info()
    gauge = Gauge(
        BUILD_INFO,
        "Always 1: the release (pyproject version), the commit it was built from and the "
        "Python it runs on.",
        BUILD_INFO_LABELS,
        registry=registry,
    )
    gauge.labels(info.version, info.commit, info.python).set(1)
