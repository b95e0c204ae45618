"""AdmissionClient against a tiny webhook over real HTTP on port 0, replaying captures."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from hypothesis import given
from hypothesis import strategies as st
from wire_fixtures import FIXTURES, load_fixture

from dra_driver.errors import InvalidParameterError
from simulator.standins.admission import (
    AdmissionClient,
    JSONPatchError,
    WebhookConfig,
    apply_json_patch,
    canonical_quantity,
    defaulted_pod,
)

CAPTURED_URL = "https://127.0.0.1:18443/webhook"


def fixture(name: str) -> Any:
    return load_fixture(f"mutating-webhook/{name}")


def raw_exchanges() -> list[dict[str, Any]]:
    text = (FIXTURES / "mutating-webhook" / "raw-exchanges.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def outcome(prefix: str) -> dict[str, Any]:
    return next(o for o in fixture("outcomes.json") if o["scenario"].startswith(prefix))


class ProbeWebhook:
    """Answers with a canned body and status; records every request exactly as received."""

    def __init__(self) -> None:
        self.answer: str | None = None
        self.answer_status = 200
        self.echo_uid = True
        self.hang = False
        self.requests: list[dict[str, Any]] = []
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/webhook", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/webhook"

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.requests.append(
            {"path_qs": request.path_qs, "headers": dict(request.headers), "raw": raw.decode()}
        )
        if self.hang:
            await self._release.wait()
        body = self.answer
        if body is None:
            uid = json.loads(raw)["request"]["uid"]
            body = json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
                | {"response": {"uid": uid, "allowed": True}}
            )
        elif self.echo_uid:
            uid = json.loads(raw)["request"]["uid"]
            body = re.sub(r'"uid": "[0-9a-f-]{36}"', f'"uid": "{uid}"', body, count=1)
        content_type = "application/json" if self.answer_status == 200 else "text/plain"
        return web.Response(status=self.answer_status, text=body, content_type=content_type)


@pytest.fixture
async def webhook() -> AsyncIterator[ProbeWebhook]:
    probe = ProbeWebhook()
    await probe.start()
    yield probe
    await probe.stop()


def review_from_capture(client: AdmissionClient, captured: dict[str, Any]) -> dict[str, Any]:
    request = captured["request"]
    return client.build_review(
        request["object"],
        namespace=request["namespace"],
        user_info=request["userInfo"],
        dry_run=request["dryRun"],
        options={k: v for k, v in request["options"].items() if k != "dryRun"},
        uid=request["uid"],
    )


@pytest.mark.parametrize(
    "capture",
    [
        "admissionreview.request.json",
        "admissionreview.request.dry-run.json",
        "admissionreview.request.controller-pod.json",
    ],
)
async def test_the_request_is_byte_identical_to_kube_apiservers(
    webhook: ProbeWebhook, capture: str
) -> None:
    captured = fixture(capture)
    raw = next(e for e in raw_exchanges() if captured["request"]["uid"] in e["raw_body"])
    http = fixture("http.json")["pod_create"]
    async with AdmissionClient(WebhookConfig(url=webhook.url)) as client:
        result = await client.review(review_from_capture(client, captured))

    sent = webhook.requests[0]
    assert result.allowed
    assert sent["raw"] == raw["raw_body"]
    assert sent["raw"].endswith("\n")
    assert sent["path_qs"] == http["path"] == "/webhook?timeout=10s"
    expected = {k: v for k, v in http["headers"].items() if k not in {"Host", "Content-Length"}}
    assert {k: v for k, v in sent["headers"].items() if k in expected} == expected
    assert set(sent["headers"]) == set(http["headers"])
    assert len(webhook.requests) == 1


@pytest.mark.parametrize("dry_run", [False, True])
async def test_the_returned_patch_is_applied_as_stored(
    webhook: ProbeWebhook, dry_run: bool
) -> None:
    webhook.answer = json.dumps(fixture("admissionreview.response.json"))
    stored = fixture("stored-pod.json")
    captured = fixture("admissionreview.request.json")
    captured["request"]["dryRun"] = dry_run
    async with AdmissionClient(WebhookConfig(url=webhook.url)) as client:
        result = await client.review(review_from_capture(client, captured))

    assert result.allowed and result.http_status == 201
    assert result.patch == fixture("jsonpatch.decoded.json")
    assert result.object is not None
    assert result.object["spec"] == stored["spec"]
    assert (
        result.object["spec"]["containers"][1]
        == captured["request"]["object"]["spec"]["containers"][1]
    )


FAILURES = [
    "allowed:false with status {code:403",
    "HTTP 200 with a truncated JSON body",
    "HTTP 500 text/plain",
    "allowed:true + valid JSONPatch, but the AdmissionReview has no apiVersion/kind",
    "allowed:true + patch but no patchType",
    "allowed:false without any status",
    "allowed:false with status {message} only",
]


@pytest.mark.parametrize("scenario", FAILURES)
async def test_failures_give_kube_apiservers_status(webhook: ProbeWebhook, scenario: str) -> None:
    captured_outcome = outcome(scenario)
    webhook.answer = captured_outcome["webhook_response_body"]
    webhook.answer_status = captured_outcome["webhook_http_status"]
    async with AdmissionClient(WebhookConfig(url=webhook.url)) as client:
        result = await client.review(
            review_from_capture(client, fixture("admissionreview.request.json"))
        )

    expected = captured_outcome["raw_api_POST_pods"]
    assert not result.allowed
    assert result.object is None
    assert result.http_status == expected["http_status"]
    assert result.status == expected["body"]
    assert len(webhook.requests) == captured_outcome["webhook_calls_per_create"] == 1


async def test_a_wrong_response_uid_is_refused(webhook: ProbeWebhook) -> None:
    captured_outcome = outcome("allowed:true but response.uid differs")
    webhook.answer = captured_outcome["webhook_response_body"]
    webhook.echo_uid = False
    captured = fixture("admissionreview.request.json")
    async with AdmissionClient(WebhookConfig(url=webhook.url)) as client:
        result = await client.review(review_from_capture(client, captured))

    expected = json.dumps(captured_outcome["raw_api_POST_pods"]["body"])
    their_uid = re.search(r'expected response.uid=\\"([0-9a-f-]+)', expected)
    assert their_uid is not None
    assert result.status == json.loads(expected.replace(their_uid[1], captured["request"]["uid"]))


async def test_a_slow_webhook_times_out(webhook: ProbeWebhook) -> None:
    captured_stderr = outcome("webhook slower than timeoutSeconds")["kubectl_create"]["stderr"]
    webhook.hang = True
    config = WebhookConfig(url=webhook.url, timeout_seconds=0.1)
    async with AdmissionClient(config) as client:
        result = await client.review(
            review_from_capture(client, fixture("admissionreview.request.json"))
        )

    assert result.status is not None and result.http_status == 500
    expected = captured_stderr.split("Internal error occurred: ", 1)[1].strip()
    expected = expected.replace(f"{CAPTURED_URL}?timeout=10s", client.call_url)
    assert result.status["message"] == f"Internal error occurred: {expected}"
    assert len(webhook.requests) == 1


def refused_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/webhook"


async def test_an_unreachable_webhook_fails_the_create() -> None:
    captured_stderr = outcome("webhook not listening")["kubectl_create"]["stderr"]
    url = refused_url()
    async with AdmissionClient(WebhookConfig(url=url)) as client:
        result = await client.review(
            review_from_capture(client, fixture("admissionreview.request.json"))
        )

    expected = captured_stderr.split("Internal error occurred: ", 1)[1].strip()
    expected = expected.replace(f"{CAPTURED_URL}?timeout=10s", f"{url}?timeout=10s")
    expected = expected.replace("127.0.0.1:18443", url.split("/")[2])
    assert result.status is not None
    assert result.status["message"] == f"Internal error occurred: {expected}"
    assert result.status["reason"] == "InternalError"


async def test_failure_policy_ignore_lets_the_object_through_unchanged(
    webhook: ProbeWebhook,
) -> None:
    webhook.answer = "probe: internal error\n"
    webhook.answer_status = 500
    captured = fixture("admissionreview.request.json")
    for config in (
        WebhookConfig(url=webhook.url, failure_policy="Ignore"),
        WebhookConfig(url=refused_url(), failure_policy="Ignore"),
    ):
        async with AdmissionClient(config) as client:
            result = await client.review(review_from_capture(client, captured))
        assert result.allowed and result.http_status == 201
        assert result.object == captured["request"]["object"]


async def test_denials_are_not_subject_to_failure_policy(webhook: ProbeWebhook) -> None:
    webhook.answer = outcome("allowed:false without any status")["webhook_response_body"]
    config = WebhookConfig(url=webhook.url, failure_policy="Ignore")
    async with AdmissionClient(config) as client:
        result = await client.review(
            review_from_capture(client, fixture("admissionreview.request.json"))
        )

    assert not result.allowed and result.http_status == 400


def test_defaulting_yields_the_captured_object() -> None:
    captured = fixture("admissionreview.request.json")["request"]["object"]
    as_written = json.loads(json.dumps(captured))
    cuda = as_written["spec"]["containers"][0]["resources"]
    cuda["limits"]["nvidia.com/gpumem"] = "3000"
    del cuda["requests"]

    assert defaulted_pod(as_written) == captured


@pytest.mark.parametrize(
    ("written", "canonical"),
    [
        ("3000", "3k"),
        (3000, "3k"),
        ("1500", "1500"),
        ("1.5", "1500m"),
        ("0.1", "100m"),
        ("32Gi", "32Gi"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1024", "1024"),
        ("1e3", "1e3"),
        ("1000m", "1"),
        ("0", "0"),
        ("2000000", "2M"),
    ],
)
def test_quantities_are_canonicalised_like_the_api_server(
    written: str | int, canonical: str
) -> None:
    assert canonical_quantity(written) == canonical


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_canonical_quantities_are_a_fixed_point(value: int) -> None:
    once = canonical_quantity(value)
    assert canonical_quantity(once) == once


def test_a_malformed_quantity_names_the_field() -> None:
    with pytest.raises(InvalidParameterError, match="quantity"):
        canonical_quantity("3 GB")


def test_json_patch_operations() -> None:
    document = {"spec": {"containers": [{"name": "a"}], "schedulerName": "default-scheduler"}}
    patch = [
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
        {"op": "add", "path": "/spec/containers/0/env", "value": [{"name": "X", "value": "1"}]},
        {"op": "add", "path": "/spec/containers/0/env/-", "value": {"name": "Y", "value": "2"}},
        {"op": "add", "path": "/metadata", "value": {"annotations": {"a~b/c": "v"}}},
        {"op": "copy", "from": "/metadata/annotations/a~0b~1c", "path": "/spec/copied"},
        {"op": "move", "from": "/spec/copied", "path": "/spec/moved"},
        {"op": "test", "path": "/spec/moved", "value": "v"},
        {"op": "remove", "path": "/spec/containers/0/env/0"},
    ]

    assert apply_json_patch(document, patch) == {
        "spec": {
            "containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}]}],
            "schedulerName": "hami-scheduler",
            "moved": "v",
        },
        "metadata": {"annotations": {"a~b/c": "v"}},
    }
    assert document["spec"]["schedulerName"] == "default-scheduler"


@pytest.mark.parametrize(
    "operation",
    [
        {"op": "replace", "path": "/spec/missing", "value": 1},
        {"op": "remove", "path": "/spec/containers/3"},
        {"op": "test", "path": "/spec/schedulerName", "value": "other"},
        {"op": "add", "path": "/spec/containers/01", "value": {}},
        {"op": "frobnicate", "path": "/spec"},
    ],
)
def test_json_patch_rejects_what_does_not_apply(operation: dict[str, Any]) -> None:
    document = {"spec": {"containers": [{}], "schedulerName": "s"}}
    with pytest.raises(JSONPatchError):
        apply_json_patch(document, [operation])


def test_the_captured_patch_is_the_decoded_one() -> None:
    encoded = fixture("admissionreview.response.json")["response"]["patch"]
    assert json.loads(base64.b64decode(encoded)) == fixture("jsonpatch.decoded.json")
