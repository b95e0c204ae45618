"""kill -9 the kubelet plugin at random points of 100 prepare/unprepare cycles.

The plugin runs as its own process (`dra-driver kubelet-plugin`) against the
API emulator; the kubelet stand-in drives it over its real sockets. Kill times
are random on purpose: every assertion holds whatever point the kill hits.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import signal
import socket
import sys
import tempfile
from pathlib import Path

import aiohttp
import pytest
from cdi_applier import apply_spec_files
from prometheus_client.parser import text_string_to_metric_families

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls
from dra_driver.process.runtime import cancel_and_wait
from kubeletplugin.checkpoint import decode_checkpoint
from simulator.apiserver import APIServer
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings, PluginCallError

DRIVER = "vgpu.hami.io"
NODE = "node-a"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
CYCLES = 100
MOCK_GPUS = "gpus:\n  - {uuid: GPU-00000000-0000-0000-0000-00000000000a, index: 0, memory: 16Gi}\n"


def manifest(name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "x"}}]}},
    }


def allocation(number: int) -> dict:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": NODE,
        "device": "gpu-0",
        "shareID": f"00000000-0000-4000-8000-{number:012d}",
        "consumedCapacity": {"memory": "1Gi", "cores": "5", "shares": "1"},
    }
    return {
        "devices": {"results": [result]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
        "allocationTimestamp": "2026-11-29T00:00:00Z",
    }


class PluginProcess:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: asyncio.subprocess.Process | None = None
        self.extra_args = ["--metrics-port", "0"]

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "dra_driver.cli", "kubelet-plugin",
            "--node-name", NODE,
            "--registry-dir", str(self.root / "registry"),
            "--plugin-dir", str(self.root / "plugin"),
            "--cdi-dir", str(self.root / "cdi"),
            "--mock-gpus", str(self.root / "gpus.yaml"),
            "--vgpu-dir", str(self.root / "vgpu"),
            "--lock-dir", str(self.root / "vgpulock"),
            "--kubeconfig", str(self.root / "kubeconfig"),
            "--log-level", "ERROR",
            *self.extra_args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
            await self.process.wait()
        self.process = None


@pytest.fixture
async def cluster():
    root = Path(tempfile.mkdtemp(prefix="vgpu-crash-", dir="/tmp"))
    (root / "gpus.yaml").write_text(MOCK_GPUS)
    (root / "vgpu").mkdir()
    (root / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF")
    (root / "vgpu" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    (root / "vgpulock").mkdir()
    plugin = PluginProcess(root)
    try:
        async with APIServer() as server:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            await client.create("/api/v1/nodes", {"metadata": {"name": NODE}})
            kubelet = KubeletDRA(KubeletDRASettings(NODE, root / "registry", call_timeout=20), None)
            try:
                async with kubelet:
                    yield root, client, kubelet, plugin
            finally:
                await plugin.kill()
                await client.aclose()
                await settle_cancelled_grpc_calls()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def restart(plugin: PluginProcess, kubelet: KubeletDRA) -> None:
    """kill -9 leaves the socket file behind; kubelet re-registers the plugin
    when the new process replaces it with a socket of its own."""
    before = kubelet.plugins.get(DRIVER)
    await plugin.kill()
    await plugin.start()
    await kubelet.wait_for(lambda: kubelet.plugins.get(DRIVER) not in (None, before))


async def test_kill_9_never_leaks_or_loses_a_claim(cluster):
    root, client, kubelet, plugin = cluster
    rng = random.Random(20261129)
    claims = []
    for number in range(6):
        created = await client.create(CLAIMS, manifest(f"claim-{number}"))
        await client.patch(
            object_path(CLAIMS, f"claim-{number}") + "/status",
            {"status": {"allocation": allocation(number)}},
        )
        claims.append(ClaimRef("default", created["metadata"]["uid"], f"claim-{number}"))
    await plugin.start()
    await kubelet.wait_registered(DRIVER)
    first_answer: dict[str, list] = {}
    prepared: set[str] = set()
    for _ in range(CYCLES):
        claim = rng.choice(claims)
        operation = "prepare" if rng.random() < 0.6 else "unprepare"
        call = asyncio.ensure_future(getattr(kubelet, operation)(DRIVER, [claim]))
        if rng.random() < 0.3:
            await asyncio.sleep(rng.uniform(0, 0.02))  # a random kill point, not a wait
            await plugin.kill()
            try:
                response = await call
            except PluginCallError:
                if operation == "unprepare":
                    prepared.discard(claim.uid)  # may or may not have happened
            else:
                if response.claims[claim.uid].error == "":
                    record = prepared.add if operation == "prepare" else prepared.discard
                    record(claim.uid)
            await restart(plugin, kubelet)
            continue
        response = await call
        entry = response.claims[claim.uid]
        assert entry.error == "", entry.error
        if operation == "prepare":
            devices = [list(d.cdi_device_ids) for d in entry.devices]
            assert first_answer.setdefault(claim.uid, devices) == devices
            prepared.add(claim.uid)
        else:
            prepared.discard(claim.uid)
    await restart(plugin, kubelet)
    records = decode_checkpoint((root / "plugin" / "state" / "checkpoint.json").read_bytes()).claims
    assert prepared <= set(records), "a prepared claim was lost"
    assert apply_spec_files(root / "cdi") == len(records), "every recorded claim's spec applies"
    for claim in claims:
        if claim.uid in records:
            response = await kubelet.prepare(DRIVER, [claim])
            devices = [list(d.cdi_device_ids) for d in response.claims[claim.uid].devices]
            assert devices == first_answer.get(claim.uid, devices)
    response = await kubelet.unprepare(DRIVER, claims)
    assert all(entry.error == "" for entry in response.claims.values())
    assert list((root / "cdi").glob("*")) == []
    assert list((root / "vgpu" / "claims").glob("*")) == []
    assert (
        json.loads((root / "plugin" / "state" / "checkpoint.json").read_text())["data"]["claims"]
        == {}
    )
    assert os.listdir(root / "registry") == [f"{DRIVER}-reg.sock"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


async def test_plugin_process_serves_metrics(cluster):
    root, client, kubelet, plugin = cluster
    created = await client.create(CLAIMS, manifest("metered"))
    await client.patch(
        object_path(CLAIMS, "metered") + "/status", {"status": {"allocation": allocation(1)}}
    )
    port = free_port()
    plugin.extra_args = ["--metrics-host", "127.0.0.1", "--metrics-port", str(port)]
    await plugin.start()
    await kubelet.wait_registered(DRIVER)
    claim = ClaimRef("default", created["metadata"]["uid"], "metered")
    assert (await kubelet.prepare(DRIVER, [claim])).claims[claim.uid].error == ""
    assert apply_spec_files(root / "cdi") == 1
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        text = await response.text()
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    assert (
        samples[("vgpu_dra_operations_total", (("operation", "prepare"), ("outcome", "ok")))] == 1
    )
    assert samples[("vgpu_dra_prepared_claims", ())] == 1


async def test_slices_survive_a_restart_and_go_only_on_uninstall(cluster):
    root, client, kubelet, plugin = cluster
    slices_path = "/apis/resource.k8s.io/v1/resourceslices"
    slices = Informer(client, slices_path, field_selector=f"spec.nodeName={NODE}")
    watching = asyncio.create_task(slices.run(), name="slices")
    try:
        await plugin.start()
        # The plugin serves (and so registers) before it publishes, as the reference
        # driver does: registration alone does not mean the slices are there.
        await slices.wait_for(lambda store: len(store) == 1)
    finally:
        await cancel_and_wait([watching])
    await kubelet.wait_registered(DRIVER)
    published = (await client.list(slices_path, field_selector=f"spec.nodeName={NODE}"))["items"]
    assert [s["spec"]["pool"]["generation"] for s in published] == [1]
    await restart(plugin, kubelet)
    again = (await client.list(slices_path, field_selector=f"spec.nodeName={NODE}"))["items"]
    assert again == published
    await plugin.kill()
    uninstall = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "dra_driver.cli", "kubelet-plugin", "--remove-slices",
        "--node-name", NODE, "--kubeconfig", str(root / "kubeconfig"),
        "--mock-gpus", str(root / "gpus.yaml"),
    )  # fmt: skip
    assert await uninstall.wait() == 0
    assert (await client.list(slices_path, field_selector=f"spec.nodeName={NODE}"))["items"] == []
