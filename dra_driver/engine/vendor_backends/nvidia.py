"""NVIDIA: HAMi's reference vendor, and the `nvidia:` section of device-config.yaml.

Its requests are read by `dra_driver.objects.pod_workloads` and fitted by the
engine's standard Fit (both of which the other vendors share); what is left
for the backend is the webhook's NVIDIA changes, the register annotation
(JSON or the legacy colon list), the generic handshake on
`hami.io/node-handshake`, the shared node lock and the `hami.io/vgpu-*` pod
keys. Reference: hami-protocol.md §1, §4, §5, §9.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum
from typing import Any

from pydantic import Field

from api import hami_annotations as keys
from dra_driver.engine.requests import PodRequest
from dra_driver.engine.vendor_backends.adapters import ConfigSection
from dra_driver.engine.vendor_backends.base import BackendFamily, ContainerMutation, VendorBackend
from dra_driver.engine.vendors import NVIDIA, ResourceNames, VendorAdapter
from dra_driver.objects.pod_workloads import admission_limits

VISIBLE_DEVICES_ENV = "NVIDIA_VISIBLE_DEVICES"


class CorePolicy(StrEnum):
    """`gpuCorePolicy`: how libvgpu enforces the core limit."""

    DEFAULT = "default"
    FORCE = "force"
    DISABLE = "disable"


class NvidiaConfig(ConfigSection):
    """The `nvidia:` section (Go `NvidiaConfig`); defaults are HAMi's."""

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


class NvidiaBackend(VendorBackend):
    """HAMi's NVIDIA backend with one `nvidia:` section's names and switches."""

    empty_register_is_unregistered = False
    """A register listing no GPU leaves a node with no devices (NodeHasNoDevices), as
    this scheduler has always read it."""

    def __init__(self, config: NvidiaConfig | None = None) -> None:
        self.config = config or NvidiaConfig()
        super().__init__(
            self.config.vendor(),
            register_key=keys.NODE_NVIDIA_REGISTER,
            handshake_key=keys.NODE_HANDSHAKE,
        )

    @property
    def runtime_class_name(self) -> str:
        return self.config.runtime_class_name

    def needs_lock(self, request: PodRequest) -> bool:
        """Any container with GPUs, init containers included (HAMi looks at app
        containers only): this project's device plugin finds the pod it serves,
        init containers' GPUs too, through the lock's owner."""
        return any(
            r.vendor == self.name and r.count > 0 for ctr in request.all_containers for r in ctr
        )

    def mutate(
        self, container: Mapping[str, Any], pod: Mapping[str, Any], where: str
    ) -> ContainerMutation:
        """NVIDIA's MutateAdmission: the default count and exclusive cores, and
        `NVIDIA_VISIBLE_DEVICES=none` for a container without GPUs under
        `overwriteEnv`. HAMi-core's knobs (priority, core policy) and the
        percentage's range are the webhook's own (`controller.legacy.admission`)."""
        names = self.adapter.resources
        resources = container.get("resources") or {}
        limits = resources.get("limits") or {}
        added = admission_limits(self.adapter, limits, resources.get("requests") or {}, where)
        has_gpu = names.count in {**limits, **added}
        env: list[dict[str, str]] = []
        if not has_gpu and self.config.overwrite_env:
            env.append({"name": VISIBLE_DEVICES_ENV, "value": "none"})
        return ContainerMutation(has_gpu, limits=added, env=tuple(env))


FAMILY = BackendFamily(
    section="nvidia",
    model=NvidiaConfig,
    build=lambda config: (NvidiaBackend(config),),
    default={},
    always=True,
)
