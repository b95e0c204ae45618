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

A server's `stop()` returns when grpc's core has no live call, which is not when the
Python tasks serving those calls have ended: each call's `rpc_task` and its
`HandleExceptions[...]` task learn that their call was cancelled from a completion
that may reach the loop after the shutdown's own (always so on a loaded machine).
Stopping therefore awaits every task that serves one of the stopped server's calls,
found by the call state its coroutine holds, whether or not it is unwinding yet.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Collection
from typing import Any

import grpc

log = logging.getLogger(__name__)

STATUS_TASK = "_AioCall._handle_status_once_received"
"""The coroutine grpc's Cython call runs per call until its status arrives."""

SERVER_CALL_TASKS = ("rpc_task", "HandleExceptions[")
"""How grpc.aio names the two tasks it runs per server-side call."""

UNWIND_TIMEOUT_S = 30.0
"""The most a stop waits for its calls' tasks: a servicer that swallows its cancellation
must not wedge shutdown; it is logged by name instead."""


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


def _server_of(task: asyncio.Task[Any]) -> Any | None:
    """The Cython server whose call a grpc server-side task serves, read from the call
    state (`RPCState`) its coroutine's scope holds; None for any other task."""
    if not task.get_name().startswith(SERVER_CALL_TASKS):
        return None
    for scope in gc.get_referents(task.get_coro()):
        for state in gc.get_referents(scope):
            if type(state).__name__ == "RPCState":
                return next(
                    (r for r in gc.get_referents(state) if type(r).__name__ == "AioServer"),
                    None,
                )
    return None


def server_call_tasks(servers: Collection[grpc.aio.Server]) -> list[asyncio.Task[Any]]:
    """The unfinished tasks serving calls of these servers, in one pass over the loop."""
    cores = {id(server._server) for server in servers}
    return [
        task for task in asyncio.all_tasks() if not task.done() and id(_server_of(task)) in cores
    ]


async def await_server_calls(
    servers: Collection[grpc.aio.Server], timeout_s: float = UNWIND_TIMEOUT_S
) -> None:
    """Wait until every task serving a call of these (stopped) servers has ended."""
    tasks = server_call_tasks(servers)
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    stuck = [task.get_name() for task in pending]
    if stuck:
        log.warning("gRPC calls still running after their server stopped", extra={"tasks": stuck})


async def stop_grpc_server(server: grpc.aio.Server, grace: float | None = None) -> None:
    """Stop the server, then wait for the tasks of every call it served to end.

    Only this server's call tasks are awaited: the live calls of other servers in the
    same loop (another node's plugin in the simulator) must not hold this shutdown up.
    """
    await server.stop(grace)
    await await_server_calls([server])
    await settle_cancelled_grpc_calls()
