"""Process lifecycle for long-running commands: signals set a stop event."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable


def configure_logging(level: str = "INFO") -> None:
    """Structured-enough logs: level, logger, message, then the `extra` context."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s"
    )


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
