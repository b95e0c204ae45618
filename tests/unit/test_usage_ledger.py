"""The usage ledger: per-device totals equal the sum over holders, whatever the order of changes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kubeletplugin.checkpoint import ClaimRecord, PreparedDevice, PrepareState
from kubeletplugin.usage_ledger import UsageLedger, record_holdings

holdings = st.lists(
    st.tuples(
        st.sampled_from(["gpu-0", "gpu-1", "gpu-2"]), st.integers(0, 1 << 36), st.integers(0, 100)
    ),
    max_size=3,
)
keys = st.tuples(st.sampled_from(["u1", "u2", "u3"]), st.sampled_from(["prepared", "in flight"]))
changes = st.lists(st.tuples(keys, st.none() | holdings), max_size=12)


def summed(held: dict, excluded: set) -> dict[str, tuple[int, int]]:
    totals: dict[str, tuple[int, int]] = {}
    for key, entries in held.items():
        if key in excluded:
            continue
        for device, memory, cores in entries:
            old = totals.get(device, (0, 0))
            totals[device] = (old[0] + memory, old[1] + cores)
    return {device: total for device, total in totals.items() if total != (0, 0)}


@given(changes, st.sets(keys))
def test_totals_are_the_sum_over_the_holders_not_excluded(steps, excluded):
    ledger = UsageLedger()
    held: dict = {}
    for key, entries in steps:
        if entries is None:
            ledger.release(key)
            held.pop(key, None)
        else:
            ledger.hold(key, entries)
            held[key] = entries
    totals = {device: (memory, cores) for device, memory, cores in ledger.totals_except(excluded)}
    assert totals == summed(held, excluded)


def test_a_holder_set_again_replaces_what_it_held():
    ledger = UsageLedger()
    ledger.hold("a", [("gpu-0", 10, 5)])
    ledger.hold("a", [("gpu-1", 3, 0)])
    ledger.hold("b", [("gpu-1", 4, 20)])
    assert sorted(ledger.totals_except([])) == [("gpu-1", 7, 20)]
    assert ledger.totals_except(["b"]) == [("gpu-1", 3, 0)]
    ledger.release("a")
    ledger.release("b")
    ledger.release("b")
    assert ledger.totals_except([]) == []


def test_a_record_holds_its_devices_at_their_prepared_limits():
    devices = (
        PreparedDevice(("gpu",), "node-a", "gpu-0", (), memory_limit_bytes=1 << 30, core_limit=30),
        PreparedDevice(("gpu",), "node-a", "gpu-1", (), memory_limit_bytes=2 << 30),
    )
    record = ClaimRecord("u1", "ns", "c", PrepareState.COMPLETED, devices)
    assert record_holdings(record) == [("gpu-0", 1 << 30, 30), ("gpu-1", 2 << 30, 0)]
