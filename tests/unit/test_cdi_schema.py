"""The reference CDI JSON Schema as the judge of the builder and the in-code validator.

The schema is loaded with its `defs.json` through a referencing registry and
shown to be wired (its good examples pass, its bad ones and a spec that only
a resolved `$ref` can catch fail). Then every spec the builder makes must
pass both, and on mutated specs the in-code validator must refuse whatever
the schema refuses; it refuses more, because the schema leaves kind, names,
env entries and paths unchecked and the runtime does not.
"""

from __future__ import annotations

import copy
import functools
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft7Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

from cdi.errors import InvalidCdiSpecError
from cdi.spec import (
    CDI_VERSION,
    NVIDIA_CONTROL_DEVICE_NODES,
    ClaimDeviceEdits,
    build_claim_spec,
    nvidia_device_node,
)
from cdi.validate import minimum_cdi_version, validate_claim_spec, validate_spec_document
from libvgpu.container_edits import ContainerEdits, EnvVar, Mount

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "cdi-schema"
"""The CDI project's JSON Schema and its examples, vendored (Apache-2.0, see LICENSE there)."""


@functools.cache
def schema() -> Draft7Validator:
    document = json.loads((SCHEMA_DIR / "schema.json").read_text())
    definitions = json.loads((SCHEMA_DIR / "defs.json").read_text())
    Draft7Validator.check_schema(document)
    registry: Registry = Registry().with_resource(
        "defs.json", Resource.from_contents(definitions, default_specification=DRAFT7)
    )
    return Draft7Validator(document, registry=registry)


def accepted_by_us(document: object) -> bool:
    try:
        validate_spec_document(document)
    except InvalidCdiSpecError:
        return False
    return True


@pytest.mark.parametrize("path", sorted((SCHEMA_DIR / "testdata" / "good").glob("*.json")))
def test_the_schemas_good_examples_pass(path: Path):
    assert schema().is_valid(json.loads(path.read_text()))


@pytest.mark.parametrize("path", sorted((SCHEMA_DIR / "testdata" / "bad").glob("*.json")))
def test_the_schemas_bad_examples_fail(path: Path):
    text = path.read_text()
    if not text.strip():
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
        return
    document = json.loads(text)
    assert not schema().is_valid(document)
    assert not accepted_by_us(document)


def test_refs_into_defs_json_are_resolved():
    document = json.loads((SCHEMA_DIR / "testdata" / "good" / "minimal.json").read_text())
    document["devices"][0]["containerEdits"]["deviceNodes"] = [{"hostPath": "/dev/card1"}]
    messages = [error.message for error in schema().iter_errors(document)]
    assert messages == ["'path' is a required property"]


def test_our_validator_takes_the_minimal_example_and_refuses_fields_we_never_write():
    good = SCHEMA_DIR / "testdata" / "good"
    assert accepted_by_us(json.loads((good / "minimal.json").read_text()))
    with pytest.raises(InvalidCdiSpecError, match="unsupported"):
        validate_spec_document(json.loads((good / "spec-example.json").read_text()))


labels = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,10}[a-z0-9])?", fullmatch=True)
env_names = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True)
env_values = st.text(
    st.characters(codec="utf-8", exclude_categories=["Cs"], exclude_characters="\0"), max_size=20
)
absolute_paths = st.lists(
    st.from_regex(r"[A-Za-z0-9._-]{1,8}", fullmatch=True), min_size=1, max_size=4
).map(lambda parts: "/" + "/".join(parts))
libvgpu_edits = st.builds(
    ContainerEdits,
    env=st.lists(st.builds(EnvVar, env_names, env_values), min_size=1, max_size=4).map(tuple),
    mounts=st.lists(
        st.builds(Mount, absolute_paths, absolute_paths, st.booleans()), max_size=3
    ).map(tuple),
)


@st.composite
def claim_results(draw: st.DrawFn) -> list[ClaimDeviceEdits]:
    results = []
    for device in draw(st.lists(labels, min_size=1, max_size=3, unique=True)):
        shares = draw(st.integers(1, 3))
        share_ids = draw(st.lists(st.uuids(), min_size=shares, max_size=shares, unique=True))
        minor = draw(st.integers(0, 255))
        for share_id in share_ids:
            with_share = shares > 1 or draw(st.booleans())
            results.append(
                ClaimDeviceEdits(
                    device, minor, draw(libvgpu_edits), str(share_id) if with_share else None
                )
            )
    return draw(st.permutations(results))


def host_nodes(results: list[ClaimDeviceEdits]) -> dict[str, str]:
    """Every node the results need, some at another host path."""
    paths = [*NVIDIA_CONTROL_DEVICE_NODES, *(nvidia_device_node(r.gpu_minor) for r in results)]
    return {path: ("/host" + path if len(path) % 2 else path) for path in paths}


built_documents = st.builds(
    lambda uid, results, nodes: build_claim_spec(
        str(uid), results, host_nodes=host_nodes(results) if nodes else None
    ).to_document(),
    st.uuids(),
    claim_results(),
    st.booleans(),
)


