"""HAMi's device-config.yaml read by the legacy scheduler."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from controller.legacy.config import CorePolicy, load_device_config, parse_device_config
from dra_driver.errors import InvalidParameterError

LEGACY_DEVICE_CONFIG = (
    Path(__file__).resolve().parents[2] / "deploy" / "components" / "legacy" / "device-config.yaml"
)
HAMI_CHART_CONFIG = """
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  memoryFactor: 1
  deviceSplitCount: 10
  deviceMemoryScaling: 1
  deviceCoreScaling: 1
  gpuCorePolicy: force
  libCudaLogLevel: 1
  knownMigGeometries:
  - models: ["A30"]
cambricon:
  resourceCountName: cambricon.com/vmlu
"""


def test_reads_hamis_format_and_ignores_other_sections(tmp_path: Path) -> None:
    path = tmp_path / "device-config.yaml"
    path.write_text(HAMI_CHART_CONFIG.replace("nvidia.com/gpumem\n", "example.com/vmem\n"))
    config = load_device_config(path)
    assert config.nvidia.gpu_core_policy is CorePolicy.FORCE
    vendor = config.nvidia.vendor()
    assert vendor.resources.memory == "example.com/vmem"
    assert (vendor.default_count, vendor.memory_factor) == (1, 1)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("nvidia:\n  memoryFactor: 0\n", "nvidia.memoryFactor"),
        ("nvidia:\n  gpuCorePolicy: sometimes\n", "nvidia.gpuCorePolicy"),
        ("nvidia: [1]\n", "nvidia"),
        # HAMi's scheduler refuses an invalid MIG allowlist at start (InitNvidiaDevice ->
        # ValidateMigProfileAllowlist), though its Fit never reads it.
        (
            "nvidia:\n  migProfileAllowlist:\n  - {models: [H100], profiles: [3x.40gb]}\n",
            r"nvidia\.migProfileAllowlist\[0\]\.profiles\[0\]: invalid MIG profile '3x.40gb'",
        ),
        (
            "nvidia:\n  migProfileAllowlist:\n  - {models: [], profiles: [1g.10gb]}\n",
            r"nvidia\.migProfileAllowlist\[0\]\.models: must be a non-empty list",
        ),
    ],
)
def test_bad_value_names_the_key(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InvalidParameterError, match=where):
        load_device_config(path)


def test_unreadable_yaml_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("nvidia: {")
    with pytest.raises(InvalidParameterError, match="not valid YAML"):
        load_device_config(path)


def test_the_shipped_device_config_and_its_mig_allowlist_are_accepted() -> None:
    """deploy/components/legacy/device-config.yaml, HAMi's chart defaults with its allowlist."""
    configmap = yaml.safe_load(LEGACY_DEVICE_CONFIG.read_text())
    config = parse_device_config(yaml.safe_load(configmap["data"]["device-config.yaml"]))
    assert config.nvidia.device_split_count == 10
