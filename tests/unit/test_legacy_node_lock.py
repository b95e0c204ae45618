"""Node lock rules shared by Bind and Allocate: each rule of issue 11 has a case here."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dra_driver.objects.node_lock import (
    LockState,
    NodeLockError,
    lock_value,
    may_acquire,
    may_release,
    view_lock,
)

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
YOUNG = "2026-11-30T09:58:00Z"
OLD = "2026-11-30T09:50:00Z"


def test_lock_value_is_hami_format() -> None:
    assert lock_value("gpu-test", "gpu-pod", NOW) == "2026-11-30T10:00:00Z,gpu-test,gpu-pod"


@pytest.mark.parametrize(
    ("value", "state"),
    [
        (None, LockState.FREE),
        ("", LockState.FREE),
        (f"{YOUNG},ns,me", LockState.OWN),
        (f"{OLD},ns,me", LockState.OWN),
        (f"{YOUNG},ns,other", LockState.CONTENDED),
        (f"{YOUNG},other-ns,me", LockState.CONTENDED),
        (f"{OLD},ns,other", LockState.EXPIRED),
        (YOUNG, LockState.BLOCKED),
        (OLD, LockState.EXPIRED),
        ("2026-11-30T10:58:00+01:00,ns,other", LockState.CONTENDED),
    ],
)
def test_view_lock(value: str | None, state: LockState) -> None:
    assert view_lock("n1", value, "ns", "me", NOW).state is state


def test_timeout_is_configurable() -> None:
    value = f"{YOUNG},ns,other"
    assert view_lock("n1", value, "ns", "me", NOW, timedelta(minutes=1)).state is LockState.EXPIRED


def test_another_live_pods_young_lock_blocks_and_a_gone_one_is_taken_over() -> None:
    view = view_lock("n1", f"{YOUNG},ns,other", "ns", "me", NOW)
    assert not may_acquire(view, holder_alive=True)
    assert may_acquire(view, holder_alive=False)
    assert "ns/other" in view.describe()


def test_young_bare_timestamp_blocks_even_without_owner() -> None:
    view = view_lock("n1", YOUNG, "ns", "me", NOW)
    assert not may_acquire(view, holder_alive=False)


@pytest.mark.parametrize("state_value", [None, f"{OLD},ns,other", f"{YOUNG},ns,me"])
def test_free_expired_and_own_locks_are_acquired(state_value: str | None) -> None:
    assert may_acquire(view_lock("n1", state_value, "ns", "me", NOW), holder_alive=True)


@pytest.mark.parametrize("value", ["yesterday", "2026-11-30T10:00:00Z,ns", "1,2,3,4"])
def test_unparsable_lock_is_an_error_naming_the_node(value: str) -> None:
    with pytest.raises(NodeLockError, match="node n1: unreadable lock"):
        view_lock("n1", value, "ns", "me", NOW)
    with pytest.raises(NodeLockError):
        may_release("n1", value, "ns", "me")


@pytest.mark.parametrize(
    ("value", "released"),
    [
        (f"{YOUNG},ns,me", True),
        (f"{YOUNG},ns,other", False),
        (YOUNG, True),
        (None, False),
    ],
)
def test_release_own_or_ownerless_only(value: str | None, released: bool) -> None:
    assert may_release("n1", value, "ns", "me") is released
