"""Shutting grpc.aio down without leaving its per-call tasks behind.

`Server.stop()` and `Channel.close()` return while grpc's own per-call tasks
are still unwinding their cancellation; awaiting those keeps shutdown clean
(and the test suite's leaked-task check honest).
"""

from __future__ import annotations

import asyncio
import gc

import grpc


async def settle_cancelled_grpc_calls() -> None:
    """Let grpc.aio's own per-call tasks finish what closing our channels started.

    A stream call whose channel was closed keeps a status task that grpc cancels only
    when the call object is collected; collecting now, then giving the loop one turn,
    ends those tasks here instead of at some later, arbitrary moment. Only tasks
    already unwinding are awaited, so live calls of other channels are never waited on.
    """
    gc.collect()
    current = asyncio.current_task()
    await asyncio.sleep(0)
    unwinding = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
    await asyncio.gather(*[t for t in unwinding if t.cancelling()], return_exceptions=True)


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
