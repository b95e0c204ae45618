"""Owner resolution for cache files: claim index fed by callbacks/watch events, pod index."""

from __future__ import annotations

from libvgpu.cache_paths import CacheFileKey, CacheOwnerKind
from libvgpu.owners import (
    ClaimIndex,
    ClaimResolver,
    CombinedResolver,
    LegacyPodResolver,
    Owner,
    PodIndex,
)

CLAIM = "11111111-2222-4333-8444-555555555555"
POD = "aaaaaaaa-2222-4333-8444-555555555555"
OTHER_POD = "bbbbbbbb-2222-4333-8444-555555555555"
CLAIM_KEY = CacheFileKey(CacheOwnerKind.CLAIM, CLAIM)
CONTAINER_KEY = CacheFileKey(CacheOwnerKind.CONTAINER, POD, "main")


def claim(reserved_for: list[dict], uid: str = CLAIM) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"uid": uid, "name": "gpu", "namespace": "ml", "resourceVersion": "7"},
        "status": {"reservedFor": reserved_for},
    }


def pod_ref(name: str, uid: str) -> dict:
    return {"resource": "pods", "name": name, "uid": uid}


def test_claim_owners_are_its_reserving_pods_and_follow_updates():
    index = ClaimIndex()
    resolver = ClaimResolver(index)
    assert resolver.owners_of(CLAIM_KEY) == ()

    index.on_add(claim([pod_ref("a", POD)]))
    assert resolver.owners_of(CLAIM_KEY) == (Owner("ml", "a", "", CLAIM),)

    index.on_update(claim([pod_ref("a", POD)]), claim([pod_ref("a", POD), pod_ref("b", OTHER_POD)]))
    assert [owner.pod for owner in resolver.owners_of(CLAIM_KEY)] == ["a", "b"]

    index.on_delete(claim([]))
    assert resolver.owners_of(CLAIM_KEY) == ()


def test_watch_events_feed_the_index_directly():
    index = ClaimIndex()
    index.apply_event("ADDED", claim([]))
    assert ClaimResolver(index).owners_of(CLAIM_KEY) == (Owner("ml", "", "", CLAIM),)
    index.apply_event("MODIFIED", claim([pod_ref("a", POD)]))
    assert ClaimResolver(index).owners_of(CLAIM_KEY)[0].pod == "a"
    index.apply_event("BOOKMARK", {"metadata": {"resourceVersion": "9"}})
    index.apply_event("DELETED", claim([pod_ref("a", POD)]))
    assert len(index) == 0


def test_non_pod_consumers_and_objects_without_uid_are_ignored():
    index = ClaimIndex()
    index.on_add(
        claim([{"resource": "workloads", "apiGroup": "example.com", "name": "w", "uid": "x"}])
    )
    index.on_add({"metadata": {"name": "no-uid"}})
    assert len(index) == 1
    assert ClaimResolver(index).owners_of(CLAIM_KEY) == (Owner("ml", "", "", CLAIM),)


def test_legacy_resolver_takes_the_container_from_the_dir_name():
    pods = PodIndex()
    resolver = LegacyPodResolver(pods)
    assert resolver.owners_of(CONTAINER_KEY) == ()
    pods.on_add({"metadata": {"uid": POD, "name": "web", "namespace": "default"}})
    assert resolver.owners_of(CONTAINER_KEY) == (Owner("default", "web", "main"),)
    assert resolver.owners_of(CLAIM_KEY) == ()


def test_combined_resolver_dispatches_by_kind():
    claims, pods = ClaimIndex(), PodIndex()
    claims.on_add(claim([pod_ref("a", POD)]))
    pods.on_add({"metadata": {"uid": POD, "name": "web", "namespace": "default"}})
    resolver = CombinedResolver(ClaimResolver(claims), LegacyPodResolver(pods))
    assert resolver.owners_of(CLAIM_KEY) == (Owner("ml", "a", "", CLAIM),)
    assert resolver.owners_of(CONTAINER_KEY) == (Owner("default", "web", "main"),)
