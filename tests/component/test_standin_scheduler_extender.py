"""SchedulerExtenderClient against a tiny extender over real HTTP on port 0 (captures replayed)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from wire_fixtures import FIXTURES, load_fixture

from simulator.standins.scheduler_extender import (
    ExtenderConfig,
    SchedulerExtenderClient,
    error_backoff,
)

CAPTURED_PREFIX = "http://127.0.0.1:18888"


def fixture(name: str) -> Any:
    return load_fixture(f"scheduler-extender/{name}")


def exchanges(scenario: str) -> list[dict[str, Any]]:
    text = (FIXTURES / "scheduler-extender" / "raw-exchanges.jsonl").read_text()
    return [e for e in map(json.loads, text.splitlines()) if e["scenario"] == scenario]


def outcome(prefix: str) -> dict[str, Any]:
    return next(o for o in fixture("outcomes.json") if o["scenario"].startswith(prefix))


class ProbeExtender:
    """Answers each verb from a queue of canned answers; records what arrived."""

    def __init__(self) -> None:
        self.answers: dict[str, list[dict[str, Any]]] = {"/filter": [], "/bind": []}
        self.requests: list[dict[str, Any]] = []
        self.hang = False
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/filter", self.handle)
        app.router.add_post("/bind", self.handle)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.requests.append(
            {
                "path": request.path_qs,
                "headers": dict(request.headers),
                "raw": raw.decode(),
                "peer": peer,
            }
        )
        if self.hang:
            await self._release.wait()
        queue = self.answers[request.path]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        return web.json_response(answer)

    def paths(self) -> list[str]:
        return [r["path"] for r in self.requests]


@pytest.fixture
async def extender() -> AsyncIterator[ProbeExtender]:
    probe = ProbeExtender()
    await probe.start()
    yield probe
    await probe.stop()


def replay(probe: ProbeExtender, scenario: str) -> list[dict[str, Any]]:
    """Queue the scenario's captured answers; return its captured exchanges."""
    captured = exchanges(scenario)
    for exchange in captured:
        probe.answers[exchange["path"]].append(exchange["response"])
    return captured


def nodes_of(filter_exchange: dict[str, Any]) -> list[dict[str, Any]]:
    args = json.loads(filter_exchange["raw_body"])
    if args["NodeNames"] is not None:
        return [{"metadata": {"name": name}} for name in args["NodeNames"]]
    return args["Nodes"]["items"]


def normalised(raw: str) -> dict[str, Any]:
    """Node order varies between cycles in kube-scheduler too (parallel filtering)."""
    args = json.loads(raw)
    if args.get("NodeNames"):
        args["NodeNames"] = sorted(args["NodeNames"])
    return args


def with_prefix(text: str, url: str) -> str:
    return text.replace(CAPTURED_PREFIX, url).replace("127.0.0.1:18888", url.split("/")[2])


async def test_success_sends_the_captured_bytes_over_one_connection(
    extender: ProbeExtender,
) -> None:
    captured = replay(extender, "success")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    http = fixture("http.json")
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    assert [r["raw"] for r in extender.requests] == [e["raw_body"] for e in captured]
    assert extender.paths() == ["/filter", "/bind"]
    assert json.loads(captured[1]["raw_body"]) == fixture("bind.request.json")
    for sent, verb in zip(extender.requests, ("filter", "bind"), strict=True):
        expected = {
            k: v for k, v in http[verb]["headers"].items() if k not in {"Host", "Content-Length"}
        }
        assert set(sent["headers"]) == set(http[verb]["headers"])
        assert {k: sent["headers"][k] for k in expected} == expected
        assert not sent["raw"].endswith("\n")
    assert extender.requests[0]["peer"] == extender.requests[1]["peer"]
    assert result.node == outcome("success")["spec.nodeName"]
    assert result.message == outcome("success")["events"][0]["message"]


