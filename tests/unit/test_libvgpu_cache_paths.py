"""Cache path naming: validated components, and the way back from a path to its owner."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.errors import InvalidParameterError
from libvgpu.cache_paths import (
    CacheFileKey,
    CacheOwnerKind,
    cache_file_key,
    claim_cache_location,
    legacy_cache_location,
    owner_dir_key,
)
from libvgpu.settings import LibvgpuPaths

PATHS = LibvgpuPaths(cache_root="/usr/local/vgpu")
UID = "6f1d2b9e-7c1a-4d5e-8f90-123456789abc"
NONCE = "0123456789abcdef0123456789abcdef"


def test_claim_location_is_under_claims_and_mounted_at_the_same_path():
    location = claim_cache_location(PATHS, UID, NONCE)
    assert location.host_dir == location.container_dir == f"/usr/local/vgpu/claims/{UID}"
    assert location.host_file == f"/usr/local/vgpu/claims/{UID}/{NONCE}.cache"


def test_legacy_location_follows_hami():
    location = legacy_cache_location(PATHS, UID, "main", NONCE)
    assert location.host_dir == f"/usr/local/vgpu/containers/{UID}_main"
    assert location.container_file == f"/usr/local/vgpu/{NONCE}.cache"


@pytest.mark.parametrize(
    "uid",
    ["", "..", "../etc", f"{UID}/x", UID.upper(), UID + "0", "not-a-uid", f"a/../{UID}"],
)
def test_claim_uid_that_is_not_a_uid_is_refused(uid):
    with pytest.raises(InvalidParameterError) as raised:
        claim_cache_location(PATHS, uid, NONCE)
    assert raised.value.field == "claim.metadata.uid"


@pytest.mark.parametrize("name", ["", "a_b", "A", "-a", "a/b", "..", "a" * 64])
def test_bad_container_names_are_refused(name):
    with pytest.raises(InvalidParameterError):
        legacy_cache_location(PATHS, UID, name, NONCE)


@pytest.mark.parametrize("nonce", ["", "x" * 32, NONCE[:-1], "../" + NONCE[3:]])
def test_bad_nonces_are_refused(nonce):
    with pytest.raises(InvalidParameterError):
        claim_cache_location(PATHS, UID, nonce)


def test_file_keys_round_trip_from_locations():
    claim = claim_cache_location(PATHS, UID, NONCE)
    legacy = legacy_cache_location(PATHS, UID, "web-1", NONCE)
    assert cache_file_key(PATHS.cache_root, claim.host_file) == CacheFileKey(
        CacheOwnerKind.CLAIM, UID
    )
    assert cache_file_key(PATHS.cache_root, legacy.host_file) == CacheFileKey(
        CacheOwnerKind.CONTAINER, UID, "web-1"
    )
    assert owner_dir_key(PATHS.cache_root, claim.host_dir) == CacheFileKey(
        CacheOwnerKind.CLAIM, UID
    )


@pytest.mark.parametrize(
    "path",
    [
        "/usr/local/vgpu/libvgpu.so",
        f"/usr/local/vgpu/claims/{UID}/libvgpu.so",
        f"/usr/local/vgpu/claims/{UID}/.{NONCE}.cache",
        f"/usr/local/vgpu/claims/{UID}/sub/{NONCE}.cache",
        f"/usr/local/vgpu/claims/not-a-uid/{NONCE}.cache",
        f"/usr/local/vgpu/containers/{UID}/{NONCE}.cache",
        f"/usr/local/vgpu/other/{UID}/{NONCE}.cache",
        f"/elsewhere/claims/{UID}/{NONCE}.cache",
        f"relative/claims/{UID}/{NONCE}.cache",
    ],
)
def test_other_paths_have_no_owner(path):
    assert cache_file_key(PATHS.cache_root, path) is None


@given(st.text(max_size=40))
def test_arbitrary_text_never_escapes_validation(text):
    try:
        location = legacy_cache_location(PATHS, UID, text, NONCE)
    except InvalidParameterError:
        return
    assert location.host_dir == f"/usr/local/vgpu/containers/{UID}_{text}"
    assert "/" not in text and ".." not in text
