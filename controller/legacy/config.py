"""HAMi's device config (`device-config.yaml`, key `nvidia:`) and the scheduler's flags.

A cluster that swaps HAMi's scheduler for ours keeps its ConfigMap, so the file
is read in HAMi's format: camelCase keys under `nvidia:`, other vendors'
sections and keys this side does not use are ignored. Values are checked and
a wrong one names its key. Reference: hami-protocol.md §1, §9.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_driver.engine.engine import EngineSettings
from dra_driver.engine.vendors import NVIDIA, ResourceNames, VendorAdapter, VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.node_lock import DEFAULT_LOCK_TIMEOUT

DEFAULT_SCHEDULER_NAME = "hami-scheduler"
"""The chart's `--scheduler-name`."""


class CorePolicy(StrEnum):
    """`gpuCorePolicy`: how libvgpu enforces the core limit."""

    DEFAULT = "default"
    FORCE = "force"
    DISABLE = "disable"


class NvidiaConfig(BaseModel):
    """The `nvidia:` section (Go `NvidiaConfig`); defaults are HAMi's."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    resource_count_name: str = Field(
        "nvidia.com/gpu",
        alias="resourceCountName",
        min_length=1,
        description="Resource a pod asks GPUs with (distinct cards).",
    )
    resource_memory_name: str = Field(
        "nvidia.com/gpumem",
        alias="resourceMemoryName",
        min_length=1,
        description="Resource for MiB per GPU (x memoryFactor).",
    )
    resource_memory_percentage_name: str = Field(
        "nvidia.com/gpumem-percentage",
        alias="resourceMemoryPercentageName",
        min_length=1,
        description="Resource for a percentage of each GPU's memory.",
    )
    resource_core_name: str = Field(
        "nvidia.com/gpucores",
        alias="resourceCoreName",
        min_length=1,
        description="Resource for percent of each GPU's SMs.",
    )
    resource_priority_name: str = Field(
        "nvidia.com/priority",
        alias="resourcePriorityName",
        min_length=1,
        description="Resource whose value becomes CUDA_TASK_PRIORITY.",
    )
    overwrite_env: bool = Field(
        False,
        alias="overwriteEnv",
        description="Containers without GPUs get NVIDIA_VISIBLE_DEVICES=none.",
    )
    default_memory: int = Field(0, alias="defaultMemory", ge=0, description="MiB per GPU")
    default_cores: int = Field(0, alias="defaultCores", ge=0, le=100, description="percent")
    default_gpu_num: int = Field(
        1,
        alias="defaultGPUNum",
        ge=0,
        description="GPUs the webhook adds when only memory/cores are asked.",
    )
    memory_factor: int = Field(
        1, alias="memoryFactor", ge=1, description="Multiplier of the memory resource's value."
    )
    device_split_count: int = Field(
        10, alias="deviceSplitCount", ge=1, description="Shares (tasks) per GPU."
    )
    device_memory_scaling: float = Field(
        1.0,
        alias="deviceMemoryScaling",
        gt=0,
        description="Registered memory = physical x this; above 1 oversubscribes.",
    )
    device_core_scaling: float = Field(
        1.0, alias="deviceCoreScaling", gt=0, description="Registered cores = 100 x this."
    )
    gpu_core_policy: CorePolicy = Field(CorePolicy.DEFAULT, alias="gpuCorePolicy")
    runtime_class_name: str = Field(
        "", alias="runtimeClassName", description="Set on GPU pods that name none."
    )

    def vendor(self) -> VendorAdapter:
        """The engine's NVIDIA adapter with this config's names and defaults."""
        return replace(
            NVIDIA,
            resources=ResourceNames(
                count=self.resource_count_name,
                memory=self.resource_memory_name,
                memory_percentage=self.resource_memory_percentage_name,
                cores=self.resource_core_name,
                priority=self.resource_priority_name,
            ),
            memory_factor=self.memory_factor,
            default_count=self.default_gpu_num,
            default_memory_mib=self.default_memory,
            default_cores=self.default_cores,
        )


class DeviceConfig(BaseModel):
    """The whole file; only the `nvidia:` section is used here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    nvidia: NvidiaConfig = Field(default_factory=NvidiaConfig)


