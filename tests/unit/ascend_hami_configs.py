"""The Ascend chip configs HAMi's own tests run against (pkg/device/ascend/device_test.go).

Kept as HAMi writes them (the `vnpus.configs` list of its device-config.yaml) so the
Ascend tests here feed the same values to our backends as HAMi's tests feed to
its `InitDevices`, and expect the same answers.
"""

from __future__ import annotations

from typing import Any

import yaml

FIT_CONFIGS_YAML = """
- chipName: 910A
  commonWord: Ascend910A
  resourceName: huawei.com/Ascend910A
  resourceMemoryName: huawei.com/Ascend910A-memory
  memoryAllocatable: 32768
  memoryCapacity: 32768
  aiCore: 30
  templates:
    - {name: vir02, memory: 2184, aiCore: 2}
    - {name: vir04, memory: 4369, aiCore: 4}
    - {name: vir08, memory: 8738, aiCore: 8}
    - {name: vir16, memory: 17476, aiCore: 16}
- chipName: 910B2
  commonWord: Ascend910B2
  resourceName: huawei.com/Ascend910B2
  resourceMemoryName: huawei.com/Ascend910B2-memory
  memoryAllocatable: 65536
  memoryCapacity: 65536
  aiCore: 24
  aiCPU: 6
  templates:
    - {name: vir03_1c_8g, memory: 8192, aiCore: 3, aiCPU: 1}
    - {name: vir06_1c_16g, memory: 16384, aiCore: 6, aiCPU: 1}
    - {name: vir12_3c_32g, memory: 32768, aiCore: 12, aiCPU: 3}
- chipName: 910B3
  commonWord: Ascend910B3
  resourceName: huawei.com/Ascend910B3
  resourceMemoryName: huawei.com/Ascend910B3-memory
  memoryAllocatable: 65536
  memoryCapacity: 65536
  aiCore: 20
  aiCPU: 7
  templates:
    - {name: vir05_1c_16g, memory: 16384, aiCore: 5, aiCPU: 1}
    - {name: vir10_3c_32g, memory: 32768, aiCore: 10, aiCPU: 3}
- chipName: 910B4
  commonWord: Ascend910B4
  resourceName: huawei.com/Ascend910B4
  resourceMemoryName: huawei.com/Ascend910B4-memory
  memoryAllocatable: 32768
  memoryCapacity: 32768
  aiCore: 20
  aiCPU: 7
  templates:
    - {name: vir05_1c_8g, memory: 8192, aiCore: 5, aiCPU: 1}
    - {name: vir10_3c_16g, memory: 16384, aiCore: 10, aiCPU: 3}
- chipName: 310P3
  commonWord: Ascend310P
  resourceName: huawei.com/Ascend310P
  resourceMemoryName: huawei.com/Ascend310P-memory
  memoryAllocatable: 21527
  memoryCapacity: 24576
  aiCore: 8
  aiCPU: 7
  templates:
    - {name: vir01, memory: 3072, aiCore: 1, aiCPU: 1}
    - {name: vir02, memory: 6144, aiCore: 2, aiCPU: 2}
    - {name: vir04, memory: 12288, aiCore: 4, aiCPU: 4}
"""
"""TestDevices_Fit's chips. Its 910B4-1 entry repeats commonWord Ascend910B4, which HAMi's
DevicesMap keeps once (the last); it is left out here, since this scheduler refuses a
repeated commonWord at start-up instead."""

ASCEND_910A: dict[str, Any] = {
    "chipName": "910A",
    "commonWord": "Ascend910A",
    "resourceName": "huawei.com/Ascend910A",
    "resourceMemoryName": "huawei.com/Ascend910A-memory",
    "memoryAllocatable": 32768,
    "memoryCapacity": 32768,
    "aiCore": 30,
    "templates": [
        {"name": "vir02", "memory": 2184, "aiCore": 2},
        {"name": "vir04", "memory": 4369, "aiCore": 4},
        {"name": "vir08", "memory": 8738, "aiCore": 8},
        {"name": "vir16", "memory": 17476, "aiCore": 16},
    ],
}
"""The config of Test_MutateAdmission, Test_GenerateResourceRequests and Test_PatchAnnotations."""

ASCEND_910B3_CORE: dict[str, Any] = {
    "commonWord": "Ascend910B3",
    "resourceName": "huawei.com/Ascend910B3",
    "resourceMemoryName": "huawei.com/Ascend910B3-memory",
    "resourceCoreName": "huawei.com/Ascend910B3-core",
    "memoryAllocatable": 32768,
    "memoryCapacity": 32768,
}
"""Test_MutateAdmission_VNPUCoreMode's chip: a -core resource and no templates."""

ASCEND_910C_SUPERPOD: dict[str, Any] = {
    "chipName": "Ascend910",
    "commonWord": "Ascend910C",
    "resourceName": "huawei.com/Ascend910C",
    "resourceMemoryName": "huawei.com/Ascend910C-memory",
    "memoryAllocatable": 65536,
    "memoryCapacity": 65536,
    "aiCore": 20,
    "aiCPU": 7,
    "superPod": True,
}
"""Test_MutateAdmission910C and TestDevices_Fit_910C."""


def fit_configs() -> list[dict[str, Any]]:
    """A fresh copy of TestDevices_Fit's chip list."""
    return yaml.safe_load(FIT_CONFIGS_YAML)


def with_changes(config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """One of the configs above with some keys replaced (HAMi's tests vary one at a time)."""
    return {**config, **changes}
