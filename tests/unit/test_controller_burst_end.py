"""When the controller gives freed memory back: once per burst, after the view shed
enough pods and claims and then stayed unchanged for a tick."""

from __future__ import annotations

from controller.burst_end import BurstEnd


def test_a_burst_ends_once_its_objects_are_gone_and_the_view_is_quiet() -> None:
    ends = BurstEnd(freed_objects=100)
    ticks = [(0, 1), (60, 2), (150, 3), (150, 3), (40, 4)]
    assert [ends.over(held, changes) for held, changes in ticks] == [False] * 5
    # 110 below the high mark of 150, and nothing changed since the last tick.
    assert ends.over(40, 4) is True
    assert ends.over(40, 4) is False


def test_a_small_shrink_or_a_growing_view_is_no_burst_end() -> None:
    ends = BurstEnd(freed_objects=100)
    assert [ends.over(held, 1) for held in (500, 500, 450, 450)] == [False] * 4
    assert [ends.over(held, n) for n, held in enumerate((600, 700, 700), start=2)] == [False] * 3
    assert ends.over(700, 4) is False


def test_the_next_burst_is_measured_from_the_last_release() -> None:
    ends = BurstEnd(freed_objects=100)
    for held, changes in ((300, 1), (0, 2)):
        ends.over(held, changes)
    assert ends.over(0, 2) is True
    for held, changes in ((80, 3), (20, 4), (20, 4)):
        assert ends.over(held, changes) is False
    for held, changes in ((250, 5), (90, 6)):
        assert ends.over(held, changes) is False
    assert ends.over(90, 6) is True


def test_zero_releases_after_any_quiet_tick_that_follows_a_shrink() -> None:
    ends = BurstEnd(freed_objects=0)
    assert [ends.over(held, 1) for held in (5, 5)] == [False, False]
    assert ends.over(4, 2) is False
    assert ends.over(4, 2) is True


def test_a_high_mark_seen_between_ticks_counts() -> None:
    ends = BurstEnd(freed_objects=100)
    assert ends.over(0, 1) is False
    for held in (50, 150, 120):
        ends.observe(held)
    assert ends.over(30, 2) is False
    assert ends.over(30, 2) is True
