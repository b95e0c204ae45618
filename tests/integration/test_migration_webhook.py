"""`/migrate` over HTTP on the legacy scheduler, against the API emulator: an opted-in pod
comes back patched to reference a ResourceClaimTemplate the webhook wrote, and the claim
kube-controller-manager's stand-in makes from it is owned by the pod; pods that are not
opted in, or that DRA cannot express yet, pass unchanged (the latter with warnings)."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from legacy_fixtures import base_url, gpu_pod, legacy_scheduler, pods_path

from controller.legacy.config import CallerAuthSettings, LegacySettings
from dra_driver.kube.rest import KubeClient
from dra_driver.objects.migration import (
    MIGRATED_ANNOTATION,
    MIGRATED_TEMPLATE_LABEL,
    POD_CLAIM_NAME,
)
from simulator.legacy_vendors import ENABLED_FLAGS, device_config
from simulator.standins.claim_templates import ClaimTemplateController

RESOURCE = "/apis/resource.k8s.io/v1"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "legacy"
SETTINGS = LegacySettings(device_config=device_config(), enabled_vendor_flags=ENABLED_FLAGS)
WAIT_S = 30.0
"""Bounds a broken run only; every wait below ends on the event it watches for."""


@pytest.fixture
async def client(kubeconfig: Path):
    kube = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        yield kube
    finally:
        await kube.aclose()


async def _namespace(client: KubeClient, labels: dict[str, str] | None = None) -> str:
    name = f"m-{uuid.uuid4().hex[:8]}"
    await client.create("/api/v1/namespaces", {"metadata": {"name": name, "labels": labels or {}}})
    return name


def _review(pod: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": namespace,
            "object": pod,
        },
    }


async def _post(url: str, body: Any) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as answer:
        return answer.status, await answer.json()


def _patched(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The two operations the webhook sends, applied as the API server would."""
    assert response["patchType"] == "JSONPatch"
    ops = json.loads(base64.b64decode(response["patch"]))
    result = json.loads(json.dumps(pod))
    for op in ops:
        assert op["op"] in ("add", "replace")
        *parents, last = op["path"].strip("/").split("/")
        target = result
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = op["value"]
    return result


async def _claims_of(client: KubeClient, namespace: str, count: int) -> list[dict[str, Any]]:
    path = f"{RESOURCE}/namespaces/{namespace}/resourceclaims"
    async with asyncio.timeout(WAIT_S):
        while True:
            listed = await client.list(path)
            if len(listed["items"]) >= count:
                return listed["items"]
            version = listed["metadata"]["resourceVersion"]
            async for _ in client.watch(path, resourceVersion=version):
                break


async def test_an_opted_in_namespace_gets_claims_owned_by_each_pod(client: KubeClient) -> None:
    namespace = await _namespace(client, {"vgpu.hami.io/migrate": "true"})
    async with legacy_scheduler(client, SETTINGS) as server, ClaimTemplateController(client):
        url = base_url(server) + "/migrate"
        created = []
        for name in ("first", "second"):
            pod = gpu_pod(name, namespace, gpumem=3000, gpucores=30)
            status, review = await _post(url, _review(pod, namespace))
            assert status == 200
            assert review["response"]["allowed"] is True
            migrated = _patched(pod, review["response"])
            container = migrated["spec"]["containers"][0]
            assert "limits" not in container["resources"]
            assert "schedulerName" not in migrated["spec"]
            created.append(await client.create(pods_path(namespace), migrated))
        templates = await client.list(
            f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
            labelSelector=f"{MIGRATED_TEMPLATE_LABEL}=true",
        )
        (template,) = templates["items"]
        name = template["metadata"]["name"]
        assert all(p["metadata"]["annotations"][MIGRATED_ANNOTATION] == name for p in created)
        (request,) = template["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"] == {
            "deviceClassName": "nvidia.vgpu.hami.io",
            "allocationMode": "ExactCount",
            "count": 1,
            "capacity": {"requests": {"memory": "3000Mi", "cores": "30"}},
        }
        claims = await _claims_of(client, namespace, 2)
    owners = {
        (c["metadata"]["ownerReferences"][0]["uid"], c["metadata"]["ownerReferences"][0]["kind"])
        for c in claims
    }
    assert owners == {(p["metadata"]["uid"], "Pod") for p in created}
    assert all(c["metadata"]["ownerReferences"][0].get("controller") for c in claims)
    assert all(c["spec"] == template["spec"]["spec"] for c in claims)
    for pod in created:
        assert pod["spec"]["resourceClaims"] == [
            {"name": POD_CLAIM_NAME, "resourceClaimTemplateName": name}
        ]


async def test_a_pod_annotation_opts_in_without_its_namespace(client: KubeClient) -> None:
    namespace = await _namespace(client)
    pod = gpu_pod("annotated", namespace, gpumem=1000)
    pod["metadata"]["annotations"] = {"vgpu.hami.io/migrate": "true"}
    async with legacy_scheduler(client, SETTINGS) as server:
        _, review = await _post(base_url(server) + "/migrate", _review(pod, namespace))
    assert "patch" in review["response"]


async def test_pods_not_opted_in_pass_unchanged(client: KubeClient) -> None:
    namespace = await _namespace(client)
    async with legacy_scheduler(client, SETTINGS) as server:
        _, review = await _post(
            base_url(server) + "/migrate", _review(gpu_pod("plain", namespace), namespace)
        )
    assert review["response"]["allowed"] is True
    assert "patch" not in review["response"]
    listed = await client.list(f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates")
    assert listed["items"] == []


async def test_what_dra_cannot_express_passes_with_a_warning(client: KubeClient) -> None:
    namespace = await _namespace(client, {"vgpu.hami.io/migrate": "true"})
    pod = next(d for d in yaml.safe_load_all((EXAMPLES / "metax-whole-card.yaml").read_text()) if d)
    pod["metadata"]["namespace"] = namespace
    async with legacy_scheduler(client, SETTINGS) as server:
        _, review = await _post(base_url(server) + "/migrate", _review(pod, namespace))
    response = review["response"]
    assert response["allowed"] is True
    assert "patch" not in response
    (warning,) = response["warnings"]
    assert "metax-tech.com/gpu" in warning
    assert "no DRA DeviceClass" in warning


async def test_a_body_that_is_no_review_is_a_400(client: KubeClient) -> None:
    async with legacy_scheduler(client, SETTINGS) as server:
        status, answer = await _post(base_url(server) + "/migrate", {"kind": "Pod"})
    assert status == 400
    assert "AdmissionReview" in answer["error"]


async def test_migrate_answers_only_allowed_callers(client: KubeClient) -> None:
    namespace = await _namespace(client, {"vgpu.hami.io/migrate": "true"})
    auth = CallerAuthSettings(enabled=True, allowed_webhook_callers=frozenset({"apiserver"}))
    async with legacy_scheduler(client, SETTINGS, caller_auth=auth) as server:
        status, _ = await _post(
            base_url(server) + "/migrate", _review(gpu_pod("p", namespace), namespace)
        )
    assert status == 401