async def test_the_stored_pod_is_rewritten_as_the_scheduler_holds_it(
    extender: ProbeExtender,
) -> None:
    captured = replay(extender, "success")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    stored = {"apiVersion": "v1", "kind": "Pod", **json.loads(json.dumps(pod))}
    stored["metadata"]["managedFields"] = [{"manager": "kubectl-create", "operation": "Update"}]
    resources = stored["spec"]["containers"][0]["resources"]
    resources["limits"]["nvidia.com/gpumem"] = "3000"
    del resources["requests"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        await client.schedule_once(stored, nodes_of(captured[0]))

    assert extender.requests[0]["raw"] == captured[0]["raw_body"]
    assert '"nvidia.com/gpumem":"3k"' in extender.requests[0]["raw"]


async def test_rejecting_every_node_retries_once_then_waits_for_events(
    extender: ProbeExtender,
) -> None:
    captured = replay(extender, "fail-all")
    expected = outcome("fail-all")
    retry_pod = fixture("filter.fail-all.retry.request.json")["Pod"]
    condition_time = expected["pod_condition"]["lastTransitionTime"]
    events: asyncio.Queue[str] = asyncio.Queue()
    events.put_nowait("node gpu-node-1 labelled")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        history = await client.schedule(
            pod,
            nodes_of(captured[0]),
            cluster_events=events,
            now=lambda: condition_time,
            max_cycles=3,
        )
        without_events = await client.schedule(pod, nodes_of(captured[0]), max_cycles=10)

    assert [r.reason for r in history] == ["Unschedulable"] * 3
    assert {r.message for r in history} == {expected["pod_condition"]["message"]}
    assert events.empty()
    # Only the resourceVersion differs: the real status write went through an API server.
    retry_pod["metadata"]["resourceVersion"] = pod["metadata"]["resourceVersion"]
    assert json.loads(extender.requests[1]["raw"])["Pod"] == retry_pod
    assert json.loads(extender.requests[2]["raw"])["Pod"] == retry_pod
    assert (
        normalised(extender.requests[1]["raw"])["NodeNames"]
        == (normalised(captured[1]["raw_body"])["NodeNames"])
    )
    assert len(without_events) == 2
    assert extender.paths() == ["/filter"] * 5


async def test_unresolvable_nodes_change_only_the_preemption_text(
    extender: ProbeExtender,
) -> None:
    captured = replay(extender, "unresolvable-all")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    expected = outcome("unresolvable-all")["pod_condition"]
    assert (result.reason, result.message) == (expected["reason"], expected["message"])


async def test_a_filter_error_is_a_scheduler_error_with_backoff(extender: ProbeExtender) -> None:
    captured = replay(extender, "filter-error")
    expected = outcome("filter returns non-empty Error")["pod_condition"]
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    pod = json.loads(captured[0]["raw_body"])["Pod"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        history = await client.schedule(pod, nodes_of(captured[0]), sleep=record, max_cycles=5)

    assert {(r.reason, r.message) for r in history} == {(expected["reason"], expected["message"])}
    assert delays == [1.0, 2.0, 4.0, 8.0]
    assert extender.paths() == ["/filter"] * 5


async def test_a_bind_error_repeats_the_whole_cycle(extender: ProbeExtender) -> None:
    captured = replay(extender, "bind-error")
    expected = outcome("bind returns non-empty Error")
    delays: list[float] = []

    async def record(delay: float) -> None:
        delays.append(delay)

    pod = json.loads(captured[0]["raw_body"])["Pod"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        history = await client.schedule(pod, nodes_of(captured[0]), sleep=record, max_cycles=2)

    assert extender.paths() == [e["path"] for e in captured] == ["/filter", "/bind"] * 2
    assert [r.message for r in history] == [expected["pod_condition"]["message"]] * 2
    assert all(r.node is None for r in history)
    assert json.loads(extender.requests[1]["raw"]) == json.loads(captured[1]["raw_body"])
    assert delays == [1.0]


async def test_a_made_up_node_name_is_refused(extender: ProbeExtender) -> None:
    captured = replay(extender, "bogus-node-name")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    event = outcome("filter returns a node name that was not")["events"][0]["message"]
    assert result.reason == "SchedulerError"
    assert result.message == with_prefix(event, extender.url)
    assert extender.paths() == ["/filter"]


async def test_an_unreachable_extender_gives_the_go_error_text() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    captured = exchanges("recovered-after-connection-refused")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=url)) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    event = outcome("extender not listening")["events"][0]["message"]
    assert (result.reason, result.message) == ("SchedulerError", with_prefix(event, url))


async def test_an_ignorable_extender_that_fails_is_skipped(extender: ProbeExtender) -> None:
    captured = replay(extender, "filter-error")
    extender.answers["/bind"].append({"Error": ""})
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    config = ExtenderConfig(url_prefix=extender.url, ignorable=True)
    async with SchedulerExtenderClient(config) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    assert result.node == nodes_of(captured[0])[0]["metadata"]["name"]
    assert extender.paths() == ["/filter", "/bind"]


async def test_a_slow_extender_hits_the_http_timeout(extender: ProbeExtender) -> None:
    captured = replay(extender, "http-timeout")
    extender.hang = True
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    config = ExtenderConfig(url_prefix=extender.url, http_timeout=0.1)
    async with SchedulerExtenderClient(config) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    event = outcome("extender slower than httpTimeout")["events"][0]["message"]
    assert (result.reason, result.message) == ("SchedulerError", with_prefix(event, extender.url))


async def test_without_node_cache_the_full_node_list_goes_and_a_list_comes_back(
    extender: ProbeExtender,
) -> None:
    captured = replay(extender, "nodecache-false-success")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    config = ExtenderConfig(url_prefix=extender.url, node_cache_capable=False)
    async with SchedulerExtenderClient(config) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    assert [r["raw"] for r in extender.requests] == [e["raw_body"] for e in captured]
    assert json.loads(captured[0]["raw_body"])["NodeNames"] is None
    assert (
        result.node
        == outcome("nodeCacheCapable false, extender answers a NodeList")["spec.nodeName"]
    )


async def test_without_node_cache_a_names_only_answer_is_ignored(extender: ProbeExtender) -> None:
    captured = replay(extender, "nodecache-false-names-only")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    config = ExtenderConfig(url_prefix=extender.url, node_cache_capable=False)
    async with SchedulerExtenderClient(config) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))

    expected = outcome("nodeCacheCapable false but the extender answers NodeNames only")
    assert (result.reason, result.message) == (
        expected["pod_condition"]["reason"],
        expected["pod_condition"]["message"],
    )
    assert extender.requests[0]["raw"] == captured[0]["raw_body"]


async def test_a_pod_without_managed_resources_never_reaches_the_extender(
    extender: ProbeExtender,
) -> None:
    captured = exchanges("success")
    pod = json.loads(captured[0]["raw_body"])["Pod"]
    for container in pod["spec"]["containers"]:
        container["resources"] = {"limits": {"cpu": "1"}}
    async with SchedulerExtenderClient(ExtenderConfig(url_prefix=extender.url)) as client:
        result = await client.schedule_once(pod, nodes_of(captured[0]))
        only_gpumem = json.loads(captured[0]["raw_body"])["Pod"]
        only_gpumem["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpumem": "1k"}}
        extender.answers["/filter"].append({"NodeNames": [], "FailedNodes": {}, "Error": ""})
        await client.schedule_once(only_gpumem, nodes_of(captured[0]))

    assert result.extender_called is False and result.node == "gpu-node-1"
    assert extender.paths() == ["/filter"]


def test_backoff_doubles_from_one_second_up_to_ten() -> None:
    assert [error_backoff(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
