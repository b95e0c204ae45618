"""The legacy preempt verb's reprieve over shares, and the DRA claims' shares it reads.

A node's GPU holds 24 GiB; `fits` says the preemptor fits once at least `wanted`
GiB are free, so each case's answer can be worked out by hand (in its docstring).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from controller.inventory import build_inventory
from controller.legacy.dra_usage import reserved_shares
from controller.legacy.preempt_victims import Fits, added_victims, freed_by
from controller.preemption_shares import Share
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.vendors import VendorRegistry

DRIVER = "vgpu.hami.io"
GIB = 1024
GPU_GIB = 24


def share(key: str, gib: int, *holders: str) -> Share:
    return Share(key, "n1", {"n1-0": DeviceUsage(1, gib * GIB, 0)}, frozenset(holders))


def fits_with(shares: Sequence[Share], wanted_gib: int, calls: list[int] | None = None) -> Fits:
    """The preemptor fits when the given-back shares leave `wanted_gib` free."""
    held = sum(s.usage["n1-0"].memory_mib for s in shares)

    def fits(freed: Sequence[Share]) -> bool:
        if calls is not None:
            calls.append(len(freed))
        given = sum(s.usage["n1-0"].memory_mib for s in freed)
        return GPU_GIB * GIB - held + given >= wanted_gib * GIB

    return fits


def test_the_least_important_holder_that_must_go_is_added() -> None:
    """Legacy a (8) and DRA claim x of b (8) leave 8 free; 16 wanted: one must go. b
    (more important) returns first and the pod still fits; a's return does not."""
    shares = [share("a", 8, "a"), share("ns/x", 8, "b")]
    assert added_victims(shares, [], ["b", "a"], fits_with(shares, 16)) == ["a"]


def test_a_claim_shared_with_a_pod_that_stays_frees_nothing() -> None:
    """x (16) is reserved by b and by c, which is no candidate: no set frees it."""
    shares = [share("ns/x", 16, "b", "c"), share("a", 8, "a")]
    assert added_victims(shares, [], ["b", "a"], fits_with(shares, 16)) is None


def test_a_claim_frees_once_every_reserving_pod_goes() -> None:
    """x (16) is reserved by b and c, y (8) by d; 16 wanted, none free. d returns (x
    still freed); b's return keeps x held: added; so is c's."""
    shares = [share("ns/x", 16, "b", "c"), share("ns/y", 8, "d")]
    assert added_victims(shares, [], ["d", "b", "c"], fits_with(shares, 16)) == ["b", "c"]


def test_a_claim_reserved_for_nobody_never_frees() -> None:
    shares = [share("ns/x", 24)]
    assert freed_by(shares, {"a", "b"}) == ()
    assert added_victims(shares, [], [], fits_with(shares, 8)) is None


def test_kept_victims_free_their_shares_and_the_preemptors_own_always() -> None:
    """k (kept by kube-scheduler) frees 8 and the preemptor's stale share 8: 16 free
    with nothing added."""
    own = [share("me", 8, "me")]
    shares = [share("k", 8, "k"), share("a", 8, "a")]
    fits = fits_with([*own, *shares], 16)
    assert added_victims(shares, ["k"], ["a"], fits, own) == []


def test_a_holder_whose_return_frees_nothing_is_kept_without_asking() -> None:
    """b shares x (8) with c, no candidate; a holds 16; 16 wanted. All gone frees a only
    (one fit); b's return changes nothing (no fit); a's return leaves 0 free: added."""
    shares = [share("ns/x", 8, "b", "c"), share("a", 16, "a")]
    calls: list[int] = []
    assert added_victims(shares, [], ["b", "a"], fits_with(shares, 16, calls)) == ["a"]
    assert calls == [1, 0]


def claim(name: str, *reserved: dict[str, Any]) -> dict[str, Any]:
    result = {
        "driver": DRIVER,
        "pool": "n1",
        "device": "gpu-0",
        "request": "gpu",
        "shareID": f"share-{name}",
        "consumedCapacity": {"memory": "8Gi", "shares": "1"},
    }
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "status": {"allocation": {"devices": {"results": [result]}}, "reservedFor": list(reserved)},
    }


def device_slice(node: str) -> dict[str, Any]:
    device = {
        "name": "gpu-0",
        "allowMultipleAllocations": True,
        "attributes": {"uuid": {"string": f"{node}-0"}, "type": {"string": "NVIDIA-A10"}},
        "capacity": {
            "memory": {"value": f"{GPU_GIB}Gi"},
            "cores": {"value": "100"},
            "shares": {"value": "10"},
        },
    }
    return {
        "metadata": {"uid": f"slice-{node}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [device],
        },
    }


def test_reserved_shares_hold_every_reserver_other_consumers_by_a_key_no_pod_has() -> None:
    pod = {"resource": "pods", "name": "p", "uid": "uid-p"}
    other = {"apiGroup": "example.com", "resource": "jobs", "name": "j", "uid": "uid-p2"}
    claims = [claim("x", pod), claim("y", pod, other), claim("z")]
    inventory = build_inventory([device_slice("n1"), device_slice("n2")], DRIVER)
    shares = reserved_shares(claims, inventory, VendorRegistry(), {"n1"})
    assert [(s.key, s.holders) for s in shares["n1"]] == [
        ("ns/x", frozenset({"uid-p"})),
        ("ns/y", frozenset({"uid-p", "example.com/jobs/j/uid-p2"})),
        ("ns/z", frozenset()),
    ]
    assert shares["n1"][0].usage == {"n1-0": DeviceUsage(1, 8 * GIB, 0)}
    assert reserved_shares(claims, inventory, VendorRegistry(), {"n2"}) == {}
