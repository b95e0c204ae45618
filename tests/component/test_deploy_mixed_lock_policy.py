"""deploy/'s node-annotation policy in a mixed cluster: the vGPU controller writes claims'
allocations under HAMi's node lock, so it may take and release `hami.io/mutex.lock`,
and nothing else HAMi keeps on the node (the register stays the device plugin's)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from simulator.apiserver import APIServer, run_in_thread

POLICY = Path(__file__).parents[2] / "deploy/components/legacy/annotation-policy.yaml"
LOCK = "hami.io/mutex.lock"
REGISTER = "hami.io/node-nvidia-register"
HANDSHAKE = "hami.io/node-handshake"
NODE = "node-a"


class Clients:
    def __init__(self, server: APIServer, directory: Path) -> None:
        self.server = server
        self.directory = directory
        self.made: list[ApiClient] = []

    def api(self, token: str | None = None) -> ApiClient:
        path = self.directory / f"kubeconfig-{len(self.made)}"
        made = config.new_client_from_config(
            config_file=str(self.server.write_kubeconfig(path, token=token))
        )
        self.made.append(made)
        return made

    def service_account(self, name: str) -> ApiClient:
        return self.api(self.server.tokens.issue_service_account("vgpu-system", name))


@pytest.fixture
def clients(tmp_path: Path) -> Iterator[Clients]:
    with run_in_thread() as server:
        made = Clients(server, tmp_path)
        admission = client.AdmissionregistrationV1Api(made.api())
        for document in yaml.safe_load_all(POLICY.read_text()):
            if document["kind"] == "ValidatingAdmissionPolicy":
                admission.create_validating_admission_policy(document)
            else:
                admission.create_validating_admission_policy_binding(document)
        client.CoreV1Api(made.api()).create_node({"metadata": {"name": NODE}})
        yield made
        for api in made.made:
            api.close()


def annotate(api: ApiClient, annotations: dict[str, str | None]) -> None:
    client.CoreV1Api(api).patch_node(NODE, {"metadata": {"annotations": annotations}})


def test_the_controller_takes_and_releases_the_node_lock(clients: Clients) -> None:
    controller = clients.service_account("vgpu-controller")
    held = f"2026-12-01T10:00:00Z,team-a,claim-{uuid.uuid4().hex[:5]}"
    annotate(controller, {LOCK: held})
    node = client.CoreV1Api(clients.api()).read_node(NODE)
    assert node.metadata.annotations[LOCK] == held
    annotate(controller, {LOCK: None})
    node = client.CoreV1Api(clients.api()).read_node(NODE)
    assert LOCK not in (node.metadata.annotations or {})


@pytest.mark.parametrize("key", [REGISTER, HANDSHAKE])
def test_the_controller_writes_nothing_else_hami_keeps_on_the_node(
    clients: Clients, key: str
) -> None:
    with pytest.raises(ApiException) as raised:
        annotate(clients.service_account("vgpu-controller"), {key: "forged", LOCK: "x"})
    assert raised.value.status == 403
    message = json.loads(raised.value.body)["message"]
    assert "vgpu-controller may not set or change" in message


def test_a_tenant_still_cannot_take_the_lock(clients: Clients) -> None:
    tenant = clients.api(clients.server.tokens.issue("alice", ("tenants",)))
    with pytest.raises(ApiException) as raised:
        annotate(tenant, {LOCK: "2026-12-01T10:00:00Z,tenant,pod"})
    assert raised.value.status == 403
