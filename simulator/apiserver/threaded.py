"""Run the emulator on its own event-loop thread, for the synchronous official client."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from .server import APIServer
from .settings import APIServerSettings

STARTUP_TIMEOUT_S = 30.0


@contextmanager
def run_in_thread(settings: APIServerSettings | None = None) -> Iterator[APIServer]:
    """Yield a started APIServer served from a background thread; stop it on exit."""
    server = APIServer(settings)
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as error:  # handed to the caller's thread below
            failure.append(error)
            started.set()
            return
        started.set()
        loop.run_forever()

    thread = threading.Thread(target=serve, name="apiserver-emulator", daemon=True)
    thread.start()
    started.wait(STARTUP_TIMEOUT_S)
    if failure:
        thread.join()
        loop.close()
        raise failure[0]
    try:
        yield server
    finally:
        asyncio.run_coroutine_threadsafe(server.aclose(), loop).result(STARTUP_TIMEOUT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
