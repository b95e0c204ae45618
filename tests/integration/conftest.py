"""Fixtures for the emulator suites: one API server per module, so modules never see each other's
objects or injected faults, and a fresh namespace per test, so tests in a module stay apart."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.client import ApiClient

from simulator.apiserver import APIServer, run_in_thread


@pytest.fixture(scope="module")
def server() -> Iterator[APIServer]:
    with run_in_thread() as running:
        yield running


@pytest.fixture(scope="module")
def kubeconfig(server: APIServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return server.write_kubeconfig(tmp_path_factory.mktemp("kube") / "config")


@pytest.fixture(scope="module")
def api(kubeconfig: Path) -> Iterator[ApiClient]:
    with config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        yield api_client


@pytest.fixture
def ns(api: ApiClient) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    return name
