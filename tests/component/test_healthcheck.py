"""`dra-driver healthcheck` against real grpc.health.v1 servers on unix sockets."""

from __future__ import annotations

import socket
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from dra_driver.cli import main
from dra_driver.process.grpc_tasks import stop_grpc_server
from dra_driver.process.healthcheck import check_sockets


async def serve_health(path: Path, status: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    checker = health.aio.HealthServicer()
    await checker.set("", status)
    health_pb2_grpc.add_HealthServicer_to_server(checker, server)
    server.add_insecure_port(f"unix://{path}")
    await server.start()
    return server


async def test_serving_sockets_pass_and_others_are_named(tmp_path: Path):
    serving, not_serving, missing = tmp_path / "a.sock", tmp_path / "b.sock", tmp_path / "c.sock"
    servers = [
        await serve_health(serving, health_pb2.HealthCheckResponse.SERVING),
        await serve_health(not_serving, health_pb2.HealthCheckResponse.NOT_SERVING),
    ]
    try:
        assert await check_sockets([serving]) == []
        problems = await check_sockets([serving, not_serving, missing])
    finally:
        for server in servers:
            await stop_grpc_server(server)
    assert problems == [f"{not_serving}: NOT_SERVING", f"{missing}: no socket"]


async def test_a_socket_nobody_serves_is_unavailable(tmp_path: Path):
    path = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as stale:
        stale.bind(str(path))
        (problem,) = await check_sockets([path], timeout_s=2.0)
    assert problem.startswith(f"{path}: UNAVAILABLE")


def test_cli_exit_status(tmp_path: Path, capsys):
    assert main(["healthcheck", "--socket", str(tmp_path / "none.sock")]) == 1
    assert "none.sock: no socket" in capsys.readouterr().err
