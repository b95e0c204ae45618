"""The allocation gate's effect: writes per pod by component, and kube-scheduler's failed tries.

Without the gate kube-scheduler tries each pod of our classes before the controller's
allocation lands, fails it (on a real v1.36 control plane a `FailedScheduling` Warning
and a status write, then the pod waits in its backoff) and binds it on a later try.
With it (issue 34 item 2), admission gates the pod, the controller allocates and
reserves its claims and removes its gate, and kube-scheduler meets the pod once, ready.

Per path (`ungated`: pods created as they are; `gated`: through the controller's real
/allocation-gate webhook, over TLS, as kube-apiserver calls it) and claim mode
(`templates`: pods name one of eight ResourceClaimTemplates; `precreated`: the bench
creates each pod's claim first), one round against a fresh emulator: the cluster of
controller_bench.py (N Ready nodes x G GPUs, tainted for the controller), the real
controller in this process, the kube-scheduler and kube-controller-manager stand-ins;
`--pods` pods offered at once, until every pod is bound. Printed: creation -> bound
p50/p99; the writes per pod by client and resource[/subresource] (the emulator's
audit; the controller writes claim status and, gated, removes its gate with one pod
patch; kube-scheduler binds and, where it failed a pod, writes its status); how many
Unschedulable verdicts kube-scheduler's stand-in wrote per pod, and on how many pods
(each is a `FailedScheduling` Warning on a real control plane; the stand-in writes the
status, not the event), and the `FailedScheduling` events in the API (goal 0).

At 50 x 8, 400 pods, on this 2-core machine: ungated, kube-scheduler failed 86 % of
template pods (0.86 status writes per pod) and 15 % of pods with pre-created claims;
gated, none: kube-scheduler wrote only the binding (1.00/pod), the controller claim
status plus its gate removal (2.00/pod).

    .venv/bin/python bench/gate_bench.py [--nodes 50] [--gpus 8] [--pods 400]
        [--paths both|gated|ungated] [--claims both|templates|precreated]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from controller_bench import CREATE_CONCURRENCY, Tracker
from controller_bench_cluster import (
    CLAIMS,
    NAMESPACE,
    PODS,
    SIZES_GIB,
    build_cluster,
    claim_body,
    percentile,
    pod_body,
    template_name,
    write_lines,
)
from kubernetes import config as sync_config
from prometheus_client import CollectorRegistry

from controller.controller import Controller
from controller.metrics import ControllerMetrics
from controller.settings import ControllerSettings
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from dra_driver.process.runtime import cancel_and_wait
from simulator.apiserver import APIServer, run_in_thread
from simulator.dra import (
    CONTROLLER_COMPONENT,
    CONTROLLER_RETRY_S,
    SCHEDULER_INITIAL_BACKOFF_S,
    SCHEDULER_MAX_BACKOFF_S,
    SCHEDULER_POLL_S,
)
from simulator.gate_admission import NoGateAdmission, PodAdmission, start_gate_admission
from simulator.standins.claim_templates import ClaimTemplateController
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings

ROUND_TIMEOUT_S = 1800
FAILED_SCHEDULING = "FailedScheduling"


class Verdicts:
    """Pods kube-scheduler's stand-in marked Unschedulable, and how often (each write
    of the condition is one failed try)."""

    def __init__(self) -> None:
        self.tries: dict[str, int] = {}
        self._seen: dict[str, str] = {}

    def on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") != "PodScheduled" or condition.get("status") != "False":
                continue
            if condition.get("reason") != "Unschedulable":
                continue
            stamp = f"{condition.get('lastTransitionTime')}|{condition.get('message')}"
            stamp += f"|{pod['metadata'].get('resourceVersion')}"
            if self._seen.get(name) != stamp:
                self._seen[name] = stamp
                self.tries[name] = self.tries.get(name, 0) + 1


async def create_pods(
    client: KubeClient, admission: PodAdmission, tracker: Tracker, mode: str
) -> float:
    """Offer the round's pods (and pre-created claims) through admission; seconds taken."""
    semaphore = asyncio.Semaphore(CREATE_CONCURRENCY)
    first = time.perf_counter()

    async def create(i: int) -> None:
        name = f"{tracker.prefix}{i:05d}"
        size = SIZES_GIB[i % len(SIZES_GIB)]
        async with semaphore:
            tracker.created[name] = time.perf_counter()
            if mode == "precreated":
                await client.create(CLAIMS, claim_body(name, size))
                entry = {"resourceClaimName": name}
            else:
                entry = {"resourceClaimTemplateName": template_name(size)}
            pod = await admission.admit(pod_body(name, entry), NAMESPACE)
            await client.create(PODS, pod)

    await asyncio.gather(*(create(i) for i in range(tracker.expected)))
    return time.perf_counter() - first


