"""Shutting grpc.aio down without leaving its per-call tasks behind.

`Server.stop()` and `Channel.close()` return while grpc's own per-call tasks
are still unwinding their cancellation; awaiting those keeps shutdown clean
(and the test suite's leaked-task check honest).

A full `gc.collect()` is what ends the status task of a call nobody holds any
more, but it walks the whole heap (about 0.2 s in a simulated 15-node cluster,
paid once per server and per kubelet at shutdown). It is run only when such a
task is there: one whose call has ended or whose channel is closed. The live
streams of other channels in the same loop (another node's health stream) do
not ask for it.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import grpc

STATUS_TASK = "_AioCall._handle_status_once_received"
"""The coroutine grpc's Cython call runs per call until its status arrives."""


def status_task_call(task: asyncio.Task[Any]) -> Any | None:
    """The Cython call a status task belongs to, from the coroutine's closure (its direct
    referents only, so this costs nothing like a collection); None if it is not one."""
    coroutine = task.get_coro()
    if getattr(coroutine, "__qualname__", "") != STATUS_TASK:
        return None
    for scope in gc.get_referents(coroutine):
        for referent in gc.get_referents(scope):
            if type(referent).__name__ == "_AioCall":
                return referent
    return coroutine


def call_is_over(call: Any) -> bool:
    """True for a call that ended or whose channel is closed; a call grpc's internals no
    longer let us read counts as over, so the collection still runs then."""
    try:
        return bool(call.done() or call._channel.closed())
    except AttributeError:
        return True


def orphaned_call_tasks() -> bool:
    """Whether a grpc status task is waiting for a call that is already over, which only
    collecting the call object (its `__del__` cancels the task) will end."""
    pending = (task for task in asyncio.all_tasks() if not task.done())
    calls = (status_task_call(task) for task in pending)
    return any(call_is_over(call) for call in calls if call is not None)


async def _await_unwinding() -> None:
    """One loop turn for cancellations to land, then await every task being cancelled."""
    current = asyncio.current_task()
    await asyncio.sleep(0)
    unwinding = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    await asyncio.gather(*[t for t in unwinding if t.cancelling()], return_exceptions=True)


async def settle_cancelled_grpc_calls() -> None:
    """Let grpc.aio's own per-call tasks finish what closing our channels started.

    A stream call whose channel was closed keeps a status task that grpc cancels only
    when the call object is collected; collecting then, and giving the loop one turn,
    ends those tasks here instead of at some later, arbitrary moment. Only tasks
    already unwinding are awaited, so live calls of other channels are never waited on.
    """
    if orphaned_call_tasks():
        gc.collect()
    await _await_unwinding()


async def stop_grpc_server(server: grpc.aio.Server, grace: float | None = None) -> None:
    """Stop the server, then let the per-call tasks it cancelled finish.

    Only tasks being cancelled are awaited: the live calls of other servers in the same
    loop (another node's plugin in the simulator) must not hold this shutdown up.
    """
    await server.stop(grace)
    leftovers = [
        t
        for t in asyncio.all_tasks()
        if t.get_name() == "rpc_task" and not t.done() and t.cancelling()
    ]
    await asyncio.gather(*leftovers, return_exceptions=True)
    await settle_cancelled_grpc_calls()
