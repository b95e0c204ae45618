"""The kube-scheduler stand-in allocates MIG partitions as kube-scheduler v1.36 does:
a partition device is taken only while its card's shared counters hold what it
consumes, beside the allocated partitions and those chosen in the same cycle.

The pool is the contract's (tests/mig_slices.py: a counters-only slice, then one
device per H100 80GB profile placement, NVIDIA's `-lgipp` table); the simulation's
report rows for a partition come from the same objects.
"""

from __future__ import annotations

from typing import Any

from simulator.mig_report import claim_partitions, holds_partition, published_partitions
from simulator.standins.dra_allocator import (
    build_requests,
    device_usage,
    node_pool_counters,
    node_pool_devices,
    plan_allocation,
)
from tests.mig_slices import ALLOCATION_TAINT, DRIVER, partition_class, pool_slices

NODE = {"metadata": {"name": "node-a", "labels": {}}}
CLASSES = {"mig.nvidia.vgpu.hami.io": partition_class()}
TOLERATE = [{"key": ALLOCATION_TAINT["key"], "operator": "Exists"}]


def claim(name: str, profile: str, device: str | None = None) -> dict[str, Any]:
    """A claim for one partition of `profile`; allocated to `device` when given."""
    selector = f"device.attributes['{DRIVER}'].profile == '{profile}'"
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "mig",
                        "exactly": {
                            "deviceClassName": "mig.nvidia.vgpu.hami.io",
                            "selectors": [{"cel": {"expression": selector}}],
                            "tolerations": TOLERATE,
                        },
                    }
                ]
            }
        },
    }
    if device is not None:
        result = {"request": "mig", "driver": DRIVER, "pool": "node-a", "device": device}
        body["status"] = {"allocation": {"devices": {"results": [result]}}}
    return body


def plan(wanted: list[dict[str, Any]], allocated: list[dict[str, Any]]) -> list[str] | None:
    slices = pool_slices("node-a")
    picks = plan_allocation(
        build_requests(wanted, CLASSES),
        node_pool_devices(slices, NODE),
        device_usage(allocated),
        node_pool_counters(slices, NODE),
    )
    return None if picks is None else [str(p.device.spec["name"]) for p in picks]


def test_the_counters_slice_is_read_as_the_cards_counter_set() -> None:
    counters = node_pool_counters(pool_slices("node-a", mig_cards=(0, 1)), NODE)
    assert set(counters) == {
        (DRIVER, "node-a", "gpu-0-mig-counters"),
        (DRIVER, "node-a", "gpu-1-mig-counters"),
    }
    card = counters[(DRIVER, "node-a", "gpu-0-mig-counters")]
    assert card["compute-slices"] == 7 and card["memory-slice-7"] == 1


def test_partitions_chosen_in_one_cycle_never_overlap() -> None:
    assert plan([claim("one", "4g.40gb")], []) == ["gpu-0-mig-4g-40gb-at-0"]
    # The 7g spans every slice: nothing else fits beside it, chosen together or after.
    assert plan([claim("whole", "7g.80gb"), claim("small", "1g.10gb")], []) is None
    assert (
        plan([claim("small", "1g.10gb")], [claim("whole", "7g.80gb", "gpu-0-mig-7g-80gb-at-0")])
        is None
    )
    # A 4g (slices 0-3) and a 3g: only the 3g at 4 is beside it.
    assert plan([claim("four", "4g.40gb"), claim("three", "3g.40gb")], []) == [
        "gpu-0-mig-4g-40gb-at-0",
        "gpu-0-mig-3g-40gb-at-4",
    ]


def test_an_allocated_3g_leaves_only_the_placement_it_does_not_overlap() -> None:
    held = [claim("held", "3g.40gb", "gpu-0-mig-3g-40gb-at-0")]
    assert plan([claim("next", "3g.40gb")], held) == ["gpu-0-mig-3g-40gb-at-4"]
    # The card's one 4g placement, at 0, spans slices 0-3, which the 3g holds.
    assert plan([claim("next", "4g.40gb")], held) is None
    # Two 1g beside it, at the first free slices (the stand-in takes devices in slice
    # order; the controller's HAMi preference is its own).
    assert plan([claim("a", "1g.10gb"), claim("b", "1g.10gb")], held) == [
        "gpu-0-mig-1g-10gb-at-4",
        "gpu-0-mig-1g-10gb-at-5",
    ]


def test_without_its_counter_set_a_partition_is_never_taken() -> None:
    slices = [s for s in pool_slices("node-a") if "sharedCounters" not in s["spec"]]
    for body in slices:
        body["spec"]["pool"]["resourceSliceCount"] = len(slices)
    picks = plan_allocation(
        build_requests([claim("one", "1g.10gb")], CLASSES),
        node_pool_devices(slices, NODE),
        device_usage([]),
        node_pool_counters(slices, NODE),
    )
    assert picks is None


def test_the_report_names_the_profile_placement_and_card_of_a_held_partition() -> None:
    held = claim("held", "3g.40gb", "gpu-0-mig-3g-40gb-at-4")
    assert holds_partition(held) and not holds_partition(claim("new", "3g.40gb"))
    (row,) = claim_partitions(held, published_partitions(pool_slices("node-a")))
    assert (row.node, row.device, row.gpu_index, row.profile) == (
        "node-a",
        "gpu-0-mig-3g-40gb-at-4",
        0,
        "3g.40gb",
    )
    assert (row.placement_start, row.placement_size, row.placement) == (4, 4, "4..7")
    assert row.gpu_uuid.startswith("GPU-")
