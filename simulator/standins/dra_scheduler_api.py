"""The kube-scheduler stand-in's API calls: reads, PreBind claim writes, binding, rejection.

Owns every request dra_scheduler.py sends, in the shape and order a v1.36
kube-scheduler sends them: objects are read as plain JSON (the stand-in works on
what the server answered, not on client models); PreBind either adds the pod to
`status.reservedFor` of a claim allocated by someone else (stamping an
`allocationTimestamp` the allocator left out, which the server refuses as
immutable) or, for a claim allocated here, adds the delete-protection finalizer and
then writes allocation and reservation in one status write; PostFilter clears an
unavailable claim's allocation, reservation and devices; `pods/binding` places the
pod; a pod that does not fit gets PodScheduled=False (a strategic merge patch of
`pods/status`, like kube-scheduler's). The objects it is given come from the
scheduler's cache and are never modified. Requests say
`kube-scheduler/<version> ... simulator` (user_agents.py). It decides nothing; it may
call the official kubernetes client and dra_driver.objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import json
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.rest import ApiException

from dra_driver.objects.api_time import api_time
from dra_driver.objects.resource_api import DELETE_PROTECTION
from simulator.standins import user_agents

WATCHES = 5
"""The most list+watch connections the stand-in keeps open (dra_scheduler.py)."""


def api_message(error: ApiException) -> str:
    """The server's message in a refused request, as kube-scheduler quotes it in a condition."""
    try:
        return str(json.loads(error.body or "{}").get("message") or error.reason)
    except json.JSONDecodeError:
        return str(error.body or error.reason)


def pod_reference(pod: dict[str, Any]) -> dict[str, Any]:
    """The `reservedFor` entry naming the pod, as PreBind writes it."""
    return {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}


class SchedulerAPI:
    """The core and resource.k8s.io clients of one stand-in, with its reads and writes."""

    def __init__(self, api_client: k8s.ApiClient, parallelism: int = 16) -> None:
        # A client of its own on a copy of the caller's configuration: the User-Agent is
        # kube-scheduler's, and its connection pool and threads fit `parallelism` calls
        # at once (plus the watches), without changing the caller's client or sharing
        # the loop's default executor.
        configuration = copy.copy(api_client.configuration)
        configuration.connection_pool_maxsize = parallelism + WATCHES
        own = k8s.ApiClient(configuration)
        own.user_agent = user_agents.KUBE_SCHEDULER
        self._threads = ThreadPoolExecutor(parallelism, thread_name_prefix="kube-scheduler")
        weakref.finalize(self, self._threads.shutdown, wait=False)
        self.client = own
        self.core = k8s.CoreV1Api(own)
        self.resource = k8s.ResourceV1Api(own)

    async def _call(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """A client method on this stand-in's threads."""
        call = functools.partial(method, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._threads, call)

    async def read(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        """Call a client method off the loop and answer its JSON body undecoded."""
        response = await self._call(method, *args, _preload_content=False, **kwargs)
        return json.loads(response.data)

    async def write_allocation(
        self, claim: dict[str, Any], allocation: dict[str, Any], pod: dict[str, Any]
    ) -> None:
        """PreBind for a claim allocated here: the delete-protection finalizer first (so
        kube-controller-manager deallocates it once unused), then allocation and
        reservation in one status write, conditional on the version that was read."""
        metadata = claim["metadata"]
        name, namespace = metadata["name"], metadata["namespace"]
        version = metadata["resourceVersion"]
        added = DELETE_PROTECTION not in (metadata.get("finalizers") or [])
        if added:
            protected = await self.read(
                self.resource.patch_namespaced_resource_claim,
                name,
                namespace,
                {"metadata": {"resourceVersion": version, "finalizers": [DELETE_PROTECTION]}},
            )
            version = protected["metadata"]["resourceVersion"]
        body = {
            "metadata": {"resourceVersion": version},
            "status": {"allocation": allocation, "reservedFor": [pod_reference(pod)]},
        }
        try:
            await self._call(
                self.resource.patch_namespaced_resource_claim_status,
                name,
                namespace,
                body,
                _preload_content=False,
            )
        except ApiException:
            if added:
                with contextlib.suppress(ApiException):
                    await self._call(
                        self.resource.patch_namespaced_resource_claim,
                        name,
                        namespace,
                        {"metadata": {"$deleteFromPrimitiveList/finalizers": [DELETE_PROTECTION]}},
                        _preload_content=False,
                    )
            raise

    async def write_reservation(self, claim: dict[str, Any], pod: dict[str, Any]) -> None:
        """PreBind for a claim allocated by someone else: the pod joins `reservedFor`; no
        write when it is there already (the allocator reserved it in its own write)."""
        status = claim["status"]
        reserved = list(status.get("reservedFor") or [])
        if any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
            return
        reserved.append(pod_reference(pod))
        allocation = {"allocationTimestamp": api_time(), **status["allocation"]}
        metadata = claim["metadata"]
        await self._call(
            self.resource.replace_namespaced_resource_claim_status,
            metadata["name"],
            metadata["namespace"],
            {**claim, "status": {**status, "allocation": allocation, "reservedFor": reserved}},
            _preload_content=False,
        )

    async def write_deallocation(self, claim: dict[str, Any]) -> None:
        """PostFilter's UpdateStatus: allocation, reservedFor and devices cleared, on the
        resourceVersion that was read (a conflict means someone else changed it first)."""
        status = {
            k: v
            for k, v in (claim.get("status") or {}).items()
            if k not in ("allocation", "reservedFor", "devices")
        }
        metadata = claim["metadata"]
        await self._call(
            self.resource.replace_namespaced_resource_claim_status,
            metadata["name"],
            metadata["namespace"],
            {**claim, "status": status},
            _preload_content=False,
        )

    async def write_binding(self, pod: dict[str, Any], node_name: str) -> None:
        """`pods/binding`: the pod is placed on the node."""
        metadata = pod["metadata"]
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": metadata["name"], "namespace": metadata["namespace"]},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
        }
        await self._call(
            self.core.create_namespaced_pod_binding,
            metadata["name"],
            metadata["namespace"],
            binding,
            _preload_content=False,
        )

    async def write_unscheduled(self, pod: dict[str, Any], reason: str, message: str) -> None:
        """PodScheduled=False with kube-scheduler's reason and message, as the strategic
        merge patch of `pods/status` it sends; nothing when the pod already says so (as
        kube-scheduler skips an update that changes no condition)."""
        conditions = (pod.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == "PodScheduled"), {})
        if (current.get("status"), current.get("reason"), current.get("message")) == (
            "False",
            reason,
            message,
        ):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": (
                current["lastTransitionTime"]
                if current.get("status") == "False" and current.get("lastTransitionTime")
                else api_time()
            ),
            "reason": reason,
            "message": message,
        }
        metadata = pod["metadata"]
        await self._call(
            self.core.patch_namespaced_pod_status,
            metadata["name"],
            metadata["namespace"],
            {"status": {"conditions": [condition]}},
            _preload_content=False,
        )
