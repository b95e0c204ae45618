"""VGPUConfig: parsing, error reporting by wire path, merging, and the exported JSON schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from api.vgpu_config import (
    API_VERSION,
    GPU_POLICIES,
    KIND,
    MAX_MEMORY_MIB,
    SCHEMA_PATH,
    VGPUConfigError,
    merge_configs,
    parse_vgpu_config,
    render_schema,
    vgpu_config_json_schema,
)

HEADER = {"apiVersion": API_VERSION, "kind": KIND}


def wire(**fields: Any) -> dict[str, Any]:
    return {**HEADER, **fields}


def test_full_config_parses_into_python_names() -> None:
    config = parse_vgpu_config(
        wire(
            memory="10Gi",
            cores=30,
            useTypes=["A100", "H100"],
            noUseTypes=["T4"],
            useUUIDs=["GPU-a"],
            noUseUUIDs=["GPU-b"],
            numaBind=True,
            gpuPolicy="binpack,numa",
            nodePolicy="spread",
            priority=0,
            coreLimitPolicy="force",
            disableControl=True,
        )
    )
    assert config.memory_mib == 10 * 1024
    assert config.cores == 30
    assert config.use_types == ["A100", "H100"]
    assert config.no_use_types == ["T4"]
    assert config.use_uuids == ["GPU-a"]
    assert config.no_use_uuids == ["GPU-b"]
    assert config.numa_bind is True
    assert config.gpu_policy == "binpack,numa"
    assert config.node_policy == "spread"
    assert config.priority == 0
    assert config.core_limit_policy == "force"
    assert config.disable_control is True


def test_unset_fields_take_defaults() -> None:
    config = parse_vgpu_config(HEADER)
    assert config.memory_mib is None
    assert config.memory_percentage is None
    assert config.core_limit_policy == "default"
    assert config.disable_control is False
    assert config.model_fields_set == {"api_version", "kind"}


@pytest.mark.parametrize(
    ("memory", "mib"),
    [("1Gi", 1024), ("1.5Gi", 1536), ("3000M", 2862), ("1", 1), ("100m", 1), (3 * 10**9, 2862)],
)
def test_memory_is_a_quantity_or_bytes_kept_as_mib_rounded_up(memory: str | int, mib: int) -> None:
    assert parse_vgpu_config(wire(memory=memory)).memory_mib == mib


def test_parameters_may_be_json_text_or_bytes() -> None:
    text = json.dumps(wire(memoryPercentage=50))
    assert parse_vgpu_config(text).memory_percentage == 50
    assert parse_vgpu_config(text.encode()).memory_percentage == 50


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"memoryPercentage": 0}, "parameters.memoryPercentage: must be between 1 and 100"),
        ({"memoryPercentage": 101}, "parameters.memoryPercentage: must be between 1 and 100"),
        ({"cores": -1}, "parameters.cores: must be between 0 and 100"),
        ({"cores": 101}, "parameters.cores: must be between 0 and 100"),
        ({"priority": 2}, "parameters.priority: must be between 0 and 1"),
        ({"cores": "30"}, "parameters.cores: must be an integer"),
        ({"cores": True}, "parameters.cores: must be an integer"),
        ({"numaBind": "true"}, "parameters.numaBind: must be a boolean"),
        ({"memory": "0"}, "parameters.memory: must be greater than 0"),
        ({"memory": 0}, "parameters.memory: must be greater than 0"),
        ({"memory": "-1Gi"}, "parameters.memory: must be greater than 0"),
        (
            {"memory": "10GB"},
            "parameters.memory: invalid quantity '10GB': unexpected character 'B'",
        ),
        ({"memory": "1e30"}, "parameters.memory: invalid quantity '1e30': exceeds"),
        ({"memory": "2Pi"}, f"parameters.memory: must be at most {MAX_MEMORY_MIB}Mi"),
        ({"memory": True}, "parameters.memory: must be a quantity string such as '10Gi'"),
        ({"memory": 1.5}, "parameters.memory: must be a quantity string such as '10Gi'"),
        ({"memory": None}, "parameters.memory: must not be null"),
        ({"useTypes": "A100"}, "parameters.useTypes: must be a list of strings"),
        ({"useTypes": ["A100", "a,b"]}, "parameters.useTypes[1]: must be non-empty and contain"),
        ({"noUseUUIDs": [""]}, "parameters.noUseUUIDs[0]: must be non-empty and contain no ','"),
        ({"gpuPolicy": "best"}, "parameters.gpuPolicy: must be one of binpack, spread"),
        ({"gpuPolicy": "binpack,"}, "parameters.gpuPolicy: must be one of binpack, spread"),
        ({"gpuPolicy": "binpack, numa"}, "parameters.gpuPolicy: must be one of binpack, spread"),
        ({"nodePolicy": "mutex"}, "parameters.nodePolicy: must be 'binpack' or 'spread'"),
        ({"coreLimitPolicy": "hard"}, "parameters.coreLimitPolicy: must be 'default', 'force'"),
        ({"memoryPercent": 50}, "parameters.memoryPercent: unknown field"),
        ({"memory_percentage": 50}, "parameters.memory_percentage: unknown field"),
        (
            {"memory": "1Gi", "memoryPercentage": 50},
            "parameters: memory and memoryPercentage are mutually exclusive",
        ),
    ],
)
def test_bad_fields_are_named_by_wire_path(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(VGPUConfigError) as caught:
        parse_vgpu_config(wire(**fields))
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            {"apiVersion": "vgpu.hami.io/v1", "kind": KIND},
            "parameters.apiVersion: must be 'vgpu.hami.io/v1alpha1', got 'vgpu.hami.io/v1'",
        ),
        (
            {"apiVersion": API_VERSION, "kind": "GpuConfig"},
            "parameters.kind: must be 'VGPUConfig', got 'GpuConfig'",
        ),
        ({"kind": KIND}, "parameters.apiVersion: required"),
        ({"apiVersion": API_VERSION}, "parameters.kind: required"),
        ("{", "parameters: not valid JSON"),
        ("[]", "parameters: must be an object"),
        (b"\xff", "parameters: not valid JSON"),
    ],
)
def test_the_discriminator_and_the_document_shape_are_checked(
    parameters: Any, message: str
) -> None:
    with pytest.raises(VGPUConfigError, match=r"^parameters") as caught:
        parse_vgpu_config(parameters)
    assert message in str(caught.value)


def test_every_problem_is_reported_once_with_its_path() -> None:
    with pytest.raises(VGPUConfigError) as caught:
        parse_vgpu_config(
            {"apiVersion": "x", "kind": KIND, "cores": 500, "extra": 1},
            path="spec.devices.config[0].opaque.parameters",
        )
    assert caught.value.problems == (
        (
            "spec.devices.config[0].opaque.parameters.apiVersion",
            "must be 'vgpu.hami.io/v1alpha1', got 'x'",
        ),
        ("spec.devices.config[0].opaque.parameters.cores", "must be between 0 and 100"),
        ("spec.devices.config[0].opaque.parameters.extra", "unknown field"),
    )


def test_allow_claim_opt_out_is_a_class_only_field() -> None:
    """A claim may not widen what claims may do: only an administrator's config (a
    DeviceClass) may set allowClaimOptOut, and a reader that does not say whose
    config it parses reads it as a claim's."""
    from_class = parse_vgpu_config(wire(allowClaimOptOut=True), from_class=True)
    assert from_class.allow_claim_opt_out
    assert from_class.to_wire() == wire(allowClaimOptOut=True)
    assert not parse_vgpu_config(wire(), from_class=True).allow_claim_opt_out
    for value in (True, False):
        with pytest.raises(VGPUConfigError) as caught:
            parse_vgpu_config(wire(allowClaimOptOut=value), path="spec.devices.config[0]")
        assert caught.value.problems == (
            (
                "spec.devices.config[0].allowClaimOptOut",
                "only a DeviceClass's config may set it, not a claim's",
            ),
        )


