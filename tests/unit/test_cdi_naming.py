"""CDI naming: claim UIDs are checked before any name or path, names follow the CDI grammar."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cdi.errors import InvalidCdiNameError
from cdi.naming import (
    CDI_KIND,
    cdi_device_name,
    claim_uid_of_spec_file,
    is_cdi_device_name,
    is_temp_file_name,
    qualified_device_id,
    spec_file_name,
    temp_file_prefix,
    validate_claim_uid,
    validate_device_name,
    validate_share_id,
)
from dra_driver.errors import InvalidParameterError

UID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"
SHARE = "0b9a5c1e-2d3f-4a6b-8c7d-9e0f1a2b3c4d"

HOSTILE_UIDS = [
    "../x",
    "a/b",
    "\x00",
    f"{UID}\x00",
    f"../{UID}",
    f"{UID}/..",
    "..",
    "",
    UID.upper(),
    f"{UID}\n",
    f" {UID}",
    UID.replace("-", ""),
    f"{{{UID}}}",
    None,
    42,
]


def test_a_kubernetes_uid_is_accepted_as_is():
    assert validate_claim_uid(UID) == UID


@pytest.mark.parametrize("uid", HOSTILE_UIDS)
def test_anything_but_a_lowercase_uuid_is_refused_naming_the_field(uid: object):
    with pytest.raises(InvalidCdiNameError) as caught:
        validate_claim_uid(uid)
    assert isinstance(caught.value, InvalidParameterError)
    assert caught.value.field == "claimUID"


@pytest.mark.parametrize("uid", HOSTILE_UIDS)
def test_no_file_name_is_made_from_a_hostile_uid(uid: object):
    with pytest.raises(InvalidCdiNameError):
        spec_file_name(uid)  # type: ignore[arg-type]
    with pytest.raises(InvalidCdiNameError):
        temp_file_prefix(uid)  # type: ignore[arg-type]
    with pytest.raises(InvalidCdiNameError):
        cdi_device_name(uid, "gpu-0")  # type: ignore[arg-type]


def test_names_follow_the_transient_spec_convention():
    assert CDI_KIND == "k8s.vgpu.hami.io/claim"
    assert spec_file_name(UID) == f"k8s.vgpu.hami.io-claim_{UID}.json"
    assert cdi_device_name(UID, "gpu-0") == f"{UID}-gpu-0"
    assert cdi_device_name(UID, "gpu-0", SHARE) == f"{UID}-gpu-0-{SHARE}"
    assert qualified_device_id(f"{UID}-gpu-0") == f"k8s.vgpu.hami.io/claim={UID}-gpu-0"


@pytest.mark.parametrize("device", ["gpu_0", "gpu.0", "GPU-0", "-gpu", "gpu-", "", "a/b", "x" * 64])
def test_device_names_must_be_dns_labels(device: str):
    with pytest.raises(InvalidCdiNameError) as caught:
        validate_device_name(device)
    assert caught.value.field == "device"


@pytest.mark.parametrize("share", ["0", "share-1", SHARE.upper(), f"{SHARE}/x"])
def test_share_ids_must_be_lowercase_uuids(share: str):
    with pytest.raises(InvalidCdiNameError) as caught:
        validate_share_id(share)
    assert caught.value.field == "shareID"


def test_a_qualified_id_is_only_made_from_a_cdi_device_name():
    with pytest.raises(InvalidCdiNameError):
        qualified_device_id("bad/name")


def test_temp_names_are_hidden_and_never_loaded_by_runtimes():
    temp = f"{temp_file_prefix(UID)}0123456789abcdef.tmp"
    assert temp.startswith(".")
    assert not temp.endswith((".json", ".yaml"))
    assert is_temp_file_name(temp)
    assert claim_uid_of_spec_file(temp) is None


@pytest.mark.parametrize(
    "name",
    [
        f".{UID}.tmp",
        f".k8s.gpu.example.com-gpu_{UID}.json.0123.tmp",
        f".k8s.vgpu.hami.io-claim_{UID}.json.tmp",
        f".k8s.vgpu.hami.io-claim_{UID}.json.0123.tmp.json",
        f"k8s.vgpu.hami.io-claim_{UID}.json.0123.tmp",
    ],
)
def test_other_programs_temp_files_are_not_taken_for_ours(name: str):
    assert not is_temp_file_name(name)


@pytest.mark.parametrize(
    "name",
    [
        f"k8s.gpu.nvidia.com-claim_{UID}.json",
        f"k8s.vgpu.hami.io-claim_{UID}.yaml",
        f"k8s.vgpu.hami.io-claim_{UID}.json.bak",
        f"k8s.vgpu.hami.io-claim_{UID.upper()}.json",
        "k8s.vgpu.hami.io-claim_not-a-uid.json",
        "k8s.vgpu.hami.io-claim_.json",
        "nvidia.yaml",
    ],
)
def test_foreign_file_names_name_no_claim(name: str):
    assert claim_uid_of_spec_file(name) is None


@given(st.uuids())
def test_every_uuid_round_trips_through_its_file_name(value: uuid.UUID):
    uid = str(value)
    assert claim_uid_of_spec_file(spec_file_name(uid)) == uid


@given(st.text(max_size=40))
def test_arbitrary_text_is_a_uid_only_when_it_is_a_canonical_uuid(text: str):
    try:
        canonical = str(uuid.UUID(text)) == text
    except ValueError:
        canonical = False
    try:
        validate_claim_uid(text)
    except InvalidCdiNameError:
        assert not canonical
    else:
        assert canonical
        assert "/" not in text and "\0" not in text and ".." not in text


@given(st.uuids(), st.from_regex(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", fullmatch=True))
def test_every_claim_device_name_is_a_valid_cdi_name(value: uuid.UUID, device: str):
    assert is_cdi_device_name(cdi_device_name(str(value), device))
    assert is_cdi_device_name(cdi_device_name(str(value), device, str(uuid.uuid4())))
