"""The shared wait for the API server: its backoff, what it retries, what ends it."""

from __future__ import annotations

import asyncio

import pytest

from dra_driver.errors import DriverError, TransientError
from dra_driver.kube.api_wait import NOT_CHECKED, ApiWait
from dra_driver.kube.backoff import Backoff, BackoffSettings
from dra_driver.process.runtime import finished_before_stop


def delays(uniform, count: int = 9) -> list[float]:
    backoff = Backoff(BackoffSettings(), uniform)
    return [backoff.next_delay() for _ in range(count)]


def test_pauses_double_from_half_a_second_up_to_thirty_whatever_the_jitter():
    assert delays(lambda low, high: low) == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert delays(lambda low, high: high) == [0.75, 1.5, 3, 6, 12, 24, 30, 30, 30]


def test_a_reset_starts_again_from_the_first_pause():
    backoff = Backoff(BackoffSettings(), lambda low, high: low)
    for _ in range(4):
        backoff.next_delay()
    backoff.reset()
    assert backoff.next_delay() == 0.5


class Recorded:
    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


async def test_transient_errors_are_waited_out_and_the_result_returned():
    outcomes: list[BaseException | int] = [TransientError("503"), TransientError("503"), 7]
    sleep = Recorded()
    wait = ApiWait("test", sleep=sleep)
    seen: list[str | None] = []

    async def attempt() -> int:
        seen.append(wait.readiness())
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert await wait.until_reachable(attempt) == 7
    assert len(sleep.delays) == 2 and wait.readiness() is None
    waiting = "waiting for the API server: 503"
    assert seen == [NOT_CHECKED, waiting, waiting]


async def test_a_refusal_no_wait_cures_ends_the_wait_with_its_error():
    sleep = Recorded()
    wait = ApiWait("test", sleep=sleep)

    async def refused() -> None:
        raise DriverError("resource.k8s.io/v1 is not served")

    with pytest.raises(DriverError, match="not served"):
        await wait.until_reachable(refused)
    assert sleep.delays == [] and wait.readiness() == NOT_CHECKED


async def test_work_that_ends_first_is_reported_and_its_error_raised():
    async def done() -> None:
        return None

    async def broken() -> None:
        raise DriverError("broken")

    assert await finished_before_stop(asyncio.Event(), done()) is True
    with pytest.raises(DriverError, match="broken"):
        await finished_before_stop(asyncio.Event(), broken())


async def test_a_stop_cancels_the_work():
    stop = asyncio.Event()
    cancelled = asyncio.Event()

    async def forever() -> None:
        stop.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    assert await finished_before_stop(stop, forever()) is False
    assert cancelled.is_set()
