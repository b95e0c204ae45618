"""Opaque claim parameters of the vGPU driver: `VGPUConfig`, with one validator for every reader.

DeviceClasses and ResourceClaims carry these under `config[].opaque.parameters`.
The controller reads them to allocate and the kubelet plugin to set the
container's limits; both go through `parse_vgpu_config`, so a config is
accepted, rejected and reported the same way everywhere. The settings mirror
what HAMi takes from resources and pod annotations (`nvidia.com/gpumem`,
`nvidia.com/use-gputype`, `hami.io/gpu-scheduler-policy`, ...).

`python -m api.vgpu_config` rewrites `api/schemas/vgpuconfig.schema.json`.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_serializer,
    field_validator,
    model_validator,
)
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema

from api.quantity import MIB, QuantityError, parse_quantity, to_mib_ceil

API_VERSION = "vgpu.hami.io/v1alpha1"
KIND = "VGPUConfig"
GPU_POLICIES = ("binpack", "spread", "topology-aware", "mutex", "numa")
SCHEMA_PATH = Path(__file__).resolve().parent / "schemas" / "vgpuconfig.schema.json"

# HAMi keeps memory as int32 MiB in its requests and annotations.
MAX_MEMORY_MIB = (1 << 31) - 1

# Inclusive ranges, by wire name: the schema bounds and the error text come from here.
_RANGES = {"memoryPercentage": (1, 100), "cores": (0, 100), "priority": (0, 1)}

_SELECTOR_ITEM_PATTERN = r"^[^,]+$"
_GPU_POLICY = "(" + "|".join(GPU_POLICIES) + ")"
_GPU_POLICY_PATTERN = rf"^{_GPU_POLICY}(,{_GPU_POLICY})*$"
_QUANTITY_PATTERN = r"^\+?([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
_PATTERN_REASONS = {
    _SELECTOR_ITEM_PATTERN: "must be non-empty and contain no ','",
    _GPU_POLICY_PATTERN: "must be one of " + ", ".join(GPU_POLICIES) + ", or a comma-separated"
    " chain of them (e.g. 'binpack,numa')",
}
_MEMORY_FIELDS = frozenset({"memory_mib", "memory_percentage"})


class VGPUConfigError(ValueError):
    """Parameters that are not a valid VGPUConfig; `problems` lists (wire path, reason)."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in self.problems))