def parse_device_config(document: Any, source: str = "device config") -> DeviceConfig:
    """Validate a loaded YAML document; an error names the key and the reason."""
    if document is None:
        return DeviceConfig()
    try:
        return DeviceConfig.model_validate(document)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "document"
        raise InvalidParameterError(f"{source}: {where}", first["msg"]) from None


def load_device_config(path: Path | None) -> DeviceConfig:
    """Read `device-config.yaml`; None means HAMi's defaults."""
    if path is None:
        return DeviceConfig()
    try:
        document = yaml.safe_load(path.read_text())
    except OSError as error:
        raise InvalidParameterError(str(path), f"cannot read: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise InvalidParameterError(str(path), f"not valid YAML: {error}") from None
    return parse_device_config(document, str(path))


@dataclass(frozen=True, slots=True)
class CallerAuthSettings:
    """Who may call /filter, /bind and /webhook (HAMi#3030: anyone in the cluster could bind).

    The extender's and the webhook's callers are told apart: kube-scheduler calls the first
    two, the API server's admission client the third, and the API server sends a client
    certificate only where its administrator configures one (never on EKS, GKE or AKS)."""

    enabled: bool = True
    """Off only for a loopback simulator or a test that does not exercise it."""
    allowed_callers: frozenset[str] = frozenset()
    """Usernames a TokenReview may answer and client-certificate CNs let into /filter and
    /bind (kube-scheduler's)."""
    allowed_webhook_callers: frozenset[str] = frozenset()
    """The same for /webhook (the API server's admission client)."""
    open_webhook: bool = False
    """/webhook answers any caller, for API servers that cannot present a client
    certificate: its answer has no side effect and goes back only to its caller
    (docs/security.md). /filter and /bind stay authenticated."""
    token_review_ttl: timedelta = timedelta(seconds=10)
    """How long a TokenReview answer is reused, so /filter does not wait on the API server
    every call; short, so a revoked token stops working soon."""


@dataclass(frozen=True, slots=True)
class LegacySettings:
    """Everything the extender and webhook are told (HAMi's scheduler flags + device config)."""

    device_config: DeviceConfig = field(default_factory=DeviceConfig)
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    engine: EngineSettings = field(default_factory=EngineSettings)
    node_lock_timeout: timedelta = DEFAULT_LOCK_TIMEOUT
    node_lock_retry_timeout: timedelta = timedelta(seconds=20)
    """How long a Bind waits for a node lock another pod holds (released by its Allocate)
    before failing; below kube-scheduler's extender httpTimeout (30 s in HAMi's chart)."""
    force_overwrite_default_scheduler: bool = True
    handshake_timeout: timedelta = timedelta(seconds=60)
    """A Requesting handshake older than this, with no allocatable GPUs, means the node's
    device plugin is gone (HAMi's CheckHealth)."""
    health_interval_s: float = 15.0
    """How often handshake ages are re-evaluated (HAMi's registration ticker)."""
    node_label_selector: str | None = None
    """Only nodes matching it are read (HAMi's `--node-label-selector`); others are unregistered."""
    caller_auth: CallerAuthSettings = field(default_factory=CallerAuthSettings)
    enforcement_opt_out_namespaces: frozenset[str] = frozenset()
    """Namespaces whose GPU containers may set `CUDA_DISABLE_CONTROL` and
    `GPU_CORE_UTILIZATION_POLICY` themselves: turning HAMi-core's enforcement off is an
    administrator's decision, so everywhere else the webhook refuses both."""

    @property
    def nvidia(self) -> NvidiaConfig:
        return self.device_config.nvidia

    def vendors(self) -> VendorRegistry:
        return VendorRegistry([self.nvidia.vendor()])
