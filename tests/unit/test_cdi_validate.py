"""The runtime's load checks, made in code: each refusal names the field a runtime would."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from cdi.errors import InvalidCdiSpecError
from cdi.naming import ClaimUID
from cdi.spec import CdiContainerEdits, CdiDevice, CdiSpec
from cdi.validate import minimum_cdi_version, validate_claim_spec, validate_spec_document
from dra_driver.errors import InvalidParameterError

UID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"

VALID: dict[str, Any] = {
    "cdiVersion": "0.5.0",
    "kind": "k8s.vgpu.hami.io/claim",
    "devices": [
        {
            "name": f"{UID}-gpu-0",
            "containerEdits": {
                "env": ["A=1", "EMPTY="],
                "deviceNodes": [{"path": "/dev/nvidia0"}],
                "mounts": [
                    {"hostPath": "/h", "containerPath": "/c", "options": ["ro", "bind"]},
                ],
            },
        }
    ],
    "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl", "hostPath": "/dev/nvidiactl"}]},
}


def mutated(change: Callable[[dict[str, Any]], object]) -> dict[str, Any]:
    document = copy.deepcopy(VALID)
    change(document)
    return document


def edits(document: dict[str, Any]) -> dict[str, Any]:
    return document["devices"][0]["containerEdits"]


def rename_without_host_paths(document: dict[str, Any], name: str) -> None:
    del document["containerEdits"]
    document["devices"][0]["name"] = name


def test_the_base_document_is_valid():
    validate_spec_document(VALID)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("cdiVersion"), "spec.cdiVersion"),
        (lambda d: d.pop("kind"), "spec.kind"),
        (lambda d: d.pop("devices"), "spec.devices"),
        (lambda d: d.update(annotations={"a": "b"}), "spec.annotations"),
        (lambda d: d.update(cdiVersion="0.9.0"), "cdiVersion"),
        (lambda d: d.update(cdiVersion=1), "cdiVersion"),
        (lambda d: d.update(cdiVersion="0.4.0"), "cdiVersion"),
        (lambda d: d.update(kind="claim"), "kind"),
        (lambda d: d.update(kind="k8s.vgpu.hami.io/"), "kind"),
        (lambda d: d.update(kind="/claim"), "kind"),
        (lambda d: d.update(kind="1vendor/claim"), "kind"),
        (lambda d: d.update(kind="vendor-/claim"), "kind"),
        (lambda d: d.update(kind="vendor/cl aim"), "kind"),
        (lambda d: d.update(kind="vendor/a/b"), "kind"),
        (lambda d: d.update(kind="vendor/" + "c" * 64), "kind"),
        (lambda d: d.update(devices=[]), "devices"),
        (lambda d: d.update(devices={}), "devices"),
        (lambda d: d["devices"].append(copy.deepcopy(d["devices"][0])), "devices[1].name"),
        (lambda d: d["devices"][0].update(name="-x"), "devices[0].name"),
        (lambda d: d["devices"][0].update(name="x-"), "devices[0].name"),
        (lambda d: d["devices"][0].update(name="a/b"), "devices[0].name"),
        (lambda d: d["devices"][0].update(name="a=b"), "devices[0].name"),
        (lambda d: d["devices"][0].update(name=""), "devices[0].name"),
        (lambda d: d["devices"][0].update(name="gpü"), "devices[0].name"),
        (lambda d: d["devices"][0].pop("containerEdits"), "devices[0].containerEdits"),
        (lambda d: d["devices"][0].update(containerEdits={}), "devices[0].containerEdits"),
        (lambda d: edits(d).update(env=["NOVALUE"]), "devices[0].containerEdits.env[0]"),
        (lambda d: edits(d).update(env=["=x"]), "devices[0].containerEdits.env[0]"),
        (lambda d: edits(d).update(env=[3]), "devices[0].containerEdits.env[0]"),
        (lambda d: edits(d).update(env=["A=\0"]), "devices[0].containerEdits.env[0]"),
        (lambda d: edits(d).update(env="A=1"), "devices[0].containerEdits.env"),
        (lambda d: edits(d).update(hooks=[]), "devices[0].containerEdits.hooks"),
        (
            lambda d: edits(d).update(deviceNodes=[{"hostPath": "/dev/x"}]),
            "devices[0].containerEdits.deviceNodes[0].path",
        ),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "dev/x"}]),
            "devices[0].containerEdits.deviceNodes[0].path",
        ),
        (
            lambda d: edits(d).update(deviceNodes=[{"path": "/dev/x", "major": 195}]),
            "devices[0].containerEdits.deviceNodes[0].major",
        ),
        (
            lambda d: edits(d)["mounts"][0].pop("hostPath"),
            "devices[0].containerEdits.mounts[0].hostPath",
        ),
        (
            lambda d: edits(d)["mounts"][0].pop("containerPath"),
            "devices[0].containerEdits.mounts[0].containerPath",
        ),
        (
            lambda d: edits(d)["mounts"][0].update(containerPath="usr/lib"),
            "devices[0].containerEdits.mounts[0].containerPath",
        ),
        (
            lambda d: edits(d)["mounts"][0].update(hostPath=""),
            "devices[0].containerEdits.mounts[0].hostPath",
        ),
        (
            lambda d: edits(d)["mounts"][0].update(options="ro"),
            "devices[0].containerEdits.mounts[0].options",
        ),
        (
            lambda d: edits(d)["mounts"][0].update(options=[1]),
            "devices[0].containerEdits.mounts[0].options[0]",
        ),
        (
            lambda d: edits(d)["mounts"][0].update(type="bind"),
            "devices[0].containerEdits.mounts[0].type",
        ),
        (lambda d: d.update(containerEdits=[]), "containerEdits"),
        (
            lambda d: d["containerEdits"]["deviceNodes"][0].update(hostPath="x"),
            "containerEdits.deviceNodes[0].hostPath",
        ),
    ],
)
def test_each_refusal_names_the_field(change: Callable[[dict[str, Any]], object], field: str):
    with pytest.raises(InvalidCdiSpecError) as caught:
        validate_spec_document(mutated(change))
    assert isinstance(caught.value, InvalidParameterError)
    assert caught.value.field == field


@pytest.mark.parametrize("document", [None, [], "spec", 1])
def test_a_spec_must_be_an_object(document: object):
    with pytest.raises(InvalidCdiSpecError):
        validate_spec_document(document)


@pytest.mark.parametrize(
    ("change", "required"),
    [
        (lambda d: rename_without_host_paths(d, "gpu"), "0.3.0"),
        (lambda d: d["devices"][0].update(name="gpu"), "0.5.0"),
        (lambda d: d.pop("containerEdits"), "0.5.0"),
        (lambda d: d.update(kind="vendor.io/gpu.shared"), "0.6.0"),
    ],
)
def test_the_required_version_follows_the_fields_used(
    change: Callable[[dict[str, Any]], object], required: str
):
    document = mutated(change)
    assert minimum_cdi_version(document) == required
    document["cdiVersion"] = required
    validate_spec_document(document)


def test_a_claim_spec_must_carry_our_kind_and_the_claims_names():
    device = CdiDevice(f"{UID}-gpu-0", CdiContainerEdits(env=("A=1",)))
    validate_claim_spec(CdiSpec(ClaimUID(UID), (device,)))
    with pytest.raises(InvalidCdiSpecError) as caught:
        validate_claim_spec(CdiSpec(ClaimUID(UID), (device,), kind="other.io/claim"))
    assert caught.value.field == "kind"
    stranger = CdiDevice("a7f0c3a2-4b1d-4c8e-9a55-1e2f3a4b5c6d-gpu-0", device.edits)
    with pytest.raises(InvalidCdiSpecError) as caught:
        validate_claim_spec(CdiSpec(ClaimUID(UID), (device, stranger)))
    assert caught.value.field == "devices[1].name"
