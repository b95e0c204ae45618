"""`/migrate`: the opt-in mutating webhook that turns a pod's HAMi requests into a DRA claim.

Served by the legacy scheduler's process (`controller.legacy.server`), next to
its `/webhook`, because it must read the pod's resources exactly as that
webhook and the extender do: the same device config, the same vendor
backends, the same TLS and caller authentication (an API server's admission
client). A second server would have to repeat all three and could drift.

A pod opts in by its namespace's label or its own annotation or label
`vgpu.hami.io/migrate: "true"` (`dra_driver.objects.migration.opted_in`; the
deployed MutatingWebhookConfiguration sends only such pods). Its claim is made
by kube-controller-manager from a ResourceClaimTemplate this webhook ensures
in the namespace, one per request shape (named by a digest of the claim
spec): on CREATE the pod has no uid yet, so the webhook cannot own a claim
to it, while a claim made from `spec.resourceClaims[].resourceClaimTemplateName`
is owned by the pod and deleted with it, so migrated claims never leak
(HAMi-DRA#21). A pod DRA cannot express yet is admitted unchanged with a
warning per reason; a template that cannot be written refuses the pod (the
user asked to migrate; falling back silently would hide it).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.kube.rest import ApiError, ConflictError, KubeClient, NotFoundError
from dra_driver.objects.migration import (
    build_claim_spec,
    build_claim_template,
    build_migrated_pod,
    opted_in,
    plan_migration,
    template_name,
)
from dra_driver.objects.resource_api import RESOURCE_API

log = logging.getLogger(__name__)

MIGRATE_PATH = "/migrate"
REVIEW_API_VERSION = "admission.k8s.io/v1"
REVIEW_KIND = "AdmissionReview"


def review_answer(uid: str, allowed: bool, **response: Any) -> dict[str, Any]:
    """An AdmissionReview v1 answer; `response` adds a patch, warnings or a status."""
    return {
        "apiVersion": REVIEW_API_VERSION,
        "kind": REVIEW_KIND,
        "response": {"uid": uid, "allowed": allowed, **response},
    }


def patch_answer(ops: list[dict[str, Any]]) -> dict[str, Any]:
    """The response fields that carry a JSON patch (base64, as the API server wants it)."""
    return {"patchType": "JSONPatch", "patch": base64.b64encode(json.dumps(ops).encode()).decode()}


async def answer_review(
    request: web.Request, review: Callable[[Mapping[str, Any]], Awaitable[dict[str, Any]]]
) -> web.Response:
    """Read an AdmissionReview off the request and answer what `review` decides for its
    `request`; a body that is not one is a 400 naming what was expected."""
    try:
        body = json.loads(await request.read())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return web.json_response({"error": f"request body is not JSON: {error}"}, status=400)
    asked = body.get("request") if isinstance(body, dict) else None
    if (
        not isinstance(body, dict)
        or body.get("apiVersion") != REVIEW_API_VERSION
        or body.get("kind") != REVIEW_KIND
        or not isinstance(asked, dict)
        or not isinstance(asked.get("uid"), str)
        or not isinstance(asked.get("object", {}), dict)
    ):
        return web.json_response(
            {"error": f"expected an {REVIEW_KIND} {REVIEW_API_VERSION} with request.uid"},
            status=400,
        )
    return web.json_response(await review(asked))


class MigrationWebhook:
    """Decides and applies one pod's migration; `handle` is the aiohttp route."""

    def __init__(
        self, client: KubeClient, backends: BackendRegistry, legacy_scheduler_name: str
    ) -> None:
        self.client = client
        self.backends = backends
        self.legacy_scheduler_name = legacy_scheduler_name

    async def handle(self, request: web.Request) -> web.Response:
        return await answer_review(request, self.review)

    async def review(self, review: Mapping[str, Any]) -> dict[str, Any]:
        """The AdmissionReview answer for one request (`request` of the review)."""
        uid = review["uid"]
        pod = review.get("object") or {}
        kind = (review.get("kind") or {}).get("kind")
        if kind not in (None, "Pod") or review.get("operation", "CREATE") != "CREATE":
            return review_answer(uid, True)
        namespace = review.get("namespace") or (pod.get("metadata") or {}).get("namespace") or ""
        if not opted_in(pod, await self._namespace_labels(namespace)):
            return review_answer(uid, True)
        migration = plan_migration(pod, self.backends)
        if not migration.needed:
            return review_answer(uid, True)
        if not migration.translatable:
            warnings = [f"not migrated to DRA: {problem}" for problem in migration.problems]
            log.info("pod not migrated", extra={"namespace": namespace, "reasons": warnings})
            return review_answer(uid, True, warnings=warnings)
        spec = build_claim_spec(migration)
        name = template_name(spec)
        try:
            if not review.get("dryRun"):  # sideEffects: NoneOnDryRun
                await self._ensure_template(namespace, spec)
        except ApiError as error:
            message = f"vgpu.hami.io/migrate: cannot write ResourceClaimTemplate {name}: {error}"
            return review_answer(
                uid, False, status={"code": 503, "reason": "ServiceUnavailable", "message": message}
            )
        migrated = build_migrated_pod(
            pod, migration, self.backends, name, self.legacy_scheduler_name
        )
        ops = [
            {"op": "replace", "path": "/spec", "value": migrated["spec"]},
            {
                "op": "add",
                "path": "/metadata/annotations",
                "value": migrated["metadata"]["annotations"],
            },
        ]
        return review_answer(uid, True, **patch_answer(ops))

    async def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        try:
            found = await self.client.get(f"/api/v1/namespaces/{namespace}")
        except NotFoundError:
            return {}
        return (found.get("metadata") or {}).get("labels") or {}

    async def _ensure_template(self, namespace: str, spec: Mapping[str, Any]) -> None:
        """Create the template; one that exists has this spec (its name is the digest)."""
        path = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"
        try:
            await self.client.create(path, build_claim_template(namespace, spec))
        except ConflictError:
            return