def _memory_to_mib(value: object) -> int:
    """A quantity string or a byte count, as whole MiB rounded up."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("must be a quantity string such as '10Gi' or an integer number of bytes")
    if isinstance(value, int):
        if value <= 0:
            raise ValueError("must be greater than 0")
        mib = -(-value // MIB)
    else:
        try:
            if parse_quantity(value) <= 0:
                raise ValueError("must be greater than 0")
            mib = to_mib_ceil(value)
        except QuantityError as error:
            raise ValueError(str(error)) from None
    if mib > MAX_MEMORY_MIB:
        raise ValueError(f"must be at most {MAX_MEMORY_MIB}Mi")
    return mib


def _ranged(wire_name: str, description: str) -> Any:
    low, high = _RANGES[wire_name]
    return Field(default=None, alias=wire_name, ge=low, le=high, description=description)


_MemoryMiB = Annotated[
    int,
    BeforeValidator(_memory_to_mib),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "pattern": _QUANTITY_PATTERN},
                {"type": "integer", "minimum": 1, "maximum": MAX_MEMORY_MIB * MIB},
            ]
        }
    ),
]
_SelectorList = list[Annotated[str, StringConstraints(strict=True, pattern=_SELECTOR_ITEM_PATTERN)]]
_GpuPolicy = Annotated[str, StringConstraints(strict=True, pattern=_GPU_POLICY_PATTERN)]


class VGPUConfig(BaseModel):
    """Per-claim vGPU settings (opaque parameters of the vgpu.hami.io driver).

    A field left out means "not set": class defaults, then driver defaults,
    apply. `memory` and `memoryPercentage` are exclusive ways to size the
    share of each GPU.
    """

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        json_schema_extra={"not": {"required": ["memory", "memoryPercentage"]}},
    )

    api_version: Literal["vgpu.hami.io/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["VGPUConfig"]
    memory_mib: _MemoryMiB | None = Field(
        default=None,
        alias="memory",
        description="Memory per GPU: a Kubernetes quantity ('10Gi') or a number of bytes;"
        " kept as MiB, rounded up. Unlike HAMi's nvidia.com/gpumem, a bare number is bytes.",
    )
    memory_percentage: StrictInt | None = _ranged(
        "memoryPercentage",
        "Memory per GPU as a percentage of the card's memory.",
    )
    cores: StrictInt | None = _ranged(
        "cores",
        "Percent of each GPU's SMs (CUDA_DEVICE_SM_LIMIT); 100 takes the card alone.",
    )
    use_types: _SelectorList | None = Field(
        default=None,
        alias="useTypes",
        description="Only GPUs whose type contains one of these (case-insensitive), as"
        " nvidia.com/use-gputype.",
    )
    no_use_types: _SelectorList | None = Field(
        default=None,
        alias="noUseTypes",
        description="Never GPUs whose type contains one of these, as nvidia.com/nouse-gputype.",
    )
    use_uuids: _SelectorList | None = Field(
        default=None,
        alias="useUUIDs",
        description="Only these GPU UUIDs, as nvidia.com/use-gpuuuid.",
    )
    no_use_uuids: _SelectorList | None = Field(
        default=None,
        alias="noUseUUIDs",
        description="Never these GPU UUIDs, as nvidia.com/nouse-gpuuuid.",
    )
    numa_bind: StrictBool | None = Field(
        default=None,
        alias="numaBind",
        description="All GPUs of the request on one NUMA node, as nvidia.com/numa-bind.",
    )
    gpu_policy: _GpuPolicy | None = Field(
        default=None,
        alias="gpuPolicy",
        description="GPU choice within a node, as hami.io/gpu-scheduler-policy.",
    )
    node_policy: Literal["binpack", "spread"] | None = Field(
        default=None,
        alias="nodePolicy",
        description="Node choice, as hami.io/node-scheduler-policy.",
    )
    priority: StrictInt | None = _ranged(
        "priority",
        "CUDA_TASK_PRIORITY: 0 is high, 1 is low (HAMi's two classes; lower"
        " value = higher priority). libvgpu's default is 1.",
    )
    core_limit_policy: Literal["default", "force", "disable"] = Field(
        default="default",
        alias="coreLimitPolicy",
        description="GPU_CORE_UTILIZATION_POLICY: 'default' throttles while libvgpu's"
        " utilization switch is on (HAMi's monitor may turn it off), 'force' always"
        " throttles, 'disable' never does (an opt-out, honoured as disableControl is).",
    )
    disable_control: StrictBool = Field(
        default=False,
        alias="disableControl",
        description="Do not preload libvgpu.so (CUDA_DISABLE_CONTROL): no limits enforced."
        " Honoured from a DeviceClass's config; from a claim's only where the class's"
        " allowClaimOptOut or the kubelet plugin's --allow-claim-opt-out allows it.",
    )
    allow_claim_opt_out: StrictBool = Field(
        default=False,
        alias="allowClaimOptOut",
        description="DeviceClass config only: the claims of the requests this config applies"
        " to may set disableControl and coreLimitPolicy: disable themselves. A claim's own"
        " config that sets this is refused.",
    )

    @field_validator("*", mode="before")
    @classmethod
    def _reject_null(cls, value: object) -> object:
        if value is None:
            raise ValueError("must not be null; leave the field out instead")
        return value

    @model_validator(mode="after")
    def _memory_sized_once(self) -> VGPUConfig:
        if self.memory_mib is not None and self.memory_percentage is not None:
            raise ValueError("memory and memoryPercentage are mutually exclusive")
        return self

    @field_serializer("memory_mib")
    def _memory_as_quantity(self, value: int | None) -> str | None:
        return None if value is None else f"{value}Mi"

    def to_wire(self) -> dict[str, Any]:
        """The parameters object, with only the fields that were set, that parses back to self."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


CLASS_ONLY_FIELDS = ("allowClaimOptOut",)
"""Wire names only a DeviceClass's config may set: they widen what claims may do."""


