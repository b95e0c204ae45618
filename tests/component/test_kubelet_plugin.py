"""The kubelet DRA plugin over real unix sockets, driven by the kubelet stand-in,
reading claims from the API emulator."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import grpc
import pytest
from cdi_applier import apply_devices
from grpc_health.v1 import health_pb2 as grpc_health_pb2
from grpc_health.v1 import health_pb2_grpc as grpc_health_pb2_grpc
from kubernetes import config
from plugin_settings_rig import mock_node_settings
from prometheus_client import CollectorRegistry

from api.generated import dra_health_v1alpha1_pb2 as health_pb2
from api.generated import dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from cdi.naming import CDI_KIND
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls
from kubeletplugin.checkpoint import decode_checkpoint
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin, PluginSettings
from kubeletplugin.service import LIBRARY_LOGGERS, quiet_library_loggers
from simulator.apiserver import APIServer
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings

DRIVER = "vgpu.hami.io"
NODE = "node-a"
GIB = 1 << 30
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
MOCK_GPUS = """
gpus:
  - {uuid: GPU-00000000-0000-0000-0000-00000000000a, index: 0, minor: 0, memory: 16Gi}
  - {uuid: GPU-00000000-0000-0000-0000-00000000000b, index: 1, minor: 1, memory: 16Gi, numa: 1}
