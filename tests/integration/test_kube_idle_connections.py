"""A client built with `idle_keepalive_s` closes a pooled connection once it has been idle
that long, while aiohttp's default pool (15 s) still holds its own: what the controller
relies on to give back, after a burst, the connections the burst opened."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from dra_driver.kube.rest import KubeClient

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class ConnectionLog:
    """A loopback HTTP/1.1 server answering `{}` on kept-alive connections; it records, by
    User-Agent, the order in which clients hung up."""

    def __init__(self) -> None:
        self.hung_up: list[str] = []
        self.first_hang_up = asyncio.Event()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        agent = ""
        try:
            while True:
                agent = user_agent(await reader.readuntil(b"\r\n\r\n"))
                writer.write(RESPONSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionResetError):
            self.hung_up.append(agent)
            self.first_hang_up.set()
        finally:
            writer.close()


def user_agent(head: bytes) -> str:
    for line in head.decode().split("\r\n"):
        name, _, value = line.partition(":")
        if name.lower() == "user-agent":
            return value.strip()
    return ""


def write_kubeconfig(path: Path, url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "loop", "cluster": {"server": url}}],
                "users": [{"name": "loop", "user": {"token": "t"}}],
                "contexts": [{"name": "loop", "context": {"cluster": "loop", "user": "loop"}}],
                "current-context": "loop",
            }
        )
    )
    return path


async def test_an_idle_connection_closes_after_the_keepalive_given(tmp_path: Path):
    log = ConnectionLog()
    server = await asyncio.start_server(log.serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    default = await KubeClient.from_kubeconfig(kubeconfig, component="default")
    short = await KubeClient.from_kubeconfig(kubeconfig, component="short", idle_keepalive_s=0.2)
    try:
        assert await default.get("/api/v1/nodes") == {}
        assert await short.get("/api/v1/nodes") == {}
        await log.first_hang_up.wait()
        assert log.hung_up == ["vgpu-dra-driver/short"]
    finally:
        await short.aclose()
        await default.aclose()
        server.close()
        await server.wait_closed()
    assert sorted(log.hung_up) == ["vgpu-dra-driver/default", "vgpu-dra-driver/short"]
