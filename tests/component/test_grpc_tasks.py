"""Settling grpc.aio's per-call tasks at shutdown, against a real server on a unix socket.

The full collection that ends an abandoned call's status task is paid only when such a
task is there; a live stream of another channel (another node's health stream in the
simulator) must neither ask for it nor be waited on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dra_driver.process.grpc_tasks import (
    await_server_calls,
    call_is_over,
    orphaned_call_tasks,
    server_call_tasks,
    settle_cancelled_grpc_calls,
    status_task_call,
    stop_grpc_server,
)


@pytest.fixture
async def socket_path(tmp_path: Path) -> AsyncIterator[str]:
    server = grpc.aio.server()
    checker = health.aio.HealthServicer()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    target = f"unix://{tmp_path / 'health.sock'}"
    server.add_insecure_port(target)
    await server.start()
    yield target
    await stop_grpc_server(server)


def status_calls() -> list[object]:
    tasks = [task for task in asyncio.all_tasks() if not task.done()]
    return [call for call in map(status_task_call, tasks) if call is not None]


async def test_a_live_stream_asks_for_no_collection_and_is_not_waited_on(socket_path: str):
    channel = grpc.aio.insecure_channel(socket_path)
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    try:
        first = await stream.read()
        (call,) = status_calls()
        live = call_is_over(call)
        orphaned = orphaned_call_tasks()
        await settle_cancelled_grpc_calls()
        still_streaming = not stream.done()
    finally:
        stream.cancel()
        await channel.close()
        await settle_cancelled_grpc_calls()

    assert first.status == health_pb2.HealthCheckResponse.SERVING
    assert (live, orphaned, still_streaming) == (False, False, True)


async def test_a_status_task_of_a_closed_channels_call_asks_for_the_collection(
    socket_path: str,
):
    channel = grpc.aio.insecure_channel(socket_path)
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    await stream.read()
    await channel.close()
    (call,) = status_calls()
    over = call_is_over(call)
    orphaned = orphaned_call_tasks()
    del call
    await settle_cancelled_grpc_calls()

    assert stream.done()
    assert (over, orphaned) == (True, True)


def test_a_call_whose_state_cannot_be_read_counts_as_over_so_the_collection_runs():
    assert call_is_over(object()) is True


async def serve_health(path: Path) -> grpc.aio.Server:
    server = grpc.aio.server()
    checker = health.aio.HealthServicer()
    await checker.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server


def server_call_task_names() -> list[str]:
    return sorted(
        task.get_name()
        for task in asyncio.all_tasks()
        if not task.done() and task.get_name().startswith(("rpc_task", "HandleExceptions["))
    )


async def test_a_stop_returns_only_once_the_tasks_of_its_calls_in_flight_have_ended(
    tmp_path: Path,
):
    """Calls in flight when the server stops: grpc reports the shutdown done before the
    per-call tasks learn of their cancellation about half the time, so twenty rounds
    catch a stop that returns early (as CI under load did)."""
    leftovers = []
    for round_number in range(20):
        path = tmp_path / f"health-{round_number}.sock"
        server = await serve_health(path)
        async with grpc.aio.insecure_channel(f"unix://{path}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            await stub.Check(health_pb2.HealthCheckRequest())
            calls = [
                asyncio.ensure_future(stub.Check(health_pb2.HealthCheckRequest())) for _ in range(5)
            ]
            await asyncio.sleep(0)
            await stop_grpc_server(server)
            leftovers.append(server_call_task_names())
            await asyncio.gather(*calls, return_exceptions=True)
    assert leftovers == [[]] * 20


async def test_a_stop_waits_for_its_own_calls_only(tmp_path: Path):
    other = await serve_health(tmp_path / "other.sock")
    stopping = await serve_health(tmp_path / "stopping.sock")
    channel = grpc.aio.insecure_channel(f"unix://{tmp_path / 'other.sock'}")
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    try:
        await stream.read()
        await stop_grpc_server(stopping)
        other_still_served = server_call_tasks([other])
    finally:
        stream.cancel()
        await channel.close()
        await stop_grpc_server(other)
    assert sorted(task.get_name() for task in other_still_served) == [
        "HandleExceptions[/grpc.health.v1.Health/Watch]",
        "rpc_task",
    ]


async def test_a_call_that_outlives_the_wait_is_named_rather_than_awaited_forever(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    server = await serve_health(tmp_path / "health.sock")
    channel = grpc.aio.insecure_channel(f"unix://{tmp_path / 'health.sock'}")
    stream = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    try:
        await stream.read()
        await await_server_calls([server], timeout_s=0)
    finally:
        stream.cancel()
        await channel.close()
        await stop_grpc_server(server)
    (record,) = [r for r in caplog.records if "still running" in r.getMessage()]
    assert "HandleExceptions[/grpc.health.v1.Health/Watch]" in record.tasks