"""


@dataclass
class Node:
    root: Path
    server: APIServer
    client: KubeClient
    kubelet: KubeletDRA
    settings: PluginSettings

    @property
    def cdi_dir(self) -> Path:
        return self.settings.cdi_dir

    def plugin(self) -> KubeletPlugin:
        return KubeletPlugin(
            self.settings, self.client, MockBackend(self.settings.mock_gpus), CollectorRegistry()
        )

    async def claim(self, name: str, results: list[dict], config=()) -> ClaimRef:
        created = await self.client.create(CLAIMS, claim_manifest(name))
        await self.client.patch(
            object_path(CLAIMS, name) + "/status",
            {"status": {"allocation": allocation(results, config)}},
        )
        return ClaimRef("default", created["metadata"]["uid"], name)


def claim_manifest(name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia.vgpu.hami.io"}}]
            }
        },
    }


def result(device: str, memory: str, cores: str = "0", request: str = "gpu") -> dict:
    return {
        "request": request,
        "driver": DRIVER,
        "pool": NODE,
        "device": device,
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": {"memory": memory, "cores": cores, "shares": "1"},
    }


def allocation(results: list[dict], config=()) -> dict:
    return {
        "devices": {"results": results, "config": list(config)},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
        "allocationTimestamp": "2026-11-29T00:00:00Z",
    }


def install_libvgpu_files(root: Path) -> None:
    """What `dra-driver install-libvgpu` leaves on a node: the specs mount these."""
    (root / "vgpu").mkdir(exist_ok=True)
    (root / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF")
    (root / "vgpu" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    (root / "vgpulock").mkdir(mode=0o1777, exist_ok=True)


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    # unix socket paths must stay short: use a short temp root
    root = Path(tempfile.mkdtemp(prefix="vgpu-", dir="/tmp"))
    try:
        install_libvgpu_files(root)
        settings = mock_node_settings(root, MOCK_GPUS, NODE)
        async with APIServer() as server:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            await client.create("/api/v1/nodes", {"metadata": {"name": NODE}})
            kubelet = KubeletDRA(KubeletDRASettings(NODE, root / "registry"), None)
            try:
                async with kubelet:
                    yield Node(root, server, client, kubelet, settings)
            finally:
                await client.aclose()
                await settle_cancelled_grpc_calls()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def spec_of(node: Node, uid: str) -> dict:
    return json.loads((node.cdi_dir / f"k8s.vgpu.hami.io-claim_{uid}.json").read_text())


def env_of(spec: dict) -> dict[str, str]:
    entries = list(spec.get("containerEdits", {}).get("env", []))
    for device in spec["devices"]:
        entries += device["containerEdits"].get("env", [])
    return dict(entry.split("=", 1) for entry in entries)


async def test_registers_and_prepares_a_claim_on_v1(node: Node):
    async with node.plugin():
        plugin = await node.kubelet.wait_registered(DRIVER)
        assert plugin.chosen_service == "v1.DRAPlugin"
        assert plugin.endpoint == str(node.settings.dra_socket)
        claim = await node.claim("one", [result("gpu-1", "4Gi", "30")])
        response = await node.kubelet.prepare(DRIVER, [claim])
        entry = response.claims[claim.uid]
        assert entry.error == ""
        (device,) = entry.devices
        assert (device.pool_name, device.device_name, list(device.request_names)) == (
            NODE,
            "gpu-1",
            ["gpu"],
        )
        assert list(device.cdi_device_ids) == [f"{CDI_KIND}={claim.uid}-gpu-1"]
        assert device.share_id
        env = env_of(spec_of(node, claim.uid))
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
        assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-00000000-0000-0000-0000-00000000000b"
        assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"].startswith(
            f"{node.root}/vgpu/claims/{claim.uid}/"
        )
        assert (node.root / "vgpu" / "claims" / claim.uid).is_dir()


async def test_repeated_prepare_answers_the_same_without_reading_the_claim(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("again", [result("gpu-0", "1Gi")])
        first = await node.kubelet.prepare(DRIVER, [claim])
        gets = node.server.faults.count("/resourceclaims/again", verb="GET")
        second = await node.kubelet.prepare(DRIVER, [claim])
        assert second == first
        assert node.server.faults.count("/resourceclaims/again", verb="GET") == gets


async def test_multi_device_claim_and_two_claims_sharing_a_gpu(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        both = await node.claim(
            "both", [result("gpu-0", "2Gi", "10"), result("gpu-1", "3Gi", "20")]
        )
        other = await node.claim("other", [result("gpu-0", "8Gi", "50")])
        response = await node.kubelet.prepare(DRIVER, [both, other])
        assert [r.error for r in response.claims.values()] == ["", ""]
        env = env_of(spec_of(node, both.uid))
        assert env["NVIDIA_VISIBLE_DEVICES"] == (
            "GPU-00000000-0000-0000-0000-00000000000a,GPU-00000000-0000-0000-0000-00000000000b"
        )
        assert (env["CUDA_DEVICE_MEMORY_LIMIT_0"], env["CUDA_DEVICE_MEMORY_LIMIT_1"]) == (
            "2048m",
            "3072m",
        )
        spec = spec_of(node, both.uid)
        assert [d["name"] for d in spec["devices"]] == [f"{both.uid}-gpu-0", f"{both.uid}-gpu-1"]
        assert env_of(spec_of(node, other.uid))["CUDA_DEVICE_MEMORY_LIMIT_0"] == "8192m"


async def test_overcommitted_claim_fails_alone(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        big = await node.claim("big", [result("gpu-0", "12Gi")])
        too_much = await node.claim("too-much", [result("gpu-0", "5Gi")])
        fine = await node.claim("fine", [result("gpu-1", "5Gi")])
        await node.kubelet.prepare(DRIVER, [big])
        response = await node.kubelet.prepare(DRIVER, [too_much, fine])
        assert "over-commits device gpu-0" in response.claims[too_much.uid].error
        assert response.claims[fine.uid].error == ""
        assert not (node.cdi_dir / f"k8s.vgpu.hami.io-claim_{too_much.uid}.json").exists()


async def test_bad_claims_get_an_error_each(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        elsewhere = await node.claim("elsewhere", [{**result("gpu-0", "1Gi"), "pool": "node-b"}])
        unknown = await node.claim("unknown", [result("gpu-7", "1Gi")])
        bad_config = await node.claim(
            "bad-config",
            [result("gpu-0", "1Gi")],
            [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"kind": "Nope"}}}],
        )
        gone = ClaimRef("default", str(uuid.uuid4()), "gone")
        sneaky = ClaimRef("default", "../../etc", "sneaky")
        response = await node.kubelet.prepare(
            DRIVER, [elsewhere, unknown, bad_config, gone, sneaky]
        )
        errors = {uid: entry.error for uid, entry in response.claims.items()}
        assert "no device of driver vgpu.hami.io in pool node-a" in errors[elsewhere.uid]
        assert "device 'gpu-7' is not published by this node" in errors[unknown.uid]
        assert "opaque.parameters" in errors[bad_config.uid]
        assert "does not exist" in errors[gone.uid]
        assert "claimUID" in errors[sneaky.uid]
        assert list(node.cdi_dir.glob("*")) == []
        assert not (node.root / "etc").exists()


async def test_unprepare_removes_spec_cache_dir_and_record(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("done", [result("gpu-0", "1Gi")])
        await node.kubelet.prepare(DRIVER, [claim])
        response = await node.kubelet.unprepare(
            DRIVER, [claim, ClaimRef("default", str(uuid.uuid4()), "x")]
        )
        assert [entry.error for entry in response.claims.values()] == ["", ""]
        assert list(node.cdi_dir.iterdir()) == []
        assert not (node.root / "vgpu" / "claims" / claim.uid).exists()
        assert plugin.preparer.prepared_records() == []


async def test_v1beta1_clients_get_the_same_devices_without_share_id(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("beta", [result("gpu-0", "1Gi")])
        async with grpc.aio.insecure_channel(f"unix://{node.settings.dra_socket}") as channel:
            stub = dra_v1beta1_pb2_grpc.DRAPluginStub(channel)
            response = await stub.NodePrepareResources(
                dra_v1beta1_pb2.NodePrepareResourcesRequest(
                    claims=[dra_v1beta1_pb2.Claim(namespace="default", uid=claim.uid, name="beta")]
                )
            )
        (device,) = response.claims[claim.uid].devices
        assert list(device.cdi_device_ids) == [f"{CDI_KIND}={claim.uid}-gpu-0"]
        assert "share_id" not in device.DESCRIPTOR.fields_by_name


async def test_restart_keeps_prepared_claims_and_reboot_reprepares(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("survivor", [result("gpu-0", "1Gi")])
        first = await node.kubelet.prepare(DRIVER, [claim])
    await node.kubelet.wait_deregistered(DRIVER)
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        assert [r.uid for r in plugin.preparer.prepared_records()] == [claim.uid]
        assert await node.kubelet.prepare(DRIVER, [claim]) == first
    await node.kubelet.wait_deregistered(DRIVER)
    (node.root / "boot_id").write_text("boot-2\n")
    shutil.rmtree(node.cdi_dir)
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        assert plugin.preparer.prepared_records() == []
        again = await node.kubelet.prepare(DRIVER, [claim])
        assert again.claims[claim.uid].error == ""
        assert spec_of(node, claim.uid)["devices"][0]["name"] == f"{claim.uid}-gpu-0"


async def test_missing_cdi_spec_is_rewritten(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("rewrite", [result("gpu-0", "1Gi")])
        first = await node.kubelet.prepare(DRIVER, [claim])
        before = spec_of(node, claim.uid)
        for path in node.cdi_dir.iterdir():
            path.unlink()
        assert await node.kubelet.prepare(DRIVER, [claim]) == first
        assert spec_of(node, claim.uid) == before


async def test_sockets_come_back_after_kubelet_wipes_the_dirs(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        generation = plugin.socket_generation
        shutil.rmtree(node.settings.registry_dir)
        shutil.rmtree(node.settings.dra_socket.parent)
        await node.kubelet.wait_deregistered(DRIVER)
        await plugin.wait_for_sockets(generation + 1)
        assert node.settings.dra_socket.exists()
        assert node.settings.registration_socket.exists()
        node.kubelet.rescan()
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("after-wipe", [result("gpu-0", "1Gi")])
        response = await node.kubelet.prepare(DRIVER, [claim])
        assert response.claims[claim.uid].error == ""


async def test_health_stream_and_slices_follow_the_gpu_file(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        first = await node.kubelet.wait_health(DRIVER, lambda h: len(h.devices) == 2)
        assert {d.device.device_name for d in first.devices} == {"gpu-0", "gpu-1"}
        assert all(d.health == health_pb2.HEALTHY for d in first.devices)
        generation = plugin.publisher.generation
        node.settings.mock_gpus.write_text(
            MOCK_GPUS.replace("numa: 1}", "numa: 1, healthy: false, unhealthyReason: xid-79}")
        )
        sick = await node.kubelet.wait_health(
            DRIVER, lambda h: any(d.health == health_pb2.UNHEALTHY for d in h.devices)
        )
        (bad,) = [d for d in sick.devices if d.health == health_pb2.UNHEALTHY]
        assert (bad.device.pool_name, bad.device.device_name, bad.message) == (
            NODE,
            "gpu-1",
            "xid-79",
        )
        await plugin.publisher.wait_for(lambda: plugin.publisher.generation > generation)
        slices = await node.client.list(
            "/apis/resource.k8s.io/v1/resourceslices", field_selector=f"spec.nodeName={NODE}"
        )
        devices = {d["name"]: d for s in slices["items"] for d in s["spec"]["devices"]}
        assert devices["gpu-1"]["taints"][0]["key"] == "vgpu.hami.io/unhealthy"
        assert "taints" not in devices["gpu-0"]


async def test_grpc_health_service_answers_serving(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        async with grpc.aio.insecure_channel(f"unix://{node.settings.dra_socket}") as channel:
            reply = await grpc_health_pb2_grpc.HealthStub(channel).Check(
                grpc_health_pb2.HealthCheckRequest(service="")
            )
        assert reply.status == grpc_health_pb2.HealthCheckResponse.SERVING


async def test_api_errors_and_odd_names_are_per_claim_errors(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("flaky", [result("gpu-0", "1Gi")])
        node.server.faults.fail("/resourceclaims/flaky", verb="GET", status=500, times=1)
        slash = ClaimRef("default", str(uuid.uuid4()), "a/b")
        namespace = ClaimRef("../kube-system", str(uuid.uuid4()), "x")
        response = await node.kubelet.prepare(DRIVER, [claim, slash, namespace])
        assert "cannot read claim default/flaky" in response.claims[claim.uid].error
        assert "claim.name" in response.claims[slash.uid].error
        assert "claim.namespace" in response.claims[namespace.uid].error
        retried = await node.kubelet.prepare(DRIVER, [claim])
        assert retried.claims[claim.uid].error == ""


async def published_devices(node: Node) -> dict[str, dict]:
    slices = await node.client.list(
        "/apis/resource.k8s.io/v1/resourceslices", field_selector=f"spec.nodeName={NODE}"
    )
    return {d["name"]: d for s in slices["items"] for d in s["spec"]["devices"]}


async def test_node_config_file_changes_republish(node: Node):
    config = node.settings.config_file
    config.parent.mkdir()
    config.write_text("splitCount: 4\n")
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        devices = await published_devices(node)
        assert {name: d["capacity"]["shares"]["value"] for name, d in devices.items()} == {
            "gpu-0": "4",
            "gpu-1": "4",
        }
        generation = plugin.publisher.generation
        config.write_text("splitCount: 2\nmemoryScaling: 2\nfilterDevices: {indices: [1]}\n")
        await plugin.publisher.wait_for(lambda: plugin.publisher.generation > generation)
        devices = await published_devices(node)
        assert list(devices) == ["gpu-0"]
        assert devices["gpu-0"]["capacity"]["shares"]["value"] == "2"
        assert devices["gpu-0"]["capacity"]["memory"]["value"] == str(32 * GIB)
        claim = await node.claim("scaled", [result("gpu-0", "20Gi")])
        assert (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error == ""


async def test_api_timeout_is_a_per_claim_error(node: Node):
    """Only the claim read hangs, and only the claim read's bound is short: nothing else
    the plugin does can run out of time, however busy the machine is."""
    settings = replace(node.settings, claim_read_timeout_s=0.2)
    plugin = KubeletPlugin(
        settings, node.client, MockBackend(settings.mock_gpus), CollectorRegistry()
    )
    async with plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("slow", [result("gpu-0", "1Gi")])
        rule = node.server.faults.hang("/resourceclaims/slow$", verb="GET")
        response = await node.kubelet.prepare(DRIVER, [claim])
    assert response.claims[claim.uid].error == (
        f"cannot read claim default/slow ({claim.uid}): the API server did not answer within 0.2 s"
    )
    assert rule.hits == 1
    assert list(node.cdi_dir.glob("*")) == []


async def test_concurrent_calls_lose_no_checkpoint_update(node: Node):
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claims = [
            await node.claim(f"many-{n}", [result(f"gpu-{n % 2}", "64Mi")]) for n in range(20)
        ]
        twice = claims[0]
        responses = await asyncio.gather(
            *(node.kubelet.prepare(DRIVER, [claim]) for claim in [*claims, twice])
        )
        assert all(
            r.claims[c.uid].error == "" for r, c in zip(responses, [*claims, twice], strict=True)
        )
        assert responses[0] == responses[-1]
        on_disk = decode_checkpoint(node.settings.checkpoint_path.read_bytes())
        assert set(on_disk.claims) == {claim.uid for claim in claims}
        assert {r.uid for r in plugin.preparer.prepared_records()} == set(on_disk.claims)
        assert len(list(node.cdi_dir.glob("*.json"))) == 20
        await asyncio.gather(*(node.kubelet.unprepare(DRIVER, [claim]) for claim in claims))
        on_disk = decode_checkpoint(node.settings.checkpoint_path.read_bytes())
        assert on_disk.claims == {}


async def reserve(node: Node, claim: ClaimRef, pod: dict) -> None:
    """What kube-scheduler's PreBind writes: the pod in the claim's reservedFor."""
    reference = {"resource": "pods", "name": pod["metadata"]["name"]}
    reference["uid"] = pod["metadata"]["uid"]
    current = await node.client.get(object_path(CLAIMS, claim.name))
    status = current["status"]
    status["reservedFor"] = [*status.get("reservedFor", []), reference]
    await node.client.patch(object_path(CLAIMS, claim.name) + "/status", {"status": status})


async def pod_using(node: Node, name: str, containers: dict[str, list[str]]) -> dict:
    """A pod whose containers use the named claims (container -> claim names)."""
    claims = sorted({claim for used in containers.values() for claim in used})
    return await node.client.create(
        "/api/v1/namespaces/default/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeName": NODE,
                "containers": [
                    {
                        "name": container,
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": claim} for claim in used]},
                    }
                    for container, used in containers.items()
                ],
                "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
            },
        },
    )


async def test_two_claims_in_one_container_are_refused_naming_the_container(node: Node):
    """libvgpu numbers a container's limits from 0 in each claim's spec: merged,
    the second claim's limit would land on the first claim's GPU."""
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        first = await node.claim("first", [result("gpu-0", "2Gi")])
        second = await node.claim("second", [result("gpu-1", "6Gi")])
        pod = await pod_using(node, "trainer", {"main": ["first", "second"]})
        for claim in (first, second):
            await reserve(node, claim, pod)
        response = await node.kubelet.prepare(DRIVER, [first, second])
        for claim in (first, second):
            error = response.claims[claim.uid].error
            assert "pod default/trainer container main" in error
            assert "2 claims of driver vgpu.hami.io (first, second)" in error
            assert "use one claim with several requests" in error
        assert list(node.cdi_dir.glob("*.json")) == []


async def test_claims_in_separate_containers_give_each_device_its_own_limit(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        first = await node.claim("first", [result("gpu-0", "2Gi", "10")])
        second = await node.claim("second", [result("gpu-1", "6Gi", "30")])
        pod = await pod_using(node, "two", {"a": ["first"], "b": ["second"]})
        for claim in (first, second):
            await reserve(node, claim, pod)
        response = await node.kubelet.prepare(DRIVER, [first, second])
        ids = {
            uid: [i for d in entry.devices for i in d.cdi_device_ids]
            for uid, entry in response.claims.items()
        }
        a = apply_devices(ids[first.uid], [node.cdi_dir])
        b = apply_devices(ids[second.uid], [node.cdi_dir])
        assert (a.env["NVIDIA_VISIBLE_DEVICES"], a.env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (
            "GPU-00000000-0000-0000-0000-00000000000a",
            "2048m",
        )
        assert (b.env["NVIDIA_VISIBLE_DEVICES"], b.env["CUDA_DEVICE_MEMORY_LIMIT_0"]) == (
            "GPU-00000000-0000-0000-0000-00000000000b",
            "6144m",
        )
        assert (a.env["CUDA_DEVICE_SM_LIMIT_0"], b.env["CUDA_DEVICE_SM_LIMIT_0"]) == ("10", "30")
        merged = apply_devices(ids[first.uid] + ids[second.uid], [node.cdi_dir])
        assert merged.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "6144m", "why one container is refused"
        assert response.claims[first.uid].error == response.claims[second.uid].error == ""


async def test_mock_gpu_specs_name_no_device_node_and_apply_on_a_gpu_less_host(node: Node):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("mock", [result("gpu-1", "4Gi", "30")])
        entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
        assert "deviceNodes" not in json.dumps(spec_of(node, claim.uid))
        applied = apply_devices(list(entry.devices[0].cdi_device_ids), [node.cdi_dir])
        assert applied.device_nodes == {}
        assert applied.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "4096m"
        assert applied.mounts["/etc/ld.so.preload"].host_path == f"{node.root}/vgpu/ld.so.preload"


@pytest.mark.parametrize(
    ("missing", "what"),
    [
        ("vgpu/libvgpu.so", "libvgpu library"),
        ("vgpu/ld.so.preload", "libvgpu preload list"),
        ("vgpulock", "libvgpu lock directory"),
    ],
)
async def test_missing_libvgpu_files_fail_prepare_naming_the_file(
    node: Node, missing: str, what: str
):
    target = node.root / missing
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("no-lib", [result("gpu-0", "1Gi")])
        error = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error
        assert f"{what} {target} is missing on this node" in error
        assert "dra-driver install-libvgpu" in error
        assert list(node.cdi_dir.glob("*.json")) == []
        assert not (node.root / "vgpu" / "claims" / claim.uid).exists()
        assert plugin.preparer.prepared_records() == []


async def test_disable_control_needs_no_preload_file(node: Node):
    (node.root / "vgpu" / "ld.so.preload").unlink()
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        config = {"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {}}}
        config["opaque"]["parameters"] = {
            "apiVersion": "vgpu.hami.io/v1alpha1",
            "kind": "VGPUConfig",
            "disableControl": True,
        }
        claim = await node.claim("uncontrolled", [result("gpu-0", "1Gi")], [config])
        entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
        assert entry.error == ""
        applied = apply_devices(list(entry.devices[0].cdi_device_ids), [node.cdi_dir])
        assert "/etc/ld.so.preload" not in applied.mounts


async def test_vgpu_config_limits_hold_when_kube_scheduler_allocates(node: Node):
    """kube-scheduler charges a claim with no capacity request the defaults (the
    whole card, no cores); its VGPUConfig still sets the container's limits, and
    the claim gets a Warning saying how to ask for capacity."""
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        await node.client.create(
            "/apis/resource.k8s.io/v1/deviceclasses",
            {
                "metadata": {"name": "nvidia.vgpu.hami.io"},
                "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
            },
        )
        parameters = {
            "apiVersion": "vgpu.hami.io/v1alpha1",
            "kind": "VGPUConfig",
            "memory": "2Gi",
            "cores": 20,
        }
        manifest = claim_manifest("sized")
        manifest["spec"]["devices"]["config"] = [
            {"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": parameters}}
        ]
        created = await node.client.create(CLAIMS, manifest)
        await node.client.patch(
            f"/api/v1/nodes/{NODE}/status",
            {"status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}},
        )
        pod = await node.client.create(
            "/api/v1/namespaces/default/pods",
            {
                "metadata": {"name": "infer"},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "gpu"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "gpu", "resourceClaimName": "sized"}],
                    "tolerations": [{"operator": "Exists"}],
                },
            },
        )
        with config.new_client_from_config(config_file=str(node.root / "kubeconfig")) as api:
            scheduler = DRAScheduler(api, settings=SchedulerSettings(allocate=True))
            outcome = await scheduler.schedule("default", "infer")
        assert outcome.node == NODE, outcome
        allocated = await node.client.get(object_path(CLAIMS, "sized"))
        (charged,) = allocated["status"]["allocation"]["devices"]["results"]
        assert charged["consumedCapacity"]["memory"] == "16Gi"
        claim = ClaimRef("default", created["metadata"]["uid"], "sized")
        entry = (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid]
        assert entry.error == ""
        applied = apply_devices(list(entry.devices[0].cdi_device_ids), [node.cdi_dir])
        assert applied.env["CUDA_DEVICE_MEMORY_LIMIT_0"] == "2048m"
        assert applied.env["CUDA_DEVICE_SM_LIMIT_0"] == "20"
        await plugin.events.wait_idle()
        events = await node.client.list("/api/v1/namespaces/default/events")
        (warning,) = [e for e in events["items"] if e["reason"] == "VGPUConfigNotCharged"]
        assert warning["type"] == "Warning"
        assert warning["involvedObject"] == {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "namespace": "default",
            "name": "sized",
            "uid": claim.uid,
        }
        assert "opaque parameters are not capacity requests" in warning["message"]
        assert 'capacity: {requests: {memory: 2Gi, cores: "20"}}' in warning["message"]
        # Prepared again after an unprepare: the same warning folds into one event.
        assert (await node.kubelet.unprepare(DRIVER, [claim])).claims[claim.uid].error == ""
        assert (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error == ""
        await plugin.events.wait_idle()
        events = await node.client.list("/api/v1/namespaces/default/events")
        (folded,) = [e for e in events["items"] if e["reason"] == "VGPUConfigNotCharged"]
        assert folded["count"] == 2
        assert pod["metadata"]["uid"] in {
            r["uid"] for r in allocated["status"].get("reservedFor", [])
        }


def preparer_records(caplog: pytest.LogCaptureFixture, message: str) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "kubeletplugin.preparer" and r.getMessage() == message
    ]


async def test_prepare_and_unprepare_are_logged_with_claim_pods_devices_and_duration(
    node: Node, caplog: pytest.LogCaptureFixture
):
    caplog.set_level(logging.INFO, logger="kubeletplugin.preparer")
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("logged", [result("gpu-1", "1Gi")])
        await reserve(node, claim, await pod_using(node, "worker", {"main": ["logged"]}))
        await node.kubelet.prepare(DRIVER, [claim])
        await node.kubelet.unprepare(DRIVER, [claim])
        await node.kubelet.prepare(DRIVER, [ClaimRef("default", str(uuid.uuid4()), "gone")])
    (prepared,) = preparer_records(caplog, "prepare done")
    (unprepared,) = preparer_records(caplog, "unprepare done")
    for record in (prepared, unprepared):
        assert record.levelno == logging.INFO
        assert (record.claim, record.uid) == ("default/logged", claim.uid)
        assert (record.pods, record.devices) == ("default/worker", "node-a/gpu-1")
        assert isinstance(record.duration_ms, float)
    (failed,) = preparer_records(caplog, "prepare failed")
    assert failed.levelno == logging.WARNING
    assert failed.claim == "default/gone"
    assert "does not exist" in failed.error


async def test_library_chatter_stays_out_of_debug_unless_asked_for(
    node: Node, caplog: pytest.LogCaptureFixture
):
    def library_records() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name.split(".")[0] in LIBRARY_LOGGERS]

    async def change_gpus(plugin: KubeletPlugin, numa: int) -> None:
        generation = plugin.publisher.generation
        node.settings.mock_gpus.write_text(MOCK_GPUS.replace("numa: 1}", f"numa: {numa}}}"))
        await plugin.publisher.wait_for(lambda: plugin.publisher.generation > generation)

    caplog.set_level(logging.DEBUG)
    try:
        async with node.plugin() as plugin:
            await node.kubelet.wait_registered(DRIVER)
            quiet_library_loggers("DEBUG")
            await change_gpus(plugin, 2)
            assert library_records(), "asked for: the libraries log their DEBUG lines"
            caplog.clear()
            quiet_library_loggers()
            await change_gpus(plugin, 3)
            assert library_records() == []
            assert any(r.name.startswith("kubeletplugin") for r in caplog.records)
    finally:
        for name in LIBRARY_LOGGERS:
            logging.getLogger(name).setLevel(logging.NOTSET)


async def test_the_checkpoint_is_kept_out_of_the_socket_directory_and_moved_there_once(
    node: Node,
):
    """Every checkpoint write next to dra.sock would wake the socket watcher."""
    settings = node.settings
    assert settings.checkpoint_path.parent not in (
        settings.dra_socket.parent,
        settings.registration_socket.parent,
    )
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("kept", [result("gpu-0", "1Gi")])
        first = await node.kubelet.prepare(DRIVER, [claim])
    await node.kubelet.wait_deregistered(DRIVER)
    legacy = settings.service_dir / "checkpoint.json"
    settings.checkpoint_path.replace(legacy)
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        assert [r.uid for r in plugin.preparer.prepared_records()] == [claim.uid]
        assert await node.kubelet.prepare(DRIVER, [claim]) == first
    assert settings.checkpoint_path.exists()
    assert not legacy.exists()


class GpusWithNodes(MockBackend):
    """The mock GPUs as a real backend sees them: GPUs with device nodes."""

    has_device_nodes = True


async def test_a_backend_with_device_nodes_lists_only_those_the_host_has(node: Node):
    dev = node.root / "dev"
    dev.mkdir()
    for name in ("nvidiactl", "nvidia1"):
        os.mkfifo(dev / name)
    settings = replace(node.settings, dev_dir=dev)
    backend = GpusWithNodes(settings.mock_gpus)
    async with KubeletPlugin(settings, node.client, backend, CollectorRegistry()):
        await node.kubelet.wait_registered(DRIVER)
        present = await node.claim("present", [result("gpu-1", "1Gi")])
        absent = await node.claim("absent", [result("gpu-0", "1Gi")])
        response = await node.kubelet.prepare(DRIVER, [present, absent])
        entry = response.claims[present.uid]
        applied = apply_devices(list(entry.devices[0].cdi_device_ids), [node.cdi_dir])
        assert applied.device_nodes == {
            "/dev/nvidiactl": str(dev / "nvidiactl"),
            "/dev/nvidia1": str(dev / "nvidia1"),
        }
        error = response.claims[absent.uid].error
        assert f"device node {dev}/nvidia0 of GPU minor 0 is missing on this node" in error


async def test_a_forgotten_claim_whose_cache_dir_a_container_mounts_does_not_stop_the_start(
    node: Node, caplog: pytest.LogCaptureFixture
):
    """The checkpoint moved aside while a container still runs: the plugin starts, keeps
    the mounted cache dir (logged), and removes it at a start after the container went."""
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("forgotten", [result("gpu-0", "1Gi")])
        assert (await node.kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error == ""
    await node.kubelet.wait_deregistered(DRIVER)
    node.settings.checkpoint_path.unlink()
    cache_dir = node.root / "vgpu" / "claims" / claim.uid
    container = node.root / "none-container-mountinfo"
    container.write_text(
        f"100 90 8:1 {cache_dir} /usr/local/vgpu/claims/{claim.uid} rw - ext4 /dev/sda1 rw\n"
    )
    caplog.set_level(logging.WARNING, logger="kubeletplugin.preparer")
    async with node.plugin() as plugin:
        await node.kubelet.wait_registered(DRIVER)
        assert plugin.preparer.prepared_records() == []
        assert cache_dir.is_dir()
    [kept] = [r for r in caplog.records if r.getMessage().startswith("claim left in place")]
    assert kept.claim_uid == claim.uid and "still mounted" in kept.error
    await node.kubelet.wait_deregistered(DRIVER)
    container.unlink()
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        assert not cache_dir.exists()
