"""The inventory file `dra-driver explain` reads: nodes, devices, usage, quotas.

YAML or JSON, validated with pydantic so every mistake names its field; the
JSON Schema is exported for docs (`dra-driver explain --print-schema`).
Later the same model is filled from the live cluster instead of a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.hami_annotations import (
    DEVICE_CORDON,
    NODE_NVIDIA_SCORE,
    AnnotationDecodeError,
    decode_pair_scores,
)
from api.quantity import QuantityError, parse_quantity
from dra_driver.engine.model import (
    DEFAULT_SPLIT_COUNT,
    HAMI_CORE_MODE,
    Device,
    DeviceUsage,
    Node,
    NodeConfig,
    apply_node_config,
)
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.yaml_files import read_yaml_document


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class UsageSpec(_Strict):
    """What shares already granted on the device consume."""

    slots: int = Field(0, ge=0, description="Slots in use (shares on the device).")
    memory: int = Field(0, ge=0, description="MiB in use.")
    cores: int = Field(0, ge=0, description="Core percent in use.")


class DeviceSpec(_Strict):
    """One GPU as registered by its node's device plugin or DRA plugin."""

    id: str = Field(min_length=1, description="Device UUID, e.g. GPU-5b1c0c7e-....")
    index: int = Field(ge=0, description="Device index on the node.")
    type: str = Field(min_length=1, description="Vendor type string, e.g. NVIDIA-A100-SXM4-80GB.")
    memory: int = Field(gt=0, description="Total memory in MiB (before memory scaling).")
    cores: int = Field(100, ge=0, description="Total cores: 100 x core scaling.")
    split_count: int = Field(
        DEFAULT_SPLIT_COUNT, alias="splitCount", ge=1, description="Concurrent shares allowed."
    )
    numa: int = Field(0, ge=0, description="NUMA node.")
    healthy: bool = Field(True, description="False keeps every new share off the device.")
    mode: str = Field(HAMI_CORE_MODE, description="hami-core, mig or mps.")
    usage: UsageSpec = Field(default_factory=UsageSpec)


class FilterDevicesSpec(_Strict):
    uuids: list[str] = Field(default_factory=list, description="Device UUIDs not to register.")
    indices: list[int] = Field(default_factory=list, description="Device indices not to register.")


class NodeConfigSpec(_Strict):
    """Per-node overrides, as in HAMi's device-plugin `nodeconfig`."""

    split_count: int | None = Field(None, alias="splitCount", ge=1)
    memory_scaling: float | None = Field(None, alias="memoryScaling", gt=0)
    core_scaling: float | None = Field(None, alias="coreScaling", gt=0)
    filter_devices: FilterDevicesSpec = Field(
        default_factory=FilterDevicesSpec, alias="filterDevices"
    )


class NodeSpec(_Strict):
    """A node: its devices and the annotations the engine reads (cordon list,
    topology pair scores)."""

    name: str = Field(min_length=1)
    annotations: dict[str, str] = Field(default_factory=dict)
    config: NodeConfigSpec = Field(default_factory=NodeConfigSpec)
    devices: list[DeviceSpec] = Field(default_factory=list)


class QuotaSpec(_Strict):
    """A namespace ResourceQuota: `hard` and `used` keyed like the real object
    (`limits.nvidia.com/gpumem`, `limits.nvidia.com/gpucores`)."""

    namespace: str = Field(min_length=1)
    hard: dict[str, int | str] = Field(default_factory=dict)
    used: dict[str, int | str] = Field(default_factory=dict)


class PoliciesSpec(_Strict):
    gpu: str = Field("spread", description="Default GPU policy (--gpu-scheduler-policy).")
    node: str = Field("binpack", description="Default node policy (--node-scheduler-policy).")


class InventorySpec(_Strict):
    """Top level of an inventory file."""

    nodes: list[NodeSpec] = Field(min_length=1)
    quotas: list[QuotaSpec] = Field(default_factory=list)
    policies: PoliciesSpec = Field(default_factory=PoliciesSpec)


