"""Process lifecycle for long-running commands: logging that opens with the build, and
signals that set a stop event."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Iterable

from dra_driver.version import build_info

STARTING = "starting"
"""The message of every long-running component's first log line."""

_log = logging.getLogger(__name__)
_STANDARD_FIELDS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class KeyValueFormatter(logging.Formatter):
    """`time level logger message key=value ...`: the `extra` context (claim,
    node, error) is printed, not dropped, and stays grep-able."""

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        context = {k: v for k, v in vars(record).items() if k not in _STANDARD_FIELDS}
        if context:
            line += " " + " ".join(f"{key}={value!r}" for key, value in sorted(context.items()))
        return line


def configure_logging(level: str, component: str) -> None:
    """Log to stderr at `level`; the first line says which component runs which build."""
    handler = logging.StreamHandler()
    handler.setFormatter(KeyValueFormatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler])
    log_start(component)


def log_start(component: str) -> None:
    """`starting component=... version=... commit=... python=...`, written whatever the
    level: a log kept at WARNING or ERROR still says which release wrote it, which is
    what a reader of a log from the middle of a rolling upgrade needs first."""
    info = build_info()
    context = {
        "component": component,
        "version": info.version,
        "commit": info.commit,
        "python": info.python,
    }
    # Logger.handle skips the level check that _log.info would make.
    _log.handle(
        _log.makeRecord(_log.name, logging.INFO, __file__, 0, STARTING, (), None, None, context)
    )


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None]]) -> None:
    """Cancel the tasks, then wait for each to finish; a task's own error still surfaces."""
    tasks = list(tasks)
    for task in tasks:
        task.cancel()
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def wait_event(event: asyncio.Event, timeout_s: float | None) -> bool:
    """Wait until `event` is set, at most `timeout_s` seconds (None: no limit); True
    when it was set.

    Not `asyncio.wait_for(event.wait(), timeout_s)`: on Python 3.11 that returns
    normally when a cancellation lands just after the event was set, so a loop around
    it runs on and whoever cancelled it (`cancel_and_wait` at shutdown) waits forever.
    """
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def finished_before_stop(stop: asyncio.Event, work: Awaitable[None]) -> bool:
    """Run `work` until it ends or `stop` is set, whichever comes first; True when it
    ended (its error, if any, is raised), False when `stop` cancelled it. A component's
    start that waits on the API server ends this way at SIGTERM, not at SIGKILL."""
    working = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({working, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait([stopper, working])
    return not working.cancelled()


def run_until_signalled(main: Callable[[asyncio.Event], Awaitable[None]]) -> int:
    """Run `main(stop)` on a fresh loop; SIGINT/SIGTERM only set `stop`."""

    async def runner() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await main(stop)

    asyncio.run(runner())
    return 0
