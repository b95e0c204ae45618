"""Which part of the emulated cluster failed, and at what.

Dozens of components share one process and one API server: an error that says
only `ConnectionError` (or a bare timeout) cannot be traced to a node or a
request. Every start step and every read of the simulation runs through
`run_as`, so what reaches the command line names the component first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, TypeVar

from dra_driver.errors import DriverError
from dra_driver.kube.rest import ApiError

T = TypeVar("T")


class ComponentError(DriverError):
    """`<component>: <what failed>`, e.g. `kubelet plugin on sim-node-12: PUT ...`."""

    def __init__(self, component: str, failure: str) -> None:
        super().__init__(f"{component}: {failure}")
        self.component = component
        self.failure = failure


async def run_as(
    component: str, step: Awaitable[T], *, timeout_s: float | None = None, doing: str = ""
) -> T:
    """Await `step` of `component`; its driver errors, and a wait past `timeout_s`
    (`doing` says what it waited for), come back as that component's errors."""
    try:
        async with asyncio.timeout(timeout_s):
            return await step
    except ComponentError:
        raise
    except DriverError as error:
        raise ComponentError(component, failure_text(error)) from error
    except TimeoutError as error:
        limit = f" within {timeout_s:g} s" if timeout_s is not None else ""
        raise ComponentError(component, f"{doing or 'a step'}: not done{limit}") from error


def failure_text(error: DriverError) -> str:
    """The error, led by the request it refused when the text does not name it."""
    text = str(error)
    request = error.request if isinstance(error, ApiError) else ""
    return f"{request}: {text}" if request and request not in text else text


def first_failure(error: BaseException) -> BaseException:
    """The first leaf of a (nested) exception group: what one failed task raised."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def first_of(running: asyncio.Task[Any], ready: Awaitable[Any]) -> None:
    """Wait for `ready`, unless `running` (the component's task) ends first: then
    raise what it raised, rather than wait for a readiness that cannot come."""
    waiter = asyncio.ensure_future(ready)
    try:
        await asyncio.wait((running, waiter), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not waiter.done():
            waiter.cancel()
            await asyncio.gather(waiter, return_exceptions=True)
    if waiter.done() and not waiter.cancelled():
        return
    running.result()
    raise DriverError("stopped before it was ready")
