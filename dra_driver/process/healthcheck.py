"""`dra-driver healthcheck`: ask a component's own gRPC sockets whether it serves.

A liveness probe that checks a flag would keep a plugin alive whose sockets
kubelet can no longer reach (wiped directory, wedged server). This asks the
standard grpc.health.v1 service over each unix socket, as a client would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc


async def check_socket(path: Path, timeout_s: float) -> str | None:
    """None when the server at `path` answers SERVING, else why not."""
    if not path.is_socket():
        return f"{path}: no socket"
    async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
        except grpc.aio.AioRpcError as error:
            return f"{path}: {error.code().name} {error.details()}"
    if answer.status != health_pb2.HealthCheckResponse.SERVING:
        return f"{path}: {health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)}"
    return None


async def check_sockets(paths: Sequence[Path], timeout_s: float = 3.0) -> list[str]:
    """Every problem found, one line per socket; empty when all serve."""
    results = await asyncio.gather(*(check_socket(path, timeout_s) for path in paths))
    return [problem for problem in results if problem is not None]