def test_configs_are_immutable() -> None:
    config = parse_vgpu_config(wire(cores=10))
    with pytest.raises(ValueError, match="frozen"):
        config.cores = 20  # type: ignore[misc]


def test_to_wire_keeps_only_set_fields_and_parses_back() -> None:
    config = parse_vgpu_config(wire(memory=3 * 10**9, useTypes=["A100"], disableControl=False))
    assert config.to_wire() == wire(memory="2862Mi", useTypes=["A100"], disableControl=False)
    assert parse_vgpu_config(config.to_wire()) == config


# ---------------------------------------------------------------------------
# Merging


def test_claim_overrides_class_only_where_it_sets_a_field() -> None:
    from_class = parse_vgpu_config(wire(cores=20, coreLimitPolicy="force", gpuPolicy="binpack"))
    from_claim = parse_vgpu_config(wire(cores=50, useTypes=["A100"]))
    merged = merge_configs([from_class], [from_claim])
    assert merged.cores == 50
    assert merged.core_limit_policy == "force"
    assert merged.gpu_policy == "binpack"
    assert merged.use_types == ["A100"]
    assert merged.to_wire() == wire(
        cores=50, coreLimitPolicy="force", gpuPolicy="binpack", useTypes=["A100"]
    )


def test_a_later_memory_setting_replaces_either_earlier_one() -> None:
    by_size = parse_vgpu_config(wire(memory="8Gi"))
    by_share = parse_vgpu_config(wire(memoryPercentage=25))
    merged = merge_configs([by_size], [by_share])
    assert (merged.memory_mib, merged.memory_percentage) == (None, 25)
    merged = merge_configs([by_share], [by_size])
    assert (merged.memory_mib, merged.memory_percentage) == (8192, None)
    assert merge_configs([by_size, parse_vgpu_config(wire(cores=5))], []).memory_mib == 8192


