"""The real `dra-driver controller` as controller_bench.py runs it: a subprocess on the
allocator its Deployment uses, leading through a Lease, with its /metrics; and the
bench's own threads niced below it."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes.util
import os
import socket
import sys
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from controller_bench_cluster import NAMESPACE

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from dra_driver.process.allocator import jemalloc_env

LEADER_TIMEOUT_S = 120
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class ControllerProcess:
    """The real `dra-driver controller`, its /metrics and its /proc figures."""

    def __init__(self, kubeconfig: Path, env: Mapping[str, str]) -> None:
        self.kubeconfig = kubeconfig
        self.env = env
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, client: KubeClient) -> None:
        """Start it and wait until it leads: a Lease held by a holder that held none
        before (it checked the API and serves /metrics; an earlier mode's controller
        released its own on exit)."""
        leases = Informer(client, LEASES)
        task = asyncio.create_task(leases.run())

        def holders() -> set[str]:
            return {
                (lease.get("spec") or {}).get("holderIdentity") or ""
                for lease in leases.store.values()
            }

        try:
            await leases.synced.wait()
            before = holders() | {""}
            self.process = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "dra_driver.cli",
                "controller",
                "--kubeconfig",
                str(self.kubeconfig),
                "--metrics-host",
                "127.0.0.1",
                "--metrics-port",
                str(self.port),
                "--log-level",
                "WARNING",
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )
            async with asyncio.timeout(LEADER_TIMEOUT_S):
                await leases.wait_for(lambda store: bool(holders() - before))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    async def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        return await asyncio.to_thread(
            lambda: urllib.request.urlopen(url, timeout=60).read().decode()
        )

    async def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        with contextlib.suppress(ProcessLookupError):
            await self.process.wait()


def yield_cpu_to(pid: int, step: int) -> tuple[int, int]:
    """Put every thread of this process (emulator, stand-ins, client) `step` niceness
    levels below the controller (at most 19); (controller's, this process's) niceness.

    On a cluster the API server and kube-scheduler run elsewhere; here they share two
    cores with the controller, and at equal priority their threads preempt it in the
    middle of decisions: measured per decision, every decision over 5 ms had spent
    over 3 ms of it off the CPU (CPU time p99 1.2 ms). Raising niceness needs no
    privilege; a thread started later inherits it from the one that starts it.
    """
    controller = os.getpriority(os.PRIO_PROCESS, pid)
    target = min(19, controller + step)
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):
            if os.getpriority(os.PRIO_PROCESS, int(tid)) < target:
                os.setpriority(os.PRIO_PROCESS, int(tid), target)
    return controller, target


ALLOCATOR_SERIES = "vgpu_controller_memory_allocator_info"


def controller_env(allocator: str) -> dict[str, str]:
    """The controller's environment for `--allocator`: the Deployment's (JEMALLOC_ENV,
    with this machine's library) or Python's default; exits if jemalloc is missing."""
    if allocator == "pymalloc":
        return {}
    library = ctypes.util.find_library("jemalloc")
    if library is None:
        sys.exit(
            "controller_bench: jemalloc is not installed, and the controller is deployed on "
            "it (Debian/Ubuntu: apt-get install libjemalloc2); or pass --allocator pymalloc"
        )
    return jemalloc_env(library)
