"""docs/configuration.md is generated from the models; it must not go stale."""

from __future__ import annotations

import runpy
from pathlib import Path

GENERATOR = Path(__file__).resolve().parents[2] / "docs" / "generate_config_reference.py"


def test_configuration_reference_is_current():
    generator = runpy.run_path(str(GENERATOR))
    assert generator["main"](["--check"]) == 0, (
        "docs/configuration.md is stale: run python docs/generate_config_reference.py"
    )


def test_every_vgpuconfig_field_is_documented():
    generator = runpy.run_path(str(GENERATOR))
    page = generator["render"]()
    keys = ("memoryPercentage", "useUUIDs", "coreLimitPolicy", "splitCount", "deviceSplitCount")
    for key in keys:
        assert f"`{key}`" in page or f".{key}`" in page
