"""A kubelet pod-worker stand-in: prepare a bound pod's claims, then report it Running.

kubelet calls NodePrepareResources for every claim of a pod bound to its node
(grouped per driver) before it creates the containers, hands the returned CDI
device ids to the runtime per container (`resources.claims`), and calls
NodeUnprepareResources when the pod is gone. This worker does that through the
KubeletDRA stand-in, over the plugin's real socket, and records per container
the CDI ids a runtime would receive. A failed prepare becomes a
`FailedPrepareDynamicResources` Warning on the pod, as kubelet reports it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.kube.informer import Informer, object_key
from dra_driver.kube.rest import KubeClient, NotFoundError, object_path
from dra_driver.objects.api_time import api_time
from dra_driver.objects.pod_claims import container_claim_entries, pod_claim_names
from dra_driver.objects.resource_api import RESOURCE_API
from dra_driver.process.runtime import cancel_and_wait
from simulator.standins.kubelet_dra import PREPARE_FAILED_REASON, ClaimRef, KubeletDRA

log = logging.getLogger(__name__)


@dataclass
class PreparedPod:
    """What kubelet handed the runtime for one pod."""

    namespace: str
    name: str
    node: str
    claims: dict[str, str] = field(default_factory=dict)
    """Pod claim entry name -> ResourceClaim name."""
    cdi_ids: dict[str, list[str]] = field(default_factory=dict)
    """ResourceClaim name -> CDI device ids the plugin returned."""
    containers: dict[str, list[str]] = field(default_factory=dict)
    """Container name -> CDI device ids the runtime injects into it."""
    prepared: dict[str, list[ClaimRef]] = field(default_factory=dict)
    """Driver -> the claims it prepared (what NodeUnprepareResources gets later)."""
    error: str = ""


def container_cdi_ids(devices: Iterable[Any], request: str) -> list[str]:
    """kubelet's choice (`cdiDevicesAsList`) of a prepared claim's CDI ids for a container
    entry naming `request` ("" for the whole claim): every device when it names the whole
    claim, else the devices whose `request_names` hold it or are empty."""
    return [
        cdi_id
        for device in devices
        if not request or not device.request_names or request in device.request_names
        for cdi_id in device.cdi_device_ids
    ]


class PodFeed:
    """One pod watch for the kubelet stand-ins of every node, each fed its node's pods.

    A kubelet watches its own pods (`spec.nodeName=<node>`); a thousand such watches
    in one process cost the emulator a filter per watcher on every pod event and a
    connection each. One watch of every pod, handed out by `spec.nodeName`, gives each
    stand-in the same events: a pod appears when it is bound (a pod is bound once),
    changes, and is deleted. It reads as the client it is given (the simulation's
    admin): the stand-in is not a driver component, no RBAC of deploy/ is in play.
    """

    def __init__(self, client: KubeClient) -> None:
        self.informer = Informer(client, "/api/v1/pods", handlers=[self._on_pod])
        self._nodes: dict[str, Callable[[str, dict[str, Any]], None]] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self.informer.run(), name="kubelet pod feed")
        await self.informer.synced.wait()

    async def aclose(self) -> None:
        await cancel_and_wait([self._task] if self._task is not None else [])
        self._task = None

    def subscribe(self, node: str, handler: Callable[[str, dict[str, Any]], None]) -> None:
        """From now on `handler(kind, pod)` gets the node's pod events, starting with an
        ADDED for each pod already bound to it (what a new watch's list gives)."""
        self._nodes[node] = handler
        for pod in list(self.informer.store.values()):
            if _node_of(pod) == node:
                handler("ADDED", pod)

    def unsubscribe(self, node: str) -> None:
        self._nodes.pop(node, None)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        handler = self._nodes.get(_node_of(pod))
        if handler is not None:
            handler(kind, pod)


def _node_of(pod: Mapping[str, Any]) -> str:
    return (pod.get("spec") or {}).get("nodeName") or ""


class KubeletPods:
    """Runs the pods bound to one node until `aclose`; its pods come from `feed`, its
    reads and writes go through `client` (the node's kubelet identity)."""

    def __init__(self, client: KubeClient, kubelet: KubeletDRA, node: str, feed: PodFeed) -> None:
        self.client = client
        self.kubelet = kubelet
        self.node = node
        self.feed = feed
        self.prepared: dict[str, PreparedPod] = {}
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work(), name=f"kubelet pod worker {self.node}")]
        self.feed.subscribe(self.node, self._on_pod)

    async def aclose(self) -> None:
        self.feed.unsubscribe(self.node)
        await cancel_and_wait(self._tasks)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        self._queue.put_nowait((kind, pod))

    async def _work(self) -> None:
        while True:
            kind, pod = await self._queue.get()
            key = object_key(pod)
            try:
                if kind == "DELETED":
                    await self._stop_pod(key)
                elif (pod.get("metadata") or {}).get("deletionTimestamp"):
                    await self._stop_pod(key)
                    await self._finish_deletion(pod)
                elif key not in self.prepared:
                    await self._start_pod(key, pod)
            except DriverError as error:
                log.warning("pod worker failed", extra={"pod": key, "error": str(error)})

    async def _claims(self, pod: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
        """The pod's claims by entry name, or None while one is missing."""
        namespace = pod["metadata"]["namespace"]
        claims = {}
        for entry, name in pod_claim_names(pod).items():
            if name is None:
                return None
            claims[entry] = await self.client.get(
                f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{name}"
            )
        return claims

    async def _start_pod(self, key: str, pod: dict[str, Any]) -> None:
        claims = await self._claims(pod)
        if claims is None:
            return
        metadata = pod["metadata"]
        record = PreparedPod(metadata["namespace"], metadata["name"], self.node)
        by_driver: dict[str, list[ClaimRef]] = {}
        devices: dict[str, list[Any]] = {}
        for entry, claim in claims.items():
            claim_meta = claim["metadata"]
            record.claims[entry] = claim_meta["name"]
            allocation = (claim.get("status") or {}).get("allocation") or {}
            drivers = {r["driver"] for r in (allocation.get("devices") or {}).get("results") or []}
            for driver in drivers:
                by_driver.setdefault(driver, []).append(
                    ClaimRef(claim_meta["namespace"], claim_meta["uid"], claim_meta["name"])
                )
        for driver, refs in by_driver.items():
            response = await self.kubelet.prepare(driver, refs)
            for ref in refs:
                result = response.claims.get(ref.uid)
                if result is None or result.error:
                    record.error = result.error if result is not None else "no result"
                    await self._report_failure(pod, ref.name, record.error)
                    self.prepared[key] = record
                    return
                record.cdi_ids[ref.name] = [i for d in result.devices for i in d.cdi_device_ids]
                devices.setdefault(ref.name, []).extend(result.devices)
                record.prepared.setdefault(driver, []).append(ref)
        used = container_claim_entries(pod)
        spec = pod.get("spec") or {}
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
            entries = used.get(container["name"], ())
            record.containers[container["name"]] = [
                i
                for name, request in entries
                for i in container_cdi_ids(devices.get(name, ()), request)
            ]
        self.prepared[key] = record
        await self.client.patch(
            f"/api/v1/namespaces/{metadata['namespace']}/pods/{metadata['name']}/status",
            {"status": {"phase": "Running", "startTime": api_time()}},
        )

    async def _finish_deletion(self, pod: Mapping[str, Any]) -> None:
        """Its containers are gone: remove the pod as kubelet's status manager does (grace
        0), so what waits for it to go (a preemptor) is not held forever."""
        metadata = pod["metadata"]
        path = object_path(f"/api/v1/namespaces/{metadata['namespace']}/pods", metadata["name"])
        try:
            await self.client.delete(path, gracePeriodSeconds=0)
        except NotFoundError:
            return

    async def _stop_pod(self, key: str) -> None:
        record = self.prepared.pop(key, None)
        for driver, refs in (record.prepared if record else {}).items():
            await self.kubelet.unprepare(driver, refs)

    async def _report_failure(self, pod: Mapping[str, Any], claim: str, error: str) -> None:
        metadata = pod["metadata"]
        namespace = metadata["namespace"]
        message = f"NodePrepareResources failed for ResourceClaim {claim}: {error}"
        await self.client.create(
            f"/api/v1/namespaces/{namespace}/events",
            {
                "metadata": {"generateName": f"{metadata['name']}."},
                "involvedObject": {
                    "kind": "Pod",
                    "namespace": namespace,
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "apiVersion": "v1",
                },
                "type": "Warning",
                "reason": PREPARE_FAILED_REASON,
                "message": message,
                "source": {"component": "kubelet", "host": self.node},
                "firstTimestamp": api_time(),
                "lastTimestamp": api_time(),
                "count": 1,
            },
        )