async def start_controller(stack: AsyncExitStack, client: KubeClient) -> ControllerSettings:
    """The controller in this process, as the simulation runs it; its settings once ready."""
    settings = ControllerSettings(retry_initial_s=CONTROLLER_RETRY_S)
    recorder = EventRecorder(client, EventSettings(component="vgpu-dra-controller"))
    recorder.start()
    stack.push_async_callback(recorder.aclose)
    controller = Controller(client, settings, ControllerMetrics(CollectorRegistry()), recorder)
    running = asyncio.create_task(controller.run(), name="controller")
    stack.push_async_callback(cancel_and_wait, [running])
    await controller.ready.wait()
    return settings


async def run_round(
    server: APIServer, scratch: Path, args: argparse.Namespace, path: str, mode: str
) -> None:
    kubeconfig = server.write_kubeconfig(scratch / f"{path}-{mode}.kubeconfig")
    async with AsyncExitStack() as stack:
        client = await KubeClient.from_kubeconfig(kubeconfig, component="bench")
        stack.push_async_callback(client.aclose)
        controller_client = client.for_component(CONTROLLER_COMPONENT)
        await build_cluster(client, args.nodes, args.gpus)
        tracker = Tracker(prefix=f"{path[:2]}-{mode[:4]}-", expected=args.pods)
        verdicts = Verdicts()
        claims, pods = Informer(client, CLAIMS), Informer(client, PODS)
        claims.handlers.append(tracker.on_claim)
        pods.handlers.extend([tracker.on_pod, verdicts.on_pod])
        sync_client = sync_config.new_client_from_config(config_file=str(kubeconfig))
        stack.push_async_callback(asyncio.to_thread, sync_client.close)
        scheduler = DRAScheduler(
            sync_client,
            settings=SchedulerSettings(
                allocate=False,
                poll_interval=SCHEDULER_POLL_S,
                initial_backoff=SCHEDULER_INITIAL_BACKOFF_S,
                max_backoff=SCHEDULER_MAX_BACKOFF_S,
            ),
        )
        templates = ClaimTemplateController(client)
        await templates.start()
        stack.push_async_callback(templates.aclose)
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(claims.run(), name="bench: claims"),
            asyncio.create_task(pods.run(), name="bench: pods"),
            asyncio.create_task(scheduler.run(stop), name="kube-scheduler"),
        ]
        stack.push_async_callback(cancel_and_wait, tasks)
        stack.callback(stop.set)
        settings = await start_controller(stack, controller_client)
        admission: PodAdmission = NoGateAdmission()
        if path == "gated":
            admission = await start_gate_admission(
                stack, controller_client, settings.device_classes, server.tokens, scratch / path
            )
        await claims.synced.wait()
        await pods.synced.wait()
        server.audit.reset()
        offered_s = await create_pods(client, admission, tracker, mode)
        try:
            async with asyncio.timeout(ROUND_TIMEOUT_S):
                await tracker.done.wait()
        except TimeoutError:
            print(f"  TIMED OUT: {len(tracker.bound)}/{args.pods} bound")
        writes, refused = server.audit.write_counts(), server.audit.refused_counts()
        events = (await client.list(f"/api/v1/namespaces/{NAMESPACE}/events"))["items"]
        events += (await client.list(f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"))[
            "items"
        ]
    latencies = [tracker.bound[name] - tracker.created[name] for name in tracker.bound]
    p50, p99 = (percentile(latencies, q) * 1000 for q in (0.5, 0.99))
    failed = [e for e in events if e.get("reason") == FAILED_SCHEDULING]
    tried = sum(verdicts.tries.values())
    print(
        f"[{path} {mode}] {args.pods} pods offered in {offered_s:.1f} s; created -> bound "
        f"p50 {p50:.0f} ms, p99 {p99:.0f} ms"
    )
    print("  writes per pod (client: resource[/subresource] per pod):")
    for line in write_lines(writes, refused, args.pods):
        print("  " + line)
    print(
        f"  kube-scheduler Unschedulable verdicts: {tried / args.pods:.2f}/pod, on "
        f"{len(verdicts.tries)} of {args.pods} pods ({len(verdicts.tries) / args.pods:.0%}); "
        f"FailedScheduling events: {len(failed) / args.pods:.2f}/pod (goal 0)"
    )


async def run(args: argparse.Namespace) -> None:
    paths = ["ungated", "gated"] if args.paths == "both" else [args.paths]
    modes = ["templates", "precreated"] if args.claims == "both" else [args.claims]
    print(f"cluster: {args.nodes} nodes x {args.gpus} GPUs, {args.pods} pods per round")
    for mode in modes:
        for path in paths:
            with run_in_thread() as server, tempfile.TemporaryDirectory() as scratch:
                await run_round(server, Path(scratch), args, path, mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--paths", choices=("both", "gated", "ungated"), default="both")
    parser.add_argument("--claims", choices=("both", "templates", "precreated"), default="both")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
