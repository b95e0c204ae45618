"""Throughput of the API server emulator as the official client sees it.

    .venv/bin/python bench/apiserver_bench.py [--threads 8] [--requests 4000] \
        [--watchers 10] [--events 10000]

The emulator runs in its own process (so the client threads do not share its
GIL); clients are `kubernetes.client.CoreV1Api` built from the kubeconfig it
writes. Part 1: GET and strategic-merge PATCH of per-thread ConfigMaps from
several threads in `--client-processes` processes, with the emulator's own CPU
time per request. Part 2: `--watchers` `kubernetes.watch.Watch` streams (one
process each) follow one namespace while writer threads make `--events`
changes; every watcher must see every event exactly once, in order.
Target: >= 2,000 requests/s.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing as mp
import os
import tempfile
import threading
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kubernetes import client, config, watch

from simulator.apiserver import run_in_thread

NAMESPACE = "default"


def serve(kubeconfig: str, ready: Connection, stop: Connection) -> None:
    with run_in_thread() as server:
        server.write_kubeconfig(kubeconfig)
        ready.send(server.url)
        stop.recv()


def _core(kubeconfig: str) -> client.CoreV1Api:
    return client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))


def _client_process(
    kubeconfig: str, prefix: str, threads: int, requests: int, start: Any, out: Connection
) -> None:
    """`threads` threads, each with its own ConfigMap, doing GET then PATCH; sends its time."""
    per_thread = requests // threads
    barrier = threading.Barrier(threads + 1)
    failures: list[BaseException] = []

    def worker(index: int) -> None:
        core = _core(kubeconfig)
        name = f"bench-{prefix}-{index}"
        core.create_namespaced_config_map(NAMESPACE, {"metadata": {"name": name}})
        barrier.wait()
        try:
            for step in range(per_thread // 2):
                core.read_namespaced_config_map(name, NAMESPACE)
                core.patch_namespaced_config_map(name, NAMESPACE, {"data": {"step": str(step)}})
        except BaseException as error:
            failures.append(error)

    workers = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in workers:
        thread.start()
    start.wait()
    barrier.wait()
    began = time.perf_counter()
    for thread in workers:
        thread.join()
    out.send((threads * (per_thread // 2) * 2, time.perf_counter() - began, repr(failures[:1])))


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def request_throughput(
    kubeconfig: str, threads: int, requests: int, processes: int, server_pid: int
) -> None:
    """GET+PATCH throughput over `processes` client processes, and the emulator's own CPU
    per request: the official client costs several times what the emulator does, so on a
    small machine the clients, not the emulator, set the rate."""
    context = mp.get_context("spawn")
    start = context.Barrier(processes + 1)
    pipes, workers = [], []
    for index in range(processes):
        receive, send = context.Pipe(duplex=False)
        arguments = (kubeconfig, str(index), threads, requests // processes, start, send)
        worker = context.Process(target=_client_process, args=arguments)
        worker.start()
        pipes.append(receive)
        workers.append(worker)
    before = _cpu_seconds(server_pid)
    start.wait()
    results = [pipe.recv() for pipe in pipes]
    server_cpu = _cpu_seconds(server_pid) - before
    for worker in workers:
        worker.join()
    for _, _, failure in results:
        if failure != "[]":
            raise SystemExit(f"a client failed: {failure}")
    done = sum(count for count, _, _ in results)
    elapsed = max(seconds for _, seconds, _ in results)
    per_request_ms = server_cpu / done * 1000
    print(
        f"GET+PATCH: {done} requests from {processes} x {threads} client threads in "
        f"{elapsed:.2f} s = {done / elapsed:,.0f} req/s"
    )
    print(
        f"emulator CPU: {per_request_ms:.3f} ms per request "
        f"(one core serves {1000 / per_request_ms:,.0f} req/s)"
    )


def watch_one(
    kubeconfig: str, namespace: str, since: str, events: int, ready: Connection, out: Connection
) -> None:
    core = _core(kubeconfig)
    w = watch.Watch()
    versions: list[int] = []
    announced = False
    stream = w.stream(core.list_namespaced_config_map, namespace, resource_version=since)
    for event in stream:
        # The marker written before the watchers started: seeing it means this one is live
        # (a real server sends no bookmark at the start of a watch to tell).
        if not announced:
            ready.send(True)
            announced = True
            continue
        versions.append(int(event["raw_object"]["metadata"]["resourceVersion"]))
        if len(versions) == events:
            w.stop()
    ordered = all(a < b for a, b in itertools.pairwise(versions))
    out.send((len(versions), len(set(versions)), ordered))


def watch_fan_out(kubeconfig: str, watchers: int, events: int, writers: int) -> None:
    core = _core(kubeconfig)
    namespace = "fan-out"
    core.create_namespace({"metadata": {"name": namespace}})
    since = core.list_namespaced_config_map(namespace).metadata.resource_version
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "marker"}})
    context = mp.get_context("spawn")
    pipes, processes = [], []
    for _ in range(watchers):
        ready_recv, ready_send = context.Pipe(duplex=False)
        out_recv, out_send = context.Pipe(duplex=False)
        arguments = (kubeconfig, namespace, since, events, ready_send, out_send)
        process = context.Process(target=watch_one, args=arguments)
        process.start()
        pipes.append((ready_recv, out_recv))
        processes.append(process)
    for ready_recv, _ in pipes:
        ready_recv.recv()
    per_writer = events // writers

    def writer(index: int) -> None:
        own = _core(kubeconfig)
        for step in range(per_writer):
            own.create_namespaced_config_map(namespace, {"metadata": {"name": f"w{index}-{step}"}})

    started = time.perf_counter()
    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    written = time.perf_counter() - started
    results = [out_recv.recv() for _, out_recv in pipes]
    delivered = time.perf_counter() - started
    for process in processes:
        process.join()
    total = writers * per_writer
    complete = all(r == (total, total, True) for r in results)
    print(
        f"watch fan-out: {total} events x {watchers} watchers; writes took {written:.2f} s "
        f"({total / written:,.0f} writes/s), all delivered after {delivered:.2f} s "
        f"({total * watchers / delivered:,.0f} events/s); none lost, in order: {complete}"
    )
    if not complete:
        raise SystemExit(f"watchers saw (count, distinct, ordered) = {results}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8, help="client threads per process")
    parser.add_argument(
        "--client-processes", type=int, default=2, help="client processes for GET/PATCH"
    )
    parser.add_argument("--requests", type=int, default=4000, help="total GET+PATCH requests")
    parser.add_argument("--watchers", type=int, default=10, help="concurrent watch streams")
    parser.add_argument("--events", type=int, default=10_000, help="events every watcher must see")
    parser.add_argument("--writers", type=int, default=4, help="writer threads for the fan-out")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        kubeconfig = str(Path(directory) / "config")
        ready_recv, ready_send = context.Pipe(duplex=False)
        stop_recv, stop_send = context.Pipe(duplex=False)
        server = context.Process(target=serve, args=(kubeconfig, ready_send, stop_recv))
        server.start()
        print(f"emulator at {ready_recv.recv()} (separate process)")
        try:
            request_throughput(
                kubeconfig, args.threads, args.requests, args.client_processes, server.pid
            )
            watch_fan_out(kubeconfig, args.watchers, args.events, args.writers)
        finally:
            stop_send.send(True)
            server.join()


if __name__ == "__main__":
    main()
