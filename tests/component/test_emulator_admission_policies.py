"""The shipped slice policy, evaluated by the API emulator as kube-apiserver v1.36 would:
real `kubernetes` client calls made under different identities (bearer tokens)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from simulator.apiserver import APIServer, run_in_thread

POLICY_FILE = Path(__file__).parents[2] / "deploy/components/kubelet-plugin/slice-policy.yaml"
POLICY = "vgpu-kubelet-plugin-own-node-slices"
PLUGIN_NAMESPACE, PLUGIN_ACCOUNT = "vgpu-system", "vgpu-kubelet-plugin"
DRIVER = "nvidia.vgpu.hami.io"
PREFIX = f"ValidatingAdmissionPolicy '{POLICY}' with binding '{POLICY}' denied request: "
NO_NODE = (
    "the kubelet plugin's token carries no node name; run it in a pod with "
    "ServiceAccountTokenPodNodeInfo enabled"
)


def _documents() -> tuple[dict[str, Any], dict[str, Any]]:
    policy, binding = yaml.safe_load_all(POLICY_FILE.read_text())
    assert policy["kind"] == "ValidatingAdmissionPolicy"
    assert binding["kind"] == "ValidatingAdmissionPolicyBinding"
    return policy, binding


def _slice(name: str, node: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"index": {"int": 0}}}],
        },
    }


@pytest.fixture
def server() -> Iterator[APIServer]:
    with run_in_thread() as running:
        yield running


class Clients:
    """Clients of one emulator, each under its own token; closed with the test."""

    def __init__(self, server: APIServer, directory: Path) -> None:
        self._server = server
        self._directory = directory
        self._open: list[ApiClient] = []

    def as_token(self, token: str | None = None) -> client.ResourceV1Api:
        path = self._directory / f"kubeconfig-{len(self._open)}"
        api = config.new_client_from_config(
            config_file=str(self._server.write_kubeconfig(path, token=token))
        )
        self._open.append(api)
        return client.ResourceV1Api(api)

    def plugin(self, node: str | None) -> client.ResourceV1Api:
        token = self._server.tokens.issue_service_account(
            PLUGIN_NAMESPACE,
            PLUGIN_ACCOUNT,
            node_name=node,
            pod_name=f"vgpu-kubelet-plugin-{node}" if node else None,
            pod_uid="0b4a4cfe-5d4b-4d5e-9d59-3f2b1f3c1a10" if node else None,
        )
        return self.as_token(token)

    def admission(self) -> client.AdmissionregistrationV1Api:
        return client.AdmissionregistrationV1Api(self.as_token().api_client)

    def close(self) -> None:
        for api in self._open:
            api.close()


@pytest.fixture
def clients(server: APIServer, tmp_path: Path) -> Iterator[Clients]:
    made = Clients(server, tmp_path)
    yield made
    made.close()


def _install(clients: Clients, actions: list[str] | None = None) -> None:
    policy, binding = _documents()
    admission = clients.admission()
    admission.create_validating_admission_policy(policy)
    if actions is not None:
        binding["spec"]["validationActions"] = actions
    admission.create_validating_admission_policy_binding(binding)


def _refusal(error: ApiException) -> dict[str, Any]:
    status: dict[str, Any] = json.loads(error.body)
    return status


def _denied(call: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as raised:
        call(*args, **kwargs)
    assert raised.value.status == 422
    return _refusal(raised.value)


def test_plugin_writes_its_own_nodes_slices(clients: Clients) -> None:
    _install(clients)
    plugin = clients.plugin("node-a")
    plugin.create_resource_slice(_slice("node-a-gpus", "node-a"))
    plugin.patch_resource_slice("node-a-gpus", {"metadata": {"labels": {"seen": "yes"}}})
    stored = plugin.read_resource_slice("node-a-gpus")
    assert stored.metadata.labels == {"seen": "yes"}
    plugin.delete_resource_slice("node-a-gpus", _preload_content=False)
    assert clients.as_token().list_resource_slice().items == []


def test_plugin_may_not_write_another_nodes_slice(clients: Clients) -> None:
    _install(clients)
    plugin = clients.plugin("node-a")
    status = _denied(plugin.create_resource_slice, _slice("node-b-gpus", "node-b"))
    message = (
        f"{PREFIX}the kubelet plugin on node node-a may not write ResourceSlices of node node-b"
    )
    assert (
        status["message"] == f'resourceslices.resource.k8s.io "node-b-gpus" is forbidden: {message}'
    )
    assert status["reason"] == "Invalid"
    assert status["details"] == {
        "name": "node-b-gpus",
        "group": "resource.k8s.io",
        "kind": "resourceslices",
        "causes": [{"message": message}],
    }
    # Node B's slice, written by someone else, can be neither moved nor deleted by node A.
    admin = clients.as_token()
    admin.create_resource_slice(_slice("node-b-gpus", "node-b"))
    _denied(plugin.delete_resource_slice, "node-b-gpus", _preload_content=False)
    plugin.create_resource_slice(_slice("node-a-gpus", "node-a"))
    moved = _slice("node-a-gpus", "node-b")
    status = _denied(plugin.patch_resource_slice, "node-a-gpus", {"spec": moved["spec"]})
    assert status["message"].endswith("may not write ResourceSlices of node node-b")
    names = {s.metadata.name: s.spec.node_name for s in admin.list_resource_slice().items}
    assert names == {"node-a-gpus": "node-a", "node-b-gpus": "node-b"}


def test_plugin_token_without_a_node_name_is_refused(clients: Clients) -> None:
    _install(clients)
    status = _denied(clients.plugin(None).create_resource_slice, _slice("node-a-gpus", "node-a"))
    assert status["message"] == (
        f'resourceslices.resource.k8s.io "node-a-gpus" is forbidden: {PREFIX}{NO_NODE}'
    )


def test_other_users_are_not_matched(server: APIServer, clients: Clients) -> None:
    _install(clients)
    controller = server.tokens.issue_service_account(
        PLUGIN_NAMESPACE, "vgpu-controller", node_name="node-a"
    )
    clients.as_token(controller).create_resource_slice(_slice("node-b-gpus", "node-b"))
    clients.as_token("a-token-nobody-issued").create_resource_slice(_slice("x", "node-c"))
    clients.as_token().delete_resource_slice("node-b-gpus", _preload_content=False)
    assert [s.metadata.name for s in clients.as_token().list_resource_slice().items] == ["x"]


def test_a_warn_binding_answers_a_warning_and_stores(clients: Clients) -> None:
    _install(clients, actions=["Warn"])
    plugin = clients.plugin("node-a")
    _, code, headers = plugin.create_resource_slice_with_http_info(_slice("node-b-gpus", "node-b"))
    assert code == 201
    assert headers["Warning"] == (
        f"299 - \"Validation failed for ValidatingAdmissionPolicy '{POLICY}' with binding "
        f"'{POLICY}': the kubelet plugin on node node-a may not write ResourceSlices of "
        'node node-b"'
    )
    _, _, headers = plugin.create_resource_slice_with_http_info(_slice("node-a-gpus", "node-a"))
    assert "Warning" not in headers
    assert len(plugin.list_resource_slice().items) == 2


def test_a_denied_dry_run_stores_nothing(clients: Clients) -> None:
    _install(clients)
    plugin = clients.plugin("node-a")
    _denied(plugin.create_resource_slice, _slice("node-b-gpus", "node-b"), dry_run="All")
    plugin.create_resource_slice(_slice("node-a-gpus", "node-a"), dry_run="All")
    assert plugin.list_resource_slice().items == []
