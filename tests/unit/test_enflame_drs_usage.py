"""What an Enflame DRS grant takes of its card's slots (HAMi's AddResourceUsage).

While one pod is fitted, HAMi's Enflame AddResourceUsage adds the grant's
profile slices (`drsSlice`, at least 1) to the card's `used`, clamped at int32,
so the pod's next container meets `Count <= Used` (CardTimeSlicingExhausted)
once the card's slice capacity is spent. A pod already placed counts what the
pod cache holds: one slot per app container (`max(Slots, 1)` in
getNodesUsage), as the allocated annotation carries no slice count.
Values: HAMi's pkg/device/enflame/device_test.go.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from dra_driver.engine.engine import Engine
from dra_driver.engine.model import Node
from dra_driver.engine.requests import DeviceRequest, PodRequest
from dra_driver.engine.vendor_backends import enflame_drs
from dra_driver.engine.vendor_backends.reading import INT32_MAX
from dra_driver.engine.vendors import VendorRegistry

PROFILES = {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"}
NOW = datetime(2026, 1, 1, tzinfo=UTC)
THREE_SLICES = (DeviceRequest(enflame_drs.DRS_TYPE, 1, 3, enflame_drs.BY_SLICES, 0),)
"""What `enflame.com/drs-gcu: 3` reads as: profile `3g.20gb`, 20480 MiB, 50 % cores."""


def drs_engine(capacity: int) -> Engine:
    """One node with one DRS card of `capacity` slices and HAMi's test profiles."""
    annotation = json.dumps(
        {"devices": [{"index": "0", "minor": "0", "capacity": capacity}], "profiles": PROFILES}
    )
    node = {"metadata": {"name": "node-a", "annotations": {enflame_drs.CAPACITY: annotation}}}
    found = enflame_drs.EnflameDrsBackend().node_devices(node, NOW, timedelta(seconds=60))
    return Engine([Node("node-a", found.devices)], vendors=VendorRegistry([enflame_drs.DRS]))


def test_add_resource_usage_clamps_on_overflow() -> None:
    """TestAddResourceUsage_ClampsOnOverflow: drsSlice MaxInt32, added twice."""
    used = enflame_drs.add_slices(0, INT32_MAX)
    assert used == INT32_MAX
    assert enflame_drs.add_slices(used, INT32_MAX) == INT32_MAX


def test_add_resource_usage_clamps_oversized_slice_string() -> None:
    """TestAddResourceUsage_ClampsOversizedSliceString: drsSlice "2147483648", read
    here from where a slice count is written, a profile's name."""
    slices, _ = enflame_drs.parse_profile_name("2147483648g.20gb")
    assert enflame_drs.add_slices(0, slices) == INT32_MAX


def test_no_slice_count_takes_one_slot() -> None:
    """AddResourceUsage: a drsSlice of 0 or less counts as 1."""
    assert enflame_drs.add_slices(4, 0) == 5


def test_a_cards_slice_capacity_limits_a_pods_grants() -> None:
    """A 2-slice card: the first 3-slice container leaves used 3, so the second meets
    Count 2 <= Used 3, although the card's memory and cores would still hold it."""
    engine = drs_engine(capacity=2)
    decision = engine.decide(PodRequest("ns", "p", (THREE_SLICES, THREE_SLICES)))
    assert decision.placement is None
    assert decision.failures == {"node-a": "1/1 CardTimeSlicingExhausted"}


def test_the_slice_check_comes_before_memory() -> None:
    """A 6-slice card holds two 3-slice containers (used 6, 40960 MiB); the third is
    refused for its slices, HAMi's first failing check, not for memory."""
    engine = drs_engine(capacity=6)
    two = engine.decide(PodRequest("ns", "two", (THREE_SLICES, THREE_SLICES)))
    assert two.placement is not None
    three = engine.decide(PodRequest("ns", "three", (THREE_SLICES,) * 3))
    assert three.failures == {"node-a": "1/1 CardTimeSlicingExhausted"}


def test_a_placed_pod_counts_one_slot_per_container() -> None:
    """HAMi's pod cache holds one slot per app container: after a 3-slice pod is
    placed on a 2-slice card, another 3-slice pod still fits (Count 2 > Used 1)."""
    engine = drs_engine(capacity=2)
    first = PodRequest("ns", "first", (THREE_SLICES,))
    placed = engine.decide(first).placement
    assert placed is not None
    engine.commit(first, placed)
    assert engine.decide(PodRequest("ns", "second", (THREE_SLICES,))).placement is not None
