"""The plugin's node config file: overrides of the flags, watched for changes.

YAML or JSON, every key optional (the flag value stays):

    splitCount: 4          # shares per GPU
    memoryScaling: 1.5     # > 1 oversubscribes memory
    coreScaling: 1
    filterDevices: {uuids: [GPU-...], indices: [3]}   # GPUs not to publish
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.errors import InvalidParameterError
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings


class _FilterDevices(BaseModel):
    model_config = ConfigDict(extra="forbid")

    uuids: list[str] = Field(default_factory=list, description="GPU UUIDs not to publish.")
    indices: list[int] = Field(default_factory=list, description="GPU indices not to publish.")


class NodeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    split_count: int | None = Field(
        None,
        alias="splitCount",
        ge=1,
        le=1000,
        description="Shares per GPU (the `shares` capacity; HAMi's deviceSplitCount).",
    )
    memory_scaling: float | None = Field(
        None,
        alias="memoryScaling",
        gt=0,
        description="Published memory = physical x this; above 1 oversubscribes.",
    )
    core_scaling: float | None = Field(
        None,
        alias="coreScaling",
        gt=0,
        description="Published cores = 100 x this (HAMi's deviceCoreScaling).",
    )
    filter_devices: _FilterDevices = Field(
        default_factory=_FilterDevices,
        alias="filterDevices",
        description="GPUs this node keeps to itself.",
    )

    def slice_settings(self, base: SliceSettings) -> SliceSettings:
        changes = {
            "split_count": self.split_count,
            "memory_scaling": self.memory_scaling,
            "core_scaling": self.core_scaling,
        }
        return replace(base, **{key: value for key, value in changes.items() if value is not None})

    def published(self, gpus: Sequence[GpuInfo]) -> tuple[GpuInfo, ...]:
        hidden_uuids = set(self.filter_devices.uuids)
        hidden_indices = set(self.filter_devices.indices)
        return tuple(
            g for g in gpus if g.uuid not in hidden_uuids and g.index not in hidden_indices
        )


def load_node_config(path: Path | None) -> NodeConfig:
    """The config at `path`; a missing file (or None) means no overrides."""
    if path is None or not path.exists():
        return NodeConfig()
    try:
        return NodeConfig.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})
    except (yaml.YAMLError, ValidationError) as error:
        raise InvalidParameterError(str(path), f"not a valid node config: {error}") from None
