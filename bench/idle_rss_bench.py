"""Idle resident memory of `dra-driver kubelet-plugin` and `dra-driver controller`.

    .venv/bin/python bench/idle_rss_bench.py [--nodes 20] [--gpus 2]

The API emulator runs in this process. The kubelet plugin starts as its own
process with the mock backend (`--gpus` GPUs) on node-0, `/metrics` off (its
default serves them: add aiohttp.web's ~2 MiB); once its ResourceSlice
is in the API, copies of it stand for the other `--nodes` - 1 nodes, and the
controller starts (leader-elected). Each process's VmRSS (and VmHWM, its peak)
is read from /proc/<pid>/status once it is idle: the plugin after its slice is
published, the controller after it holds the Lease and serves /metrics. Goal:
the plugin <= 80 MiB.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import socket
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

from dra_driver.kube.rest import ApiError, KubeClient
from simulator.apiserver import APIServer

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/vgpu-hami-io-controller"
POLL_S = 0.1
PLUGIN_GOAL_MIB = 80.0


def _mock_gpus(count: int) -> str:
    rows = [
        f"  - {{uuid: GPU-00000000-0000-0000-0000-{index:012d}, index: {index}, memory: 80Gi}}"
        for index in range(count)
    ]
    return "gpus:\n" + "\n".join(rows) + "\n"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _memory_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of a process, in MiB (/proc reports kB)."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    return values


async def _until(check: Callable[[], Awaitable[bool]], what: str, process: Any) -> None:
    """Poll until `check` holds; a process that exits first is a failed run."""
    while not await check():
        if process.returncode is not None:
            raise SystemExit(f"{what}: the process exited with {process.returncode}")
        await asyncio.sleep(POLL_S)


async def _start(root: Path, kubeconfig: Path, *argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dra_driver.cli", *argv,
        "--kubeconfig", str(kubeconfig), "--log-level", "ERROR",
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        cwd=root,
    )  # fmt: skip


async def _plugin(root: Path, kubeconfig: Path, gpus: int) -> asyncio.subprocess.Process:
    (root / "gpus.yaml").write_text(_mock_gpus(gpus))
    for name in ("registry", "plugin", "cdi", "vgpu", "vgpulock"):
        (root / name).mkdir()
    return await _start(
        root, kubeconfig, "kubelet-plugin",
        "--node-name", "node-0",
        "--mock-gpus", str(root / "gpus.yaml"),
        "--registry-dir", str(root / "registry"),
        "--plugin-dir", str(root / "plugin"),
        "--cdi-dir", str(root / "cdi"),
        "--vgpu-dir", str(root / "vgpu"),
        "--lock-dir", str(root / "vgpulock"),
        "--controller-allocated",
        "--metrics-port", "0",
    )  # fmt: skip


async def _copy_slices(client: KubeClient, nodes: int) -> None:
    """The other nodes' slices: node-0's, renamed."""
    (published,) = (await client.list(SLICES))["items"]
    for index in range(1, nodes):
        node = f"node-{index}"
        body = copy.deepcopy(published)
        body["metadata"] = {"name": f"{node}-vgpu.hami.io"}
        body["spec"]["nodeName"] = node
        body["spec"]["pool"]["name"] = node
        await client.create(SLICES, body)


async def _has_slice(client: KubeClient) -> bool:
    return bool((await client.list(SLICES))["items"])


async def _leads_and_serves(client: KubeClient, metrics_url: str) -> bool:
    try:
        lease = await client.get(LEASE)
    except ApiError:
        return False
    if not lease.get("spec", {}).get("holderIdentity"):
        return False
    try:
        async with aiohttp.ClientSession() as session, session.get(metrics_url) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


async def run(nodes: int, gpus: int) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="vgpu-rss-", dir="/tmp") as directory:
        root = Path(directory)
        async with APIServer() as server:
            kubeconfig = server.write_kubeconfig(root / "kubeconfig")
            client = await KubeClient.from_kubeconfig(kubeconfig)
            processes: list[asyncio.subprocess.Process] = []
            try:
                for index in range(nodes):
                    await client.create("/api/v1/nodes", {"metadata": {"name": f"node-{index}"}})
                plugin = await _plugin(root, kubeconfig, gpus)
                processes.append(plugin)
                await _until(lambda: _has_slice(client), "kubelet-plugin", plugin)
                figures = {"kubelet-plugin": _memory_mib(plugin.pid)}
                await _copy_slices(client, nodes)
                port = _free_port()
                controller = await _start(
                    root, kubeconfig, "controller", "--metrics-port", str(port)
                )
                processes.append(controller)
                url = f"http://127.0.0.1:{port}/metrics"
                await _until(lambda: _leads_and_serves(client, url), "controller", controller)
                figures["controller"] = _memory_mib(controller.pid)
                figures["kubelet-plugin, after"] = _memory_mib(plugin.pid)
                return figures
            finally:
                for process in processes:
                    if process.returncode is None:
                        process.terminate()
                        await process.wait()
                await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--gpus", type=int, default=2, help="mock GPUs of the plugin's node")
    args = parser.parse_args()
    figures = asyncio.run(run(args.nodes, args.gpus))
    print(f"idle memory, {args.nodes} nodes, {args.gpus} mock GPUs per node (MiB)")
    for name, values in figures.items():
        print(f"  {name:24} VmRSS {values['VmRSS']:6.1f}   VmHWM {values['VmHWM']:6.1f}")
    plugin = figures["kubelet-plugin"]["VmRSS"]
    verdict = "meets" if plugin <= PLUGIN_GOAL_MIB else "misses"
    print(f"  kubelet-plugin {verdict} the goal of <= {PLUGIN_GOAL_MIB:.0f} MiB")


if __name__ == "__main__":
    main()
