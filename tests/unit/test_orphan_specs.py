"""The orphan sweep knows the CDI specs every recorded release wrote, and only those."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubeletplugin.orphans import unrecognised_spec

RECORDINGS = Path(__file__).resolve().parents[1] / "fixtures" / "upgrade"
RECORDED_SPECS = sorted(RECORDINGS.glob("*/nodes/*/cdi/*.json"))


def test_there_are_recorded_specs():
    assert any(path.parts[-5] == "0.1.0" for path in RECORDED_SPECS)


@pytest.mark.parametrize(
    "path", RECORDED_SPECS, ids=[str(p.relative_to(RECORDINGS)) for p in RECORDED_SPECS]
)
def test_a_spec_a_release_wrote_is_recognised(path: Path):
    assert unrecognised_spec(path) is None


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"cdiVersion": "0.6.0"}, "cdiVersion '0.6.0'"),
        ({"cdiVersion": None}, "cdiVersion None"),
        ({"kind": "nvidia.com/gpu"}, "kind 'nvidia.com/gpu'"),
    ],
)
def test_a_spec_this_release_would_not_write_is_not(tmp_path: Path, change, problem: str):
    document = json.loads(RECORDED_SPECS[0].read_text())
    path = tmp_path / RECORDED_SPECS[0].name
    path.write_text(json.dumps({**document, **change}))
    assert problem in unrecognised_spec(path)


@pytest.mark.parametrize("content", ["", "{", "[]", "null"])
def test_a_spec_that_is_not_a_json_object_is_not(tmp_path: Path, content: str):
    path = tmp_path / "spec.json"
    path.write_text(content)
    assert unrecognised_spec(path) is not None