@settings(max_examples=150)
@given(st.uuids(), claim_results(), st.booleans())
def test_every_built_spec_passes_the_schema_and_our_validator(
    uid: uuid.UUID, results: list[ClaimDeviceEdits], with_device_nodes: bool
):
    spec = build_claim_spec(
        str(uid), results, host_nodes=host_nodes(results) if with_device_nodes else None
    )
    document = json.loads(spec.to_json())
    assert document == spec.to_document()
    assert list(schema().iter_errors(document)) == []
    validate_claim_spec(spec)
    names = [device["name"] for device in document["devices"]]
    assert len(set(names)) == len(results)
    assert all(name.startswith(f"{uid}-") for name in names)
    host_path = any(
        "hostPath" in node
        for edits in [document.get("containerEdits", {})]
        + [d["containerEdits"] for d in document["devices"]]
        for node in edits.get("deviceNodes", [])
    )
    needed = "0.3.0" if str(uid)[0].isalpha() and not host_path else "0.5.0"
    assert minimum_cdi_version(document) == needed
    assert document["cdiVersion"] == CDI_VERSION == "0.5.0"


def first_edits(document: dict[str, Any]) -> dict[str, Any]:
    return document["devices"][0]["containerEdits"]


def first_mount(document: dict[str, Any]) -> dict[str, Any]:
    mounts = first_edits(document).setdefault("mounts", [])
    if not mounts:
        mounts.append({"hostPath": "/h", "containerPath": "/c"})
    return mounts[0]


@dataclass(frozen=True)
class Mutation:
    name: str
    apply: Callable[[Any], Any]
    """Returns the mutated document (it may replace it)."""

    schema_refuses: bool


def _set(target: Callable[[Any], dict[str, Any]], key: str, value: object) -> Callable[[Any], Any]:
    def apply(document: Any) -> Any:
        target(document)[key] = value
        return document

    return apply


def _drop(target: Callable[[Any], dict[str, Any]], key: str) -> Callable[[Any], Any]:
    def apply(document: Any) -> Any:
        del target(document)[key]
        return document

    return apply


def _top(document: Any) -> Any:
    return document


def _device(document: Any) -> Any:
    return document["devices"][0]


def _duplicate_device(document: Any) -> Any:
    document["devices"].append(copy.deepcopy(document["devices"][0]))
    return document


def _append_env(entry: object) -> Callable[[Any], Any]:
    def apply(document: Any) -> Any:
        first_edits(document).setdefault("env", []).append(entry)
        return document

    return apply


def _declare_earliest_with_digit_name(document: Any) -> Any:
    document["cdiVersion"] = "0.3.0"
    document["devices"][0]["name"] = "0" + document["devices"][0]["name"]
    return document


MUTATIONS = [
    # Both refuse: the schema's required fields and types.
    Mutation("no cdiVersion", _drop(_top, "cdiVersion"), True),
    Mutation("no kind", _drop(_top, "kind"), True),
    Mutation("no devices", _drop(_top, "devices"), True),
    Mutation("numeric cdiVersion", _set(_top, "cdiVersion", 5), True),
    Mutation("kind as list", _set(_top, "kind", ["x"]), True),
    Mutation("devices as object", _set(_top, "devices", {"name": "x"}), True),
    Mutation("not an object", lambda document: [document], True),
    Mutation("device as string", _set(_top, "devices", ["x"]), True),
    Mutation("device without name", _drop(_device, "name"), True),
    Mutation("device without edits", _drop(_device, "containerEdits"), True),
    Mutation("numeric device name", _set(_device, "name", 7), True),
    Mutation("env as string", _set(first_edits, "env", "A=1"), True),
    Mutation("node without path", _set(first_edits, "deviceNodes", [{"hostPath": "/d"}]), True),
    Mutation("numeric node path", _set(first_edits, "deviceNodes", [{"path": 3}]), True),
    Mutation("mount without hostPath", _drop(first_mount, "hostPath"), True),
    Mutation("mount without containerPath", _drop(first_mount, "containerPath"), True),
    Mutation("options as string", _set(first_mount, "options", "ro"), True),
    Mutation("edits as list", _set(_device, "containerEdits", []), True),
    # Only we refuse: the schema leaves these to the runtime's loader.
    Mutation("kind without class", _set(_top, "kind", "k8s.vgpu.hami.io"), False),
    Mutation("kind with space", _set(_top, "kind", "vendor.io/cl aim"), False),
    Mutation("unknown version", _set(_top, "cdiVersion", "9.9.9"), False),
    Mutation("0.3.0 with a digit-led name", _declare_earliest_with_digit_name, False),
    Mutation("env without =", _append_env("NOVALUE"), False),
    Mutation("env without name", _append_env("=value"), False),
    Mutation("env not a string", _append_env(42), False),
    Mutation("env with NUL", _append_env("A=\0"), False),
    Mutation("relative containerPath", _set(first_mount, "containerPath", "usr/lib"), False),
    Mutation("relative node path", _set(first_edits, "deviceNodes", [{"path": "dev/x"}]), False),
    Mutation("name starts with dash", _set(_device, "name", "-x"), False),
    Mutation("name with slash", _set(_device, "name", "a/b"), False),
    Mutation("duplicate device", _duplicate_device, False),
    Mutation("unknown field", _set(_top, "extra", 1), False),
    Mutation("hooks", _set(first_edits, "hooks", []), False),
    Mutation("annotations", _set(_top, "annotations", {"a": "b"}), False),
    Mutation("no device", _set(_top, "devices", []), False),
    Mutation("empty edits", _set(_device, "containerEdits", {}), False),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda mutation: mutation.name)
@settings(max_examples=8)
@given(document=built_documents)
def test_on_mutated_specs_we_refuse_whatever_the_schema_refuses(
    document: dict[str, Any], mutation: Mutation
):
    mutated = mutation.apply(copy.deepcopy(document))
    assert schema().is_valid(mutated) is not mutation.schema_refuses, mutation.name
    assert not accepted_by_us(mutated), mutation.name
