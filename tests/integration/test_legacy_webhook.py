"""The legacy webhook over HTTP(S), called by the admission stand-in, quota from the emulator."""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from legacy_fixtures import add_namespace, base_url, create_pod, gpu_pod, legacy_scheduler
from wire_fixtures import load_fixture

from api.hami_annotations import VGPU_DEVICES_ALLOCATED, VGPU_NODE
from controller.legacy.config import LegacySettings, parse_device_config
from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer
from simulator.standins.admission import AdmissionClient, WebhookConfig

NS = "gpu-test"
ROOT = Path(__file__).resolve().parents[2]
USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield server, client
        finally:
            await client.aclose()


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A serving certificate for 127.0.0.1 that is also its own CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "vgpu-legacy-webhook")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "tls.crt", directory / "tls.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def admit(url: str, pod: dict[str, Any], ca: Path | None = None):
    async with AdmissionClient(WebhookConfig(url=f"{url}/webhook", ca_file=ca)) as apiserver:
        review = apiserver.build_review(pod, namespace=NS, user_info=USER)
        return await apiserver.review(review)


@pytest.mark.parametrize("capture", ["admissionreview.request", "admissionreview.request.dry-run"])
async def test_captured_review_over_tls_gets_our_scheduler(
    cluster, tmp_path: Path, capture: str
) -> None:
    _, client = cluster
    cert, key = self_signed(tmp_path)
    captured = load_fixture(f"mutating-webhook/{capture}.json")
    async with (
        legacy_scheduler(client, tls_cert=cert, tls_key=key) as server,
        AdmissionClient(
            WebhookConfig(url=f"{base_url(server, 'https')}/webhook", ca_file=cert)
        ) as apiserver,
    ):
        outcome = await apiserver.review(captured)
    assert outcome.allowed and outcome.http_status == 201
    assert outcome.patch == [
        {
            "op": "add",
            "path": "/spec/containers/0/env",
            "value": [{"name": "CUDA_DISABLE_CONTROL", "value": "false"}],
        },
        {"op": "replace", "path": "/spec/schedulerName", "value": "hami-scheduler"},
    ]
    assert outcome.object["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": "3k",
    }


async def test_whole_card_request_gets_defaults_and_is_stored(cluster) -> None:
    _, client = cluster
    async with legacy_scheduler(client) as server:
        outcome = await admit(base_url(server), gpu_pod("whole", NS, scheduler=None))
        assert outcome.allowed
        limits = outcome.object["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpucores"] == "100"
        stored = await create_pod(client, outcome.object)
        assert stored["spec"]["schedulerName"] == "hami-scheduler"


async def test_denials_reach_the_user_with_what_to_change(cluster) -> None:
    _, client = cluster
    privileged = gpu_pod("priv", NS)
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    async with legacy_scheduler(client) as server:
        outcome = await admit(base_url(server), privileged)
        assert not outcome.allowed and outcome.http_status == 403
        assert outcome.status["message"].startswith(
            'admission webhook "vgpu.hami.io" denied the request: container cuda is privileged'
        )
        bad = gpu_pod("pct", NS)
        bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "120"
        outcome = await admit(base_url(server), bad)
        assert outcome.http_status == 400 and "gpumem-percentage" in outcome.status["message"]


async def test_privileged_sidecar_of_a_gpu_pod_is_denied(cluster) -> None:
    _, client = cluster
    pod = gpu_pod("sidecar", NS)
    pod["spec"]["containers"].append(
        {"name": "agent", "image": "pause", "securityContext": {"privileged": True}}
    )
    async with legacy_scheduler(client) as server:
        outcome = await admit(base_url(server), pod)
    assert not outcome.allowed and outcome.http_status == 403
    assert outcome.status["message"].startswith(
        'admission webhook "vgpu.hami.io" denied the request: container agent is privileged'
    )


@pytest.mark.parametrize(
    ("part", "value", "field"),
    [
        ("env", [{"name": "CUDA_DEVICE_MEMORY_LIMIT_0", "value": "80g"}], "env[0]"),
        ("env", [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}], "env[0]"),
        ("env", [{"name": "CUDA_REDIRECT", "value": "/tmp/passthrough.so"}], "env[0]"),
        ("envFrom", [{"configMapRef": {"name": "limits"}}], "envFrom[0]"),
        ("volumeMounts", [{"name": "h", "mountPath": "/etc/ld.so.preload"}], "volumeMounts[0]"),
    ],
)
async def test_tampering_gpu_container_is_refused_over_http(
    cluster, part: str, value: list[dict[str, Any]], field: str
) -> None:
    _, client = cluster
    pod = gpu_pod("tamper", NS)
    pod["spec"]["containers"][0][part] = value
    async with legacy_scheduler(client) as server:
        outcome = await admit(base_url(server), pod)
    assert not outcome.allowed and outcome.http_status == 403
    assert outcome.status["message"].startswith(
        'admission webhook "vgpu.hami.io" denied the request: '
        f"container cuda: spec.containers[0].{field}"
    )