def parse_vgpu_config(
    parameters: Mapping[str, Any] | bytes | str,
    path: str = "parameters",
    *,
    from_class: bool = False,
) -> VGPUConfig:
    """Validate opaque parameters; errors name each bad field by its wire path under `path`.

    `from_class` says an administrator wrote them (a DeviceClass's `spec.config`, or an
    allocation config entry with `source: FromClass`); anything else is read as a
    claim's, which may not set `CLASS_ONLY_FIELDS`. Unknown origin is a claim's, so a
    reader that forgets to say fails closed.
    """
    if isinstance(parameters, bytes | str):
        try:
            parameters = json.loads(parameters)
        except ValueError as error:
            raise VGPUConfigError([(path, f"not valid JSON: {error}")]) from None
    if not isinstance(parameters, Mapping):
        raise VGPUConfigError([(path, "must be an object")])
    try:
        config = VGPUConfig.model_validate(dict(parameters))
    except ValidationError as error:
        problems = [(_wire_path(path, e["loc"]), _reason(e)) for e in error.errors()]
        raise VGPUConfigError(problems) from None
    if not from_class:
        refused = [name for name in CLASS_ONLY_FIELDS if name in parameters]
        if refused:
            raise VGPUConfigError(
                [
                    (f"{path}.{name}", "only a DeviceClass's config may set it, not a claim's")
                    for name in refused
                ]
            )
    return config


def merge_configs(
    class_configs: Iterable[VGPUConfig], claim_configs: Iterable[VGPUConfig]
) -> VGPUConfig:
    """Apply configs in order, class first: each later one overrides only the fields it set.

    `memory` and `memoryPercentage` count as one setting: a later config
    that sets either replaces whichever an earlier one set.
    """
    merged: dict[str, Any] = {}
    for config in itertools.chain(class_configs, claim_configs):
        explicit = config.model_fields_set
        if explicit & _MEMORY_FIELDS:
            for name in _MEMORY_FIELDS:
                merged.pop(name, None)
        merged.update({name: getattr(config, name) for name in explicit})
    merged.update(api_version=API_VERSION, kind=KIND)
    return VGPUConfig.model_construct(_fields_set=set(merged), **merged)


def enforcement_opt_outs(config: VGPUConfig) -> tuple[str, ...]:
    """Wire names of the fields that turn libvgpu's enforcement off; readers allow them
    only where an administrator wrote them or allowed them (a DeviceClass's config, its
    `allowClaimOptOut`), since they lift limits."""
    opt_outs = []
    if config.disable_control:
        opt_outs.append("disableControl")
    if config.core_limit_policy == "disable":
        opt_outs.append("coreLimitPolicy")
    return tuple(opt_outs)


def explicit_wire_fields(config: VGPUConfig) -> frozenset[str]:
    """Wire names of the fields the config sets itself (the ones a merge takes from it)."""
    return frozenset(
        VGPUConfig.model_fields[name].alias or name for name in config.model_fields_set
    )


def without_opt_outs(config: VGPUConfig) -> VGPUConfig:
    """The config with its enforcement opt-outs unset, so earlier configs and defaults apply."""
    by_alias = {field.alias: name for name, field in VGPUConfig.model_fields.items()}
    dropped = {by_alias[wire] for wire in enforcement_opt_outs(config)}
    kept = config.model_fields_set - dropped
    return VGPUConfig.model_construct(
        _fields_set=kept, **{name: getattr(config, name) for name in kept}
    )


def _wire_path(prefix: str, location: tuple[int | str, ...]) -> str:
    path = prefix
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _reason(error: ErrorDetails) -> str:
    kind = error["type"]
    context = error.get("ctx", {})
    field = error["loc"][0] if error["loc"] else ""
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    if kind == "literal_error":
        return f"must be {context['expected']}, got {error['input']!r}"
    if kind in ("greater_than_equal", "less_than_equal") and field in _RANGES:
        low, high = _RANGES[str(field)]
        return f"must be between {low} and {high}"
    if kind == "string_pattern_mismatch":
        return _PATTERN_REASONS[context["pattern"]]
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return "must be an integer"
    if kind in ("bool_type", "bool_parsing"):
        return "must be a boolean"
    if kind == "string_type":
        return "must be a string"
    if kind == "list_type":
        return "must be a list of strings"
    if kind == "value_error":
        return str(context["error"])
    return error["msg"]


class _WireJsonSchema(GenerateJsonSchema):
    """Fields are optional by absence, never by null (the model rejects null)."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


def vgpu_config_json_schema() -> dict[str, Any]:
    """JSON schema of the wire form. It checks a memory string's syntax only; that
    its value is positive and fits in MAX_MEMORY_MIB is the model's check."""
    schema = VGPUConfig.model_json_schema(by_alias=True, schema_generator=_WireJsonSchema)
    for prop in schema["properties"].values():
        del prop["title"]
        if "default" in prop and prop["default"] is None:
            del prop["default"]
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render_schema() -> str:
    return json.dumps(vgpu_config_json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_PATH.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA_PATH.write_text(render_schema(), encoding="utf-8")
    print(f"wrote {SCHEMA_PATH}")
