"""Process runtime helpers."""

from __future__ import annotations

import asyncio
import logging

from dra_driver.process.runtime import KeyValueFormatter, wait_event

NEVER_S = 3600.0
"""A bound no wait in these tests reaches: the waits end by an event or a cancel."""


def test_log_lines_keep_their_context():
    record = logging.makeLogRecord(
        {"msg": "prepare failed", "levelname": "WARNING", "name": "plugin", "claim": "ns/c (u1)"}
    )
    line = KeyValueFormatter("%(levelname)s %(name)s %(message)s").format(record)
    assert line == "WARNING plugin prepare failed claim='ns/c (u1)'"


async def test_wait_event_says_whether_the_event_was_set():
    event = asyncio.Event()
    assert await wait_event(event, 0) is False
    event.set()
    assert await wait_event(event, NEVER_S) is True


async def test_a_cancel_that_lands_as_the_event_is_set_still_cancels_the_waiter():
    """The device plugin's annotation loop hung shutdown this way: set and cancel in one
    loop step, after the waiter parked and before it runs again."""
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_event(event, NEVER_S))

    def set_then_cancel() -> None:
        event.set()
        waiter.cancel()

    # Scheduled after the waiter's first step, which parks it on the event.
    asyncio.get_running_loop().call_soon(set_then_cancel)
    await asyncio.wait([waiter])
    assert waiter.cancelled()
