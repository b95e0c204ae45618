"""`dra-driver simulate`'s node start and stop at scale, without the workloads.

Starts the API emulator and N emulated NVIDIA nodes as `simulate` does (each a
real kubelet plugin with mock GPUs and the kubelet stand-ins, under its own
identity), then stops them, and prints the wall and CPU seconds of each phase.
`--profile FILE` writes a cProfile of the run (the event loop's thread only).

    .venv/bin/python bench/simulate_nodes_bench.py [--nodes 200] [--gpus 8] [--profile F]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import tempfile
import time
from pathlib import Path

from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.identities import Identities
from simulator.nodes import SimNode, start_nodes, stop_nodes
from simulator.settings import ClusterShape, scratch_dir
from simulator.standins.kubelet_pods import PodFeed


def cpu_s() -> float:
    times = os.times()
    return times.user + times.system


async def run(nodes: int, gpus: int) -> None:
    shape = ClusterShape(nodes=nodes, vendors=("nvidia",), gpus_per_node=gpus)
    with tempfile.TemporaryDirectory(prefix="vgpu-bench-", dir=scratch_dir()) as directory:
        root = Path(directory)
        async with APIServer() as server:
            identities = Identities(server, root / "identities")
            admin = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            feed = PodFeed(admin)
            await feed.start()
            started: list[SimNode] = []
            wall, cpu = time.monotonic(), cpu_s()
            try:
                await start_nodes(
                    identities, shape, root, started, feed=feed, controller_allocated=True
                )
                print(
                    f"start {nodes} nodes: {time.monotonic() - wall:6.1f} s wall "
                    f"{cpu_s() - cpu:6.1f} s CPU"
                )
            finally:
                wall, cpu = time.monotonic(), cpu_s()
                await stop_nodes(started)
                await feed.aclose()
                await identities.aclose()
                await admin.aclose()
                print(
                    f"stop {len(started)} nodes:  {time.monotonic() - wall:6.1f} s wall "
                    f"{cpu_s() - cpu:6.1f} s CPU"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--profile", type=Path)
    args = parser.parse_args()
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    if args.profile is None:
        asyncio.run(run(args.nodes, args.gpus))
        return
    profile = cProfile.Profile()
    profile.runcall(asyncio.run, run(args.nodes, args.gpus))
    profile.dump_stats(args.profile)


if __name__ == "__main__":
    main()
