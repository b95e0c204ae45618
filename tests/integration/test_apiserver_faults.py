"""The fault-injection handle: injected failures, delays and request counts seen by the client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from dra_driver.kube.rest import KubeClient, NotFoundError, TransientApiError
from simulator.apiserver import APIServer

HELD = "/api/v1/namespaces/default/configmaps/held"


@pytest.fixture
def ns(ns: str, server: APIServer) -> Iterator[str]:
    """The shared namespace, and a clean fault table after: one test's rules never hit the next."""
    yield ns
    server.faults.reset()


def test_next_k_matching_requests_fail_with_a_status(
    server: APIServer, api: ApiClient, ns: str
) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "cm"}})
    rule = server.faults.fail(
        f"/namespaces/{ns}/configmaps/cm$", verb="PATCH", status=429, times=2, retry_after_s=3
    )
    for _ in range(2):
        with pytest.raises(ApiException) as error:
            core.patch_namespaced_config_map("cm", ns, {"data": {"a": "b"}})
        status = json.loads(error.value.body)
        assert (status["kind"], status["code"], status["reason"]) == (
            "Status",
            429,
            "TooManyRequests",
        )
        assert status["details"]["retryAfterSeconds"] == 3
        assert error.value.headers["Retry-After"] == "3"
    assert core.read_namespaced_config_map("cm", ns).data is None
    assert core.patch_namespaced_config_map("cm", ns, {"data": {"a": "b"}}).data == {"a": "b"}
    assert rule.hits == 2


def test_faults_match_only_their_verb_and_path(server: APIServer, api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    server.faults.fail(f"/namespaces/{ns}/pods", verb="POST", status=503)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "unaffected"}})
    with pytest.raises(ApiException) as error:
        core.create_namespaced_pod(
            ns, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        )
    assert json.loads(error.value.body)["reason"] == "ServiceUnavailable"


def test_delayed_requests_are_still_served(server: APIServer, api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    rule = server.faults.delay(f"/namespaces/{ns}/configmaps$", verb="POST", seconds=0.05)
    created = core.create_namespaced_config_map(ns, {"metadata": {"name": "slow"}})
    assert created.metadata.name == "slow"
    assert rule.hits == 1


def test_requests_are_counted_by_path_and_verb(server: APIServer, api: ApiClient, ns: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_config_map(ns, {"metadata": {"name": "counted"}})
    for _ in range(3):
        core.read_namespaced_config_map("counted", ns)
    assert server.faults.count(f"/namespaces/{ns}/configmaps/counted$", verb="GET") == 3
    assert server.faults.count(f"/namespaces/{ns}/configmaps", verb="POST") == 1


async def test_a_hung_request_is_ended_only_by_its_clients_timeout(tmp_path: Path) -> None:
    """No answer ever comes, so the client's timeout fires however slow the machine is."""
    async with APIServer() as own:
        kubeconfig = own.write_kubeconfig(tmp_path / "kubeconfig")
        impatient = await KubeClient.from_kubeconfig(kubeconfig, request_timeout=0.2)
        patient = await KubeClient.from_kubeconfig(kubeconfig)
        try:
            rule = own.faults.hang("/namespaces/default/configmaps/held$", verb="GET")
            with pytest.raises(TransientApiError) as error:
                await impatient.get(HELD)
            with pytest.raises(NotFoundError):
                await patient.get(HELD)  # served: the rule held one request only
        finally:
            await impatient.aclose()
            await patient.aclose()
    assert error.value.reason == "ConnectionError"
    assert "Timeout" in error.value.message
    assert rule.hits == 1
