"""Prometheus text exposition (format 0.0.4), written straight from values.

prometheus_client builds a Metric and a Sample object per series and escapes
every label of every sample again on output; with hundreds of cache files and
a dozen families that dominated a scrape. Here a series' label set is escaped
and joined once, shared by every family it appears in, each sample is a
single string format, and the caller may keep the lines it rendered. Pure:
no I/O, no prometheus_client.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def label_set(names: Sequence[str], values: Sequence[str]) -> str:
    """`{name="value",...}`, values escaped; names must already be valid label names."""
    if len(names) != len(values):
        raise ValueError(f"{len(names)} label names but {len(values)} values")
    pairs = ",".join(
        f'{name}="{escape_label_value(value)}"' for name, value in zip(names, values, strict=True)
    )
    return "{" + pairs + "}"


def format_value(value: float) -> str:
    """Integers exactly (bytes beyond 2**53 stay exact), floats as Prometheus spells them."""
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def gauge_header(name: str, documentation: str) -> str:
    return f"# HELP {name} {escape_help(documentation)}\n# TYPE {name} gauge\n"


def series_prefix(name: str, labels: str) -> str:
    """What a sample line starts with: a series' lines differ only in the value after it."""
    return f"{name}{labels} "


def sample(name: str, labels: str, value: float) -> str:
    """One sample line; `labels` is a `label_set` string, shareable across families."""
    return f"{series_prefix(name, labels)}{format_value(value)}\n"
