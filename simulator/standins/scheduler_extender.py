"""A kube-scheduler stand-in for the extender HTTP protocol (wire fixtures scheduler-extender/).

It posts what kube-scheduler v1.36 posts and reacts as it did: ExtenderArgs with Go field
names and all three keys (`NodeNames` when nodeCacheCapable, else a full `Nodes` list,
the other key null), the pod as the scheduler holds it (no apiVersion/kind/managedFields,
canonical quantities), compact JSON with Go's HTTP client headers; calls one after
another share one kept-alive connection, overlapping binds open more (Go's transport does);
`/bind` after a feasible filter, and `schedule_queue` runs many pods as kube-scheduler's
queue does (filters one at a time, binds concurrently). A non-empty `Error`, a transport failure or
a node the extender made up is a SchedulerError (message verbatim, backoff 1 s doubling
to 10 s, the next try a whole new filter+bind cycle); rejecting every node is
Unschedulable, with the scheduler's exact message, one immediate retry (caused by its
own status write) and then retries only on cluster events. A `NodeNames` answer is
ignored when nodeCacheCapable is false.
"""

from __future__ import annotations

import asyncio
import copy
import json
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp

from dra_driver.errors import DriverError, InvalidParameterError
from simulator.standins.admission import defaulted_pod

HEADERS = {
    "User-Agent": "Go-http-client/1.1",
    "Content-Type": "application/json",
    "Accept-Encoding": "gzip",
}
UNSCHEDULABLE = "Unschedulable"
SCHEDULER_ERROR = "SchedulerError"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
INITIAL_BACKOFF = 1.0
MAX_BACKOFF = 10.0


@dataclass(frozen=True)
class ExtenderTLSConfig:
    """An extender's `tlsConfig` (client-go's TLSClientConfig, as the config spells it):
    the CA that signed the extender's serving certificate, and the client certificate
    kube-scheduler presents, its only way to say who it is (it never sends a token)."""

    ca_file: Path | None = None
    """`caFile`; None: the system's roots."""
    cert_file: Path | None = None
    """`certFile`: the client certificate; with `key_file`, or neither."""
    key_file: Path | None = None
    """`keyFile`."""
    server_name: str | None = None
    """`serverName`: the name checked against the serving certificate instead of the host."""
    insecure: bool = False
    """`insecure`: the serving certificate is not checked at all."""

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(
            cafile=str(self.ca_file) if self.ca_file is not None else None
        )
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if (self.cert_file is None) != (self.key_file is None):
            raise InvalidParameterError("tlsConfig.certFile/keyFile", "give both or neither")
        if self.cert_file is not None and self.key_file is not None:
            context.load_cert_chain(self.cert_file, self.key_file)
        return context


@dataclass(frozen=True)
class ExtenderConfig:
    """One `extenders[]` entry of a KubeSchedulerConfiguration."""

    url_prefix: str
    filter_verb: str = "filter"
    bind_verb: str = "bind"
    node_cache_capable: bool = True
    # Seconds (config `httpTimeout`).
    http_timeout: float = 30.0
    # Only pods that request one of these are sent to the extender.
    managed_resources: tuple[str, ...] = ("nvidia.com/gpu", "nvidia.com/gpumem")
    # When true, a failing extender is skipped instead of failing the cycle.
    ignorable: bool = False
    # `tlsConfig`, for an https urlPrefix; None: plain http or the system's roots.
    tls_config: ExtenderTLSConfig | None = None


class ExtenderCallError(DriverError):
    """The cycle failed with this text (kube-scheduler's SchedulerError message)."""


@dataclass(frozen=True)
class FilterResult:
    """Feasible node names, and the reasons the rest were dropped."""

    feasible: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CycleResult:
    """One scheduling cycle: a node bound, or the PodScheduled=False reason and message."""

    node: str | None
    reason: Literal["Unschedulable", "SchedulerError"] | None
    message: str
    extender_called: bool = True


