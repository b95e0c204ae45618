"""Every example manifest a user copies passes the Kubernetes schemas (the simulator test
then applies them to the API emulator and allocates them)."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MANIFESTS = sorted([*EXAMPLES.glob("dra/*.yaml"), *EXAMPLES.glob("legacy/*.yaml")])


def test_there_is_an_example_for_each_documented_case():
    names = {path.stem for path in MANIFESTS}
    assert {
        "inference-10gi-30pct",
        "exclusive-full-gpu",
        "training-2-gpus",
        "memory-percentage",
        "type-filter",
        "uuid-filter",
        "binpack-vs-spread",
        "cannot-fit",
        "shared-gpu",
        "whole-gpu",
    } <= names


@pytest.mark.parametrize("version", ["1.35.0", "1.37.0"])
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_example_passes_the_kubernetes_schemas(path: Path, version: str):
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert documents
    for document in documents:
        kubernetes_validate.validate(document, version, strict=True)
