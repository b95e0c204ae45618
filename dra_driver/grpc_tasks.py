"""Shutting grpc.aio down without leaving its per-call tasks behind.

`Server.stop()` and `Channel.close()` return while grpc's own per-call tasks
are still unwinding their cancellation; awaiting those keeps shutdown clean
(and the test suite's leaked-task check honest).
"""

from __future__ import annotations

import asyncio

import grpc


async def settle_cancelled_grpc_calls() -> None:
    """Await tasks already being cancelled; live calls elsewhere are never waited on."""
    unwinding = [t for t in asyncio.all_tasks() if t.cancelling() and not t.done()]
    unwinding = [t for t in unwinding if t is not asyncio.current_task()]
    await asyncio.gather(*unwinding, return_exceptions=True)


async def stop_grpc_server(server: grpc.aio.Server, grace: float | None = None) -> None:
    """Stop the server, then let the per-call tasks it cancelled finish."""
    await server.stop(grace)
    leftovers = [t for t in asyncio.all_tasks() if t.get_name() == "rpc_task" and not t.done()]
    await asyncio.gather(*leftovers, return_exceptions=True)
    await settle_cancelled_grpc_calls()
