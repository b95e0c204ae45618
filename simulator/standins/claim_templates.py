"""A kube-controller-manager stand-in: ResourceClaims made from a pod's ResourceClaimTemplates.

For each pod entry `spec.resourceClaims[].resourceClaimTemplateName` that has no claim
yet, it creates `<pod>-<entry>-<5 random>` from the template's `spec.spec`, owned by
the pod (controller, blockOwnerDeletion) and annotated
`resource.kubernetes.io/pod-claim-name`, then records it in the pod's
`status.resourceClaimStatuses`, as the real resourceclaim controller does. Claims
are deleted with their pod by the garbage collector.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from typing import Any

from dra_driver.errors import DriverError
from dra_driver.kube.informer import Informer, object_key
from dra_driver.kube.rest import ConflictError, KubeClient, NotFoundError
from dra_driver.process.runtime import cancel_and_wait
from simulator.standins import user_agents

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5
RESOURCE_API = "/apis/resource.k8s.io/v1"
DEFAULT_WORKERS = 10
"""Workers, as kube-controller-manager's --concurrent-resourceclaim-syncs: enough to keep
the stand-in ahead of the rest of a simulation without flooding the emulator."""


def generated_claim_name(pod_name: str, entry_name: str) -> str:
    """kube-controller-manager's pattern; the random suffix avoids reusing a deleted name."""
    suffix = "".join(secrets.choice(_SUFFIX_ALPHABET) for _ in range(_SUFFIX_LENGTH))
    prefix = f"{pod_name}-{entry_name}"[: 63 - _SUFFIX_LENGTH - 1].rstrip("-.")
    return f"{prefix}-{suffix}"


def missing_template_claims(pod: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(entry name, template name) of the pod's template entries without a claim yet."""
    made = {
        status.get("name")
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if status.get("resourceClaimName")
    }
    return [
        (entry["name"], entry["resourceClaimTemplateName"])
        for entry in (pod.get("spec") or {}).get("resourceClaims") or []
        if entry.get("resourceClaimTemplateName") and entry.get("name") not in made
    ]


def claim_from_template(
    pod: Mapping[str, Any], entry_name: str, template: Mapping[str, Any], name: str
) -> dict[str, Any]:
    metadata = pod["metadata"]
    template_meta = (template.get("spec") or {}).get("metadata") or {}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": metadata["namespace"],
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": {
                **(template_meta.get("annotations") or {}),
                POD_CLAIM_NAME_ANNOTATION: entry_name,
            },
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": (template.get("spec") or {}).get("spec") or {},
    }


class ClaimTemplateController:
    """Creates template claims for pods until `aclose`.

    Like kube-controller-manager's resourceclaim controller it works from informers
    (pods and ResourceClaimTemplates: no read per pod) with several workers
    (`workers`, its --concurrent-resourceclaim-syncs), one pod at a time per key: a
    pod changed while a worker holds it is queued again when that worker is done. The
    claims it made are remembered per pod, so a pod seen again before the watch shows
    its new claim statuses gets no second claim, only the status write if that is
    still missing. A pod whose template is not there yet is tried again when the
    template appears (or the pod changes); a failed write when the pod next changes.
    """

    def __init__(self, client: KubeClient, workers: int = DEFAULT_WORKERS) -> None:
        # The caller's connection pool, but requests say kube-controller-manager.
        self.client = KubeClient(
            client.api_client,
            client.request_timeout,
            user_agent=user_agents.KUBE_CONTROLLER_MANAGER,
            owns_session=False,
        )
        self.pods = Informer(self.client, "/api/v1/pods", handlers=[self._on_pod])
        self.templates = Informer(
            self.client, f"{RESOURCE_API}/resourceclaimtemplates", handlers=[self._on_template]
        )
        self.workers = workers
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._made: dict[str, dict[str, str]] = {}
        """pod uid -> {entry name: claim name} of the claims made here."""
        self._written: dict[str, list[dict[str, str]]] = {}
        """pod uid -> the resourceClaimStatuses last written."""
        self._waiting: dict[str, set[str]] = {}
        """namespace/template -> keys of pods waiting for it."""
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.templates.run(), name="claim templates: templates"),
            asyncio.create_task(self.pods.run(), name="claim templates: pods"),
            *(
                asyncio.create_task(self._work(), name=f"claim templates: worker {index}")
                for index in range(self.workers)
            ),
        ]
        await self.templates.synced.wait()
        await self.pods.synced.wait()

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)

    async def __aenter__(self) -> ClaimTemplateController:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind == "DELETED":
            uid = pod["metadata"].get("uid", "")
            self._made.pop(uid, None)
            self._written.pop(uid, None)
        elif missing_template_claims(pod):
            self._enqueue(object_key(pod))

    def _on_template(self, kind: str, template: dict[str, Any]) -> None:
        if kind != "DELETED":
            for key in self._waiting.pop(object_key(template), set()):
                self._enqueue(key)

    def _enqueue(self, key: str) -> None:
        if key in self._active:
            self._dirty.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            pod = self.pods.get(key)
            if pod is None or pod["metadata"].get("deletionTimestamp"):
                continue
            self._active.add(key)
            try:
                await self._make_claims(pod)
            except DriverError as error:
                log.warning("claim from template failed", extra={"pod": key, "error": str(error)})
            finally:
                self._active.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._enqueue(key)

    async def _make_claims(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        namespace, uid = metadata["namespace"], metadata["uid"]
        made = self._made.setdefault(uid, {})
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        for entry_name, template_name in missing_template_claims(pod):
            name = made.get(entry_name)
            if name is None:
                template = self.templates.get(f"{namespace}/{template_name}")
                if template is None:
                    log.info(
                        "template not found yet",
                        extra={"pod": object_key(pod), "template": template_name},
                    )
                    waiting = self._waiting.setdefault(f"{namespace}/{template_name}", set())
                    waiting.add(object_key(pod))
                    continue
                name = generated_claim_name(metadata["name"], entry_name)
                try:
                    await self.client.create(
                        f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims",
                        claim_from_template(pod, entry_name, template, name),
                    )
                except ConflictError:
                    continue
                made[entry_name] = name
            statuses.append({"name": entry_name, "resourceClaimName": name})
        written = (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if statuses != written and statuses != self._written.get(uid):
            try:
                await self.client.patch(
                    f"/api/v1/namespaces/{namespace}/pods/{metadata['name']}/status",
                    {"status": {"resourceClaimStatuses": statuses}},
                )
            except NotFoundError:
                return
            self._written[uid] = statuses