def test_later_entries_win_within_each_source() -> None:
    first = parse_vgpu_config(wire(priority=1))
    second = parse_vgpu_config(wire(priority=0))
    assert merge_configs([first, second], []).priority == 0
    assert merge_configs([], [second, first]).priority == 1


def test_merging_nothing_gives_the_defaults() -> None:
    assert merge_configs([], []) == parse_vgpu_config(HEADER)


# ---------------------------------------------------------------------------
# JSON schema


def test_committed_schema_is_what_the_model_produces() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == render_schema(), (
        "regenerate with `python -m api.vgpu_config`"
    )


VALIDATOR = Draft202012Validator(vgpu_config_json_schema())


@pytest.mark.parametrize(
    "parameters",
    [
        HEADER,
        wire(memory="10Gi", cores=30, gpuPolicy="topology-aware"),
        wire(memory=1073741824, nodePolicy="binpack", priority=1),
        wire(memoryPercentage=100, useUUIDs=["GPU-a", "GPU-b"], numaBind=False),
        wire(coreLimitPolicy="disable", disableControl=True, gpuPolicy="spread,numa,mutex"),
        wire(memory="+1.5e3"),
        {"kind": KIND},
        {"apiVersion": "v1", "kind": KIND},
        {"apiVersion": API_VERSION, "kind": "Other"},
        wire(extra=True),
        wire(memoryPercentage=0),
        wire(memoryPercentage=101),
        wire(cores=101),
        wire(priority=-1),
        wire(memory="1Gi", memoryPercentage=10),
        wire(memory=0),
        wire(memory="1 Gi"),
        wire(memory="1KB"),
        wire(memory=True),
        wire(cores=None),
        wire(cores="10"),
        wire(useTypes=["a,b"]),
        wire(useTypes=[""]),
        wire(gpuPolicy="binpack;numa"),
        wire(nodePolicy="topology-aware"),
        wire(coreLimitPolicy="hard"),
        wire(numaBind=1),
    ],
)
def test_schema_and_model_agree(parameters: dict[str, Any]) -> None:
    schema_accepts = VALIDATOR.is_valid(parameters)
    try:
        parse_vgpu_config(parameters)
    except VGPUConfigError:
        model_accepts = False
    else:
        model_accepts = True
    assert schema_accepts == model_accepts


_selectors = st.lists(
    st.text(st.characters(exclude_characters=",", exclude_categories=["Cs"]), min_size=1),
    max_size=3,
)
_valid_fields = st.fixed_dictionaries(
    {},
    optional={
        "memory": st.one_of(
            st.integers(min_value=1, max_value=MAX_MEMORY_MIB * 2**20),
            st.builds("{}{}".format, st.integers(1, 2**20), st.sampled_from(["Ki", "Mi", "Gi"])),
        ),
        "cores": st.integers(0, 100),
        "useTypes": _selectors,
        "noUseTypes": _selectors,
        "useUUIDs": _selectors,
        "noUseUUIDs": _selectors,
        "numaBind": st.booleans(),
        "gpuPolicy": st.lists(st.sampled_from(GPU_POLICIES), min_size=1, max_size=3).map(",".join),
        "nodePolicy": st.sampled_from(["binpack", "spread"]),
        "priority": st.integers(0, 1),
        "coreLimitPolicy": st.sampled_from(["default", "force", "disable"]),
        "disableControl": st.booleans(),
    },
)


@given(_valid_fields, st.one_of(st.none(), st.integers(1, 100)))
def test_valid_configs_pass_both_and_survive_the_wire(
    fields: dict[str, Any], percentage: int | None
) -> None:
    if percentage is not None:
        fields = {key: value for key, value in fields.items() if key != "memory"}
        fields["memoryPercentage"] = percentage
    parameters = wire(**fields)
    assert VALIDATOR.is_valid(parameters)
    config = parse_vgpu_config(parameters)
    assert parse_vgpu_config(config.to_wire()) == config
    assert set(config.to_wire()) == set(parameters)
