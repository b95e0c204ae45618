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
from dra_driver.kube.rest import ConflictError, KubeClient, NotFoundError, object_path
from dra_driver.process.runtime import cancel_and_wait
from simulator.standins import user_agents

log = logging.getLogger(__name__)

POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_SUFFIX_LENGTH = 5


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
    """Creates template claims for pods until `aclose`; errors retry on the next pod change."""

    def __init__(self, client: KubeClient) -> None:
        # The caller's connection pool, but requests say kube-controller-manager.
        self.client = KubeClient(
            client.api_client,
            client.request_timeout,
            user_agent=user_agents.KUBE_CONTROLLER_MANAGER,
            owns_session=False,
        )
        self.pods = Informer(self.client, "/api/v1/pods", handlers=[self._on_pod])
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self.pods.run(), name="claim templates: pods"),
            asyncio.create_task(self._work(), name="claim templates: worker"),
        ]
        await self.pods.synced.wait()

    async def aclose(self) -> None:
        await cancel_and_wait(self._tasks)

    async def __aenter__(self) -> ClaimTemplateController:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if kind != "DELETED" and missing_template_claims(pod):
            self._queue.put_nowait(object_key(pod))

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            cached = self.pods.get(key)
            if cached is None:
                continue
            try:
                # Read afresh: a key queued twice (created, then changed) would otherwise
                # meet a cache without the claim statuses the first pass wrote, and make
                # the claims again.
                meta = cached["metadata"]
                pod = await self.client.get(
                    object_path(f"/api/v1/namespaces/{meta['namespace']}/pods", meta["name"])
                )
                if (pod.get("metadata") or {}).get("deletionTimestamp"):
                    continue
                await self._make_claims(pod)
            except NotFoundError:
                continue
            except DriverError as error:
                log.warning("claim from template failed", extra={"pod": key, "error": str(error)})

    async def _make_claims(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        namespace = metadata["namespace"]
        statuses = list((pod.get("status") or {}).get("resourceClaimStatuses") or [])
        for entry_name, template_name in missing_template_claims(pod):
            try:
                template = await self.client.get(
                    f"/apis/resource.k8s.io/v1/namespaces/{namespace}"
                    f"/resourceclaimtemplates/{template_name}"
                )
            except NotFoundError:
                log.info(
                    "template not found yet",
                    extra={"pod": object_key(pod), "template": template_name},
                )
                continue
            name = generated_claim_name(metadata["name"], entry_name)
            try:
                await self.client.create(
                    f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims",
                    claim_from_template(pod, entry_name, template, name),
                )
            except ConflictError:
                continue
            statuses.append({"name": entry_name, "resourceClaimName": name})
        if statuses != (pod.get("status") or {}).get("resourceClaimStatuses"):
            await self.client.patch(
                f"/api/v1/namespaces/{namespace}/pods/{metadata['name']}/status",
                {"status": {"resourceClaimStatuses": statuses}},
            )
