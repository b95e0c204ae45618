"""Pure parts of the API emulator: server-side apply ownership, Event conversion, history.

The HTTP behaviour is covered in tests/integration/test_apiserver_behaviour_*.py; these pin
the rules underneath on plain dicts."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.apiserver.apply import ApplyConflictError, apply, from_fields_v1, to_fields_v1
from simulator.apiserver.conversion import to_core_v1, to_events_v1
from simulator.apiserver.nodes import (
    is_ready_or_silent,
    taint_new_node,
    without_not_ready_taint,
)
from simulator.apiserver.registry import Registry
from simulator.apiserver.store import ADDED, DELETED, MODIFIED, Storage

NOW = "2026-11-30T10:00:00Z"


def _cm(**data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": data}


def test_fields_v1_round_trips_nested_paths() -> None:
    paths = {("data", "a"), ("metadata", "labels", "k"), ("spec", "list")}
    assert from_fields_v1(to_fields_v1(paths)) == paths
    assert to_fields_v1({("data", "a")}) == {"f:data": {"f:a": {}}}


def test_apply_conflicts_only_on_a_different_value_and_force_takes_over() -> None:
    first = apply(None, _cm(a="1", b="1"), "one", False, NOW)
    shared = apply(first, _cm(a="1"), "two", False, NOW)
    assert shared["data"] == {"a": "1", "b": "1"}
    with pytest.raises(ApplyConflictError) as conflict:
        apply(shared, _cm(b="2"), "two", False, NOW)
    assert str(conflict.value) == 'Apply failed with 1 conflict: conflict with "one": .data.b'
    forced = apply(shared, _cm(b="2"), "two", True, NOW)
    owners = {
        m["manager"]: from_fields_v1(m["fieldsV1"]) for m in forced["metadata"]["managedFields"]
    }
    assert owners == {"one": {("data", "a")}, "two": {("data", "b")}}


def test_a_field_left_out_of_the_next_apply_is_removed_unless_shared() -> None:
    first = apply(None, _cm(a="1", b="1"), "one", False, NOW)
    both = apply(first, _cm(b="1"), "two", False, NOW)
    after = apply(both, _cm(c="3"), "one", False, NOW)
    assert after["data"] == {"b": "1", "c": "3"}


def test_events_convert_both_ways_without_loss() -> None:
    core = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p"},
        "message": "m",
        "reportingComponent": "c",
        "count": 2,
    }
    v1 = to_events_v1(core)
    assert (v1["regarding"], v1["note"], v1["reportingController"], v1["deprecatedCount"]) == (
        {"kind": "Pod", "name": "p"},
        "m",
        "c",
        2,
    )
    assert v1["eventTime"] is None
    assert {k: v for k, v in to_core_v1(v1).items() if k != "eventTime"} == core


def test_the_not_ready_taint_is_added_once_and_lifted_when_ready() -> None:
    node: dict[str, Any] = {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
    }
    taint_new_node(node)
    taint_new_node(node)
    assert [t["key"] for t in node["spec"]["taints"]] == ["a", "node.kubernetes.io/not-ready"]
    assert without_not_ready_taint(node)["spec"]["taints"] == [{"key": "a", "effect": "NoSchedule"}]
    assert is_ready_or_silent({"status": {}})
    assert not is_ready_or_silent(
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    )


def test_a_snapshot_undoes_later_changes_until_the_history_is_compacted() -> None:
    registry = Registry()
    configmaps = registry.get("", "v1", "configmaps")
    storage = Storage(registry, history_size=3, history_s=3600)

    def write(name: str, kind: str, data: str = "") -> None:
        old = storage.get(configmaps, "ns", name)
        obj = {"metadata": {"name": name, "namespace": "ns", "uid": name}, "data": {"v": data}}
        if kind == DELETED:
            obj = dict(old)
        storage.commit(configmaps, obj, old, kind)

    write("a", ADDED, "1")
    at_one = storage.rv
    write("a", MODIFIED, "2")
    write("b", ADDED)
    write("a", DELETED)
    snapshot = storage.bucket(configmaps).snapshot(at_one)
    assert snapshot is not None
    assert list(snapshot) == [("ns", "a")] and snapshot[("ns", "a")]["data"] == {"v": "1"}
    write("c", ADDED)
    assert storage.bucket(configmaps).snapshot(at_one) is None