class Inventory:
    """The engine's inputs built from an InventorySpec."""

    def __init__(
        self,
        nodes: list[Node],
        usage: dict[str, dict[str, DeviceUsage]],
        quota: QuotaLedger,
        policies: PoliciesSpec,
    ) -> None:
        self.nodes = nodes
        self.usage = usage
        self.quota = quota
        self.policies = policies


def inventory_schema() -> dict[str, Any]:
    return InventorySpec.model_json_schema(by_alias=True)


def load_inventory(path: Path, vendors: VendorRegistry) -> Inventory:
    return build_inventory(read_yaml_document(path), vendors, source=str(path))


def build_inventory(document: Any, vendors: VendorRegistry, source: str = "inventory") -> Inventory:
    try:
        spec = InventorySpec.model_validate(document)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc']) or '(top level)'}: {issue['msg']}"
            for issue in error.errors()
        )
        raise InvalidParameterError(source, problems) from None
    nodes, usage = [], {}
    for node_spec in spec.nodes:
        node, node_usage = _node(node_spec, source)
        nodes.append(node)
        usage[node.name] = node_usage
    quota = QuotaLedger()
    for quota_spec in spec.quotas:
        for vendor in vendors:
            entry = _vendor_quota(quota_spec, vendor.resources, vendor.memory_factor, source)
            if entry is not None:
                quota.quotas[(quota_spec.namespace, vendor.name)] = entry
    return Inventory(nodes, usage, quota, spec.policies)


def _node(spec: NodeSpec, source: str) -> tuple[Node, dict[str, DeviceUsage]]:
    devices = tuple(
        Device(
            id=d.id,
            index=d.index,
            type=d.type,
            count=d.split_count,
            memory_mib=d.memory,
            cores=d.cores,
            numa=d.numa,
            healthy=d.healthy,
            mode=d.mode,
        )
        for d in spec.devices
    )
    config = NodeConfig(
        split_count=spec.config.split_count,
        memory_scaling=spec.config.memory_scaling,
        core_scaling=spec.config.core_scaling,
        filtered_uuids=frozenset(spec.config.filter_devices.uuids),
        filtered_indices=frozenset(spec.config.filter_devices.indices),
    )
    cordoned = frozenset(
        item.strip() for item in spec.annotations.get(DEVICE_CORDON, "").split(",") if item.strip()
    )
    node = Node(
        name=spec.name,
        devices=apply_node_config(devices, config),
        cordoned=cordoned,
        pair_scores=_pair_scores(spec, source),
    )
    usage = {
        d.id: DeviceUsage(d.usage.slots, d.usage.memory, d.usage.cores)
        for d in spec.devices
        if d.usage != UsageSpec()
    }
    return node, usage


def _pair_scores(spec: NodeSpec, source: str) -> Mapping[str, Mapping[str, int]]:
    raw = spec.annotations.get(NODE_NVIDIA_SCORE)
    if not raw:
        return {}
    try:
        return decode_pair_scores(raw)
    except AnnotationDecodeError as error:
        raise InvalidParameterError(
            f"{source}: nodes[{spec.name}].annotations.{NODE_NVIDIA_SCORE}", str(error)
        ) from None


def _vendor_quota(spec: QuotaSpec, resources, memory_factor: int, source: str):
    memory_key, cores_key = f"limits.{resources.memory}", f"limits.{resources.cores}"
    if memory_key not in spec.hard and cores_key not in spec.hard:
        return None

    def amount(table: Mapping[str, int | str], key: str, factor: int = 1) -> int | None:
        if key not in table:
            return None
        try:
            return int(parse_quantity(str(table[key]))) * factor
        except QuantityError as error:
            raise InvalidParameterError(
                f"{source}: quotas[{spec.namespace}].{key}", error.reason
            ) from None

    return NamespaceQuota(
        memory_limit_mib=amount(spec.hard, memory_key, memory_factor),
        cores_limit=amount(spec.hard, cores_key),
        memory_used_mib=amount(spec.used, memory_key, memory_factor) or 0,
        cores_used=amount(spec.used, cores_key) or 0,
    )