async def test_admitted_gpu_pod_is_stored_with_disable_control_pinned_last(cluster) -> None:
    _, client = cluster
    pod = gpu_pod("pinned", NS)
    pod["spec"]["containers"][0]["envFrom"] = [{"prefix": "APP_", "configMapRef": {"name": "c"}}]
    async with legacy_scheduler(client) as server:
        outcome = await admit(base_url(server), pod)
    assert outcome.allowed
    stored = await create_pod(client, outcome.object)
    assert stored["spec"]["containers"][0]["env"][-1] == {
        "name": "CUDA_DISABLE_CONTROL",
        "value": "false",
    }


async def test_opt_out_namespace_may_disable_control(cluster) -> None:
    _, client = cluster
    settings = LegacySettings(enforcement_opt_out_namespaces=frozenset({NS}))
    pod = gpu_pod("opt-out", NS)
    pod["spec"]["containers"][0]["env"] = [{"name": "CUDA_DISABLE_CONTROL", "value": "true"}]
    async with legacy_scheduler(client, settings) as server:
        outcome = await admit(base_url(server), pod)
    assert outcome.allowed
    stored = await create_pod(client, outcome.object)
    assert stored["spec"]["containers"][0]["env"] == [
        {"name": "CUDA_DISABLE_CONTROL", "value": "true"}
    ]


async def test_overwrite_env_pod_without_gpu_is_stored_seeing_none(cluster) -> None:
    _, client = cluster
    settings = LegacySettings(device_config=parse_device_config({"nvidia": {"overwriteEnv": True}}))
    pod = gpu_pod("cpu-only", NS, gpu=None, scheduler=None)
    async with legacy_scheduler(client, settings) as server:
        outcome = await admit(base_url(server), pod)
    assert outcome.allowed
    stored = await create_pod(client, outcome.object)
    container = stored["spec"]["containers"][0]
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in container["env"]
    assert stored["spec"]["schedulerName"] == "default-scheduler"


async def test_namespace_quota_counts_pods_already_placed(cluster) -> None:
    _, client = cluster
    quota = {
        "metadata": {"name": "gpu", "namespace": NS},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "4000", "pods": "10"}},
    }
    await client.create(f"/api/v1/namespaces/{NS}/resourcequotas", quota)
    placed = gpu_pod("placed", NS, gpumem=3000)
    placed["metadata"]["annotations"] = {
        VGPU_NODE: "n1",
        VGPU_DEVICES_ALLOCATED: "GPU-a,NVIDIA,3000,0:;",
    }
    await create_pod(client, placed)
    async with legacy_scheduler(client) as server:
        await server.state.pods.wait_for(lambda _: len(server.state.allocations) == 1)
        outcome = await admit(base_url(server), gpu_pod("more", NS, gpumem=2000))
        assert not outcome.allowed
        assert (
            f"namespace {NS} ResourceQuota limits.nvidia.com/gpumem is 4000 MiB with 3000 MiB "
            "in use, and this pod asks for 2000 MiB"
        ) in outcome.status["message"]
        assert (await admit(base_url(server), gpu_pod("fits", NS, gpumem=1000))).allowed


@pytest.mark.parametrize(
    "body",
    [
        b"{",
        b"[]",
        b'{"apiVersion": "v1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": '
        b'{"uid": "u", "object": {"spec": {"containers": [{"env": {}}]}}}}',
    ],
)
async def test_malformed_review_is_400(cluster, body: bytes) -> None:
    _, client = cluster
    async with (
        legacy_scheduler(client) as server,
        aiohttp.ClientSession() as session,
        session.post(f"{base_url(server)}/webhook", data=body) as response,
    ):
        assert response.status == 400


async def test_review_without_object_is_400_and_other_kinds_are_allowed(cluster) -> None:
    _, client = cluster
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u1", "kind": {"kind": "Pod"}},
    }
    async with legacy_scheduler(client) as server, aiohttp.ClientSession() as session:
        async with session.post(f"{base_url(server)}/webhook", json=review) as response:
            assert response.status == 400
        review["request"]["kind"] = {"kind": "Service"}
        async with session.post(f"{base_url(server)}/webhook", json=review) as response:
            answer = await response.json()
        assert answer["response"] == {"uid": "u1", "allowed": True}


def test_shipped_configuration_skips_ignored_namespaces_and_pods() -> None:
    path = ROOT / "deploy/components/legacy-scheduler/mutatingwebhookconfiguration.yaml"
    webhook = yaml.safe_load(path.read_text())["webhooks"][0]
    expected = {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}
    assert expected in webhook["namespaceSelector"]["matchExpressions"]
    assert expected in webhook["objectSelector"]["matchExpressions"]
    assert webhook["clientConfig"]["service"]["path"] == "/webhook"
    assert webhook["rules"][0]["operations"] == ["CREATE"]