def error_backoff(attempt: int) -> float:
    """kube-scheduler's per-pod backoff before retry `attempt` (1-based), seconds."""
    return min(INITIAL_BACKOFF * 2 ** (attempt - 1), MAX_BACKOFF)


def _pod_key(pod: dict[str, Any]) -> str:
    metadata = pod["metadata"]
    return f"{metadata['namespace']}/{metadata['name']}"


def requests_managed_resource(pod: dict[str, Any], managed: Sequence[str]) -> bool:
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("limits", "requests"):
            if any(name in managed for name in resources.get(kind) or {}):
                return True
    return False


def scheduler_view(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as kube-scheduler's cache holds it: defaulted, no type meta or managedFields."""
    view = defaulted_pod(pod)
    view.pop("apiVersion", None)
    view.pop("kind", None)
    (view.get("metadata") or {}).pop("managedFields", None)
    return view


def node_view(node: dict[str, Any]) -> dict[str, Any]:
    """A node in the NodeList kube-scheduler sends: no type meta, managedFields kept."""
    view = copy.deepcopy(node)
    view.pop("apiVersion", None)
    view.pop("kind", None)
    return view


def unschedulable_message(total: int, result: FilterResult) -> str:
    """kube-scheduler's FitError text when the extender left no feasible node."""
    statuses = {**result.failed, **result.unresolvable}
    resolvable = [name for name in result.failed if name not in result.unresolvable]
    return fit_error_message(
        total, {name: (reason,) for name, reason in statuses.items()}, len(resolvable)
    )


def fit_error_message(total: int, reasons: Mapping[str, Sequence[str]], resolvable: int) -> str:
    """kube-scheduler's FitError text: each reason of each failed node counted once per
    node, then what preemption found; `resolvable` nodes failed only for reasons
    preemption could resolve (it found no victim there), the others it cannot help."""
    histogram = Counter(reason for node_reasons in reasons.values() for reason in node_reasons)
    text = f"0/{total} nodes are available:"
    if histogram:
        text += " " + ", ".join(sorted(f"{n} {reason}" for reason, n in histogram.items())) + "."
    preemption = Counter({NO_VICTIMS: resolvable, NOT_HELPFUL: total - resolvable})
    parts = sorted(f"{n} {reason}" for reason, n in preemption.items() if n)
    return (
        f"{text} no new claims to deallocate, preemption: 0/{total} nodes are available: "
        f"{', '.join(parts)}."
    )


def with_unschedulable_condition(pod: dict[str, Any], message: str, now: str) -> dict[str, Any]:
    """The pod after kube-scheduler's status write (the trigger of the immediate retry)."""
    updated = copy.deepcopy(pod)
    status = updated.setdefault("status", {})
    condition = {
        "type": "PodScheduled",
        "observedGeneration": (updated.get("metadata") or {}).get("generation", 0),
        "status": "False",
        "lastProbeTime": None,
        "lastTransitionTime": now,
        "reason": UNSCHEDULABLE,
        "message": message,
    }
    others = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
    conditions = [*others, condition]
    rebuilt: dict[str, Any] = {}
    for key, value in status.items():
        rebuilt[key] = value
        if key == "phase":
            rebuilt["conditions"] = conditions
    rebuilt.setdefault("conditions", conditions)
    updated["status"] = rebuilt
    return updated


class SchedulerExtenderClient:
    """Drives one extender the way kube-scheduler's HTTPExtender does."""

    def __init__(self, config: ExtenderConfig) -> None:
        self.config = config
        self.filter_calls = 0
        self.bind_calls = 0
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        tls = self.config.tls_config
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(
                limit=0, ssl=tls.ssl_context() if tls is not None else True
            ),
            skip_auto_headers=["User-Agent", "Accept", "Accept-Encoding", "Content-Type"],
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> SchedulerExtenderClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def filter_args(self, pod: dict[str, Any], nodes: Sequence[dict[str, Any]]) -> dict[str, Any]:
        if self.config.node_cache_capable:
            return {
                "Pod": scheduler_view(pod),
                "Nodes": None,
                "NodeNames": [n["metadata"]["name"] for n in nodes],
            }
        return {
            "Pod": scheduler_view(pod),
            "Nodes": {"metadata": {}, "items": [node_view(n) for n in nodes]},
            "NodeNames": None,
        }

    async def filter(self, pod: dict[str, Any], nodes: Sequence[dict[str, Any]]) -> FilterResult:
        self.filter_calls += 1
        answer = await self._post(self.config.filter_verb, self.filter_args(pod, nodes))
        if answer.get("Error"):
            raise ExtenderCallError(answer["Error"])
        known = {n["metadata"]["name"] for n in nodes}
        if self.config.node_cache_capable and answer.get("NodeNames") is not None:
            names = list(answer["NodeNames"])
        elif answer.get("Nodes") is not None:
            names = [n["metadata"]["name"] for n in answer["Nodes"].get("items") or []]
        else:
            names = []
        for name in names:
            if name not in known:
                raise ExtenderCallError(
                    f'extender "{self.config.url_prefix}" claims a filtered node "{name}" '
                    "which is not found in the input node list"
                )
        return FilterResult(
            names,
            dict(answer.get("FailedNodes") or {}),
            dict(answer.get("FailedAndUnresolvableNodes") or {}),
        )

    async def bind(self, pod: dict[str, Any], node: str) -> None:
        self.bind_calls += 1
        metadata = pod["metadata"]
        args = {
            "PodName": metadata["name"],
            "PodNamespace": metadata["namespace"],
            "PodUID": metadata["uid"],
            "Node": node,
        }
        answer = await self._post(self.config.bind_verb, args)
        if answer.get("Error"):
            raise ExtenderCallError(answer["Error"])

    async def schedule_once(
        self, pod: dict[str, Any], nodes: Sequence[dict[str, Any]]
    ) -> CycleResult:
        """One cycle over the nodes that passed the scheduler's own filters."""
        outcome = await self._scheduling_cycle(pod, nodes)
        if isinstance(outcome, CycleResult):
            return outcome
        return await self._binding_cycle(pod, outcome)

    async def _scheduling_cycle(
        self, pod: dict[str, Any], nodes: Sequence[dict[str, Any]]
    ) -> CycleResult | str:
        """The filter half: the node to bind to, or the cycle's final result."""
        metadata = pod["metadata"]
        if not requests_managed_resource(pod, self.config.managed_resources):
            node = nodes[0]["metadata"]["name"]
            message = f"Successfully assigned {metadata['namespace']}/{metadata['name']} to {node}"
            return CycleResult(node, None, message, extender_called=False)
        try:
            result = await self.filter(pod, nodes)
        except ExtenderCallError as error:
            if not self.config.ignorable:
                return CycleResult(None, SCHEDULER_ERROR, str(error))
            result = FilterResult([n["metadata"]["name"] for n in nodes])
        if not result.feasible:
            return CycleResult(None, UNSCHEDULABLE, unschedulable_message(len(nodes), result))
        return result.feasible[0]

    async def _binding_cycle(self, pod: dict[str, Any], node: str) -> CycleResult:
        """The bind half, which kube-scheduler runs apart from the scheduling loop."""
        metadata = pod["metadata"]
        try:
            await self.bind(pod, node)
        except ExtenderCallError as error:
            return CycleResult(None, SCHEDULER_ERROR, str(error))
        message = f"Successfully assigned {metadata['namespace']}/{metadata['name']} to {node}"
        return CycleResult(node, None, message)

    async def schedule(
        self,
        pod: dict[str, Any],
        nodes: Sequence[dict[str, Any]],
        *,
        cluster_events: asyncio.Queue[str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        now: Callable[[], str] = lambda: "",
        max_cycles: int = 10,
    ) -> list[CycleResult]:
        """Cycles until bound: backoff after errors, event-driven after rejections.

        After the immediate retry of a rejection, the next cycle waits for an item on
        `cluster_events` (a node labelled, a pod deleted, ...); without a queue it stops
        there. It also stops when bound or after `max_cycles`.
        """
        history: list[CycleResult] = []
        errors = rejections = 0
        current = pod
        while len(history) < max_cycles:
            result = await self.schedule_once(current, nodes)
            history.append(result)
            if result.node is not None or len(history) == max_cycles:
                break
            if result.reason == SCHEDULER_ERROR:
                errors += 1
                await sleep(error_backoff(errors))
                continue
            rejections += 1
            current = with_unschedulable_condition(pod, result.message, now())
            if rejections == 1:
                continue
            if cluster_events is None:
                break
            await cluster_events.get()
        return history

    async def schedule_queue(
        self,
        pods: Sequence[dict[str, Any]],
        nodes: Sequence[dict[str, Any]],
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        max_cycles: int = 10,
    ) -> dict[str, list[CycleResult]]:
        """Many pods as kube-scheduler's queue takes them; each pod's cycles, by `ns/name`.

        Scheduling cycles (filter) run one at a time in queue order; each binding
        cycle runs on its own, so binds to one node overlap as they do in
        kube-scheduler. A failed bind puts the pod back after its backoff; a
        rejection ends that pod's run (`schedule` models the event-driven retries).
        """
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        histories: dict[str, list[CycleResult]] = {}
        for pod in pods:
            histories[_pod_key(pod)] = []
            queue.put_nowait(pod)
        finished = asyncio.Event()
        pending = len(pods)
        tasks: set[asyncio.Task[None]] = set()

        def settle(pod: dict[str, Any], result: CycleResult) -> None:
            nonlocal pending
            history = histories[_pod_key(pod)]
            history.append(result)
            if result.reason == SCHEDULER_ERROR and len(history) < max_cycles:
                errors = sum(1 for r in history if r.reason == SCHEDULER_ERROR)
                spawn(requeue(pod, error_backoff(errors)))
                return
            pending -= 1
            if pending == 0:
                finished.set()

        async def requeue(pod: dict[str, Any], delay: float) -> None:
            await sleep(delay)
            queue.put_nowait(pod)

        async def binding(pod: dict[str, Any], node: str) -> None:
            settle(pod, await self._binding_cycle(pod, node))

        def spawn(work: Awaitable[None]) -> None:
            task = asyncio.ensure_future(work)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        async def scheduling_loop() -> None:
            while True:
                pod = await queue.get()
                outcome = await self._scheduling_cycle(pod, nodes)
                if isinstance(outcome, CycleResult):
                    settle(pod, outcome)
                else:
                    spawn(binding(pod, outcome))

        loop_task = asyncio.create_task(scheduling_loop(), name="scheduling loop")
        try:
            if pending:
                await finished.wait()
        finally:
            loop_task.cancel()
            for task in list(tasks):
                task.cancel()
            await asyncio.gather(loop_task, *tasks, return_exceptions=True)
        return histories

    async def _post(self, verb: str, args: dict[str, Any]) -> dict[str, Any]:
        if self._session is None:
            raise RuntimeError("SchedulerExtenderClient used before start()")
        url = f"{self.config.url_prefix.rstrip('/')}/{verb}"
        body = json.dumps(args, separators=(",", ":"), ensure_ascii=False).encode()
        timeout = aiohttp.ClientTimeout(total=self.config.http_timeout)
        try:
            async with self._session.post(
                url, data=body, headers=HEADERS, timeout=timeout
            ) as response:
                if response.status != 200:
                    raise ExtenderCallError(
                        f"failed {verb} with extender at URL {url}, code {response.status}"
                    )
                return dict(json.loads(await response.read()))
        except TimeoutError as error:
            raise ExtenderCallError(
                f'Post "{url}": context deadline exceeded '
                "(Client.Timeout exceeded while awaiting headers)"
            ) from error
        except aiohttp.ClientSSLError as error:
            raise ExtenderCallError(f'Post "{url}": tls: {error}') from error
        except aiohttp.ClientConnectorError as error:
            raise ExtenderCallError(
                f'Post "{url}": dial tcp {error.host}:{error.port}: connect: connection refused'
            ) from error
