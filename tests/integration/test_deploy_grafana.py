"""deploy/grafana/vgpu-dashboard.json: it parses, and every series and label it queries is
one the monitor or the controller actually exports (a renamed metric breaks this test,
not a dashboard nobody looks at until an incident)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from controller.metrics import DEVICE_LABELS, VGPU_LABELS, ControllerMetrics
from libvgpu.metrics import CONTAINER_LABELS, HOST_LABELS

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "vgpu-dashboard.json"
SOURCES = ("controller", "libvgpu", "kubeletplugin", "dra_driver")
METRIC = re.compile(r"\b((?:hami|vgpu)_[a-z0-9_]+)\b")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")
LABEL_VALUES = re.compile(r"label_values\(\s*[\w:]+\s*,\s*(\w+)\s*\)")
PROMETHEUS_LABELS = {"le", "instance", "job"}
SAMPLE_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(expression, legend) of every panel target and templating query."""
    found = []
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            found.append((target["expr"], target.get("legendFormat", "")))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append((variable["definition"], ""))
    return found


def _source_text() -> str:
    return "\n".join(
        path.read_text() for top in SOURCES for path in sorted((ROOT / top).rglob("*.py"))
    )


def test_the_dashboard_is_well_formed(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] and dashboard["title"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert {"x", "y", "w", "h"} <= panel["gridPos"].keys(), panel["title"]
        assert panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']} queries nothing"
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    used = set(re.findall(r"\$(\w+)", json.dumps(dashboard["panels"])))
    assert used <= variables, f"undefined variables: {used - variables}"


def test_every_queried_series_is_exported(dashboard: dict[str, Any]) -> None:
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    controller_samples = {
        family.name + suffix
        for family in registry.collect()
        for suffix in SAMPLE_SUFFIXES.get(family.type, ("",))
    }
    source = _source_text()
    names = {name for expr, _ in _queries(dashboard) for name in METRIC.findall(expr)}
    assert any(n.startswith("hami_vgpu_memory_used") for n in names)
    assert any(n.startswith("vgpu_controller_") for n in names)
    missing = []
    for name in sorted(names):
        if name.startswith("vgpu_controller_"):
            # The controller's own series: the sample names its real registry exposes
            # (histogram _bucket/_sum/_count, counter _total), with or without samples yet.
            if name not in controller_samples:
                missing.append(name)
        elif f'"{name}"' not in source:
            missing.append(name)
    assert not missing, f"queried but exported nowhere: {missing}"


def test_every_label_the_dashboard_reads_is_exported(dashboard: dict[str, Any]) -> None:
    exported = set(DEVICE_LABELS) | set(VGPU_LABELS) | set(HOST_LABELS) | set(CONTAINER_LABELS)
    exported |= {"reason"} | PROMETHEUS_LABELS
    read = set()
    for expr, legend in _queries(dashboard):
        read |= set(LEGEND_LABEL.findall(legend))
        read |= set(LABEL_VALUES.findall(expr))
        for grouping in GROUPING.findall(expr):
            read |= {label.strip() for label in grouping.split(",") if label.strip()}
        read |= set(re.findall(r"(\w+)=~", expr))
    assert read, "no labels found: the patterns above no longer match the dashboard"
    assert read <= exported, f"labels no series carries: {read - exported}"
