"""Prepare of MIG partitions: the real preparer over its real checkpoint files and the
mock backend's MIG cards (NVIDIA's H100 80GB table, dra_driver/objects/mig_profiles.py),
claims served by the API emulator.

Crashes are the states a kill -9 leaves on disk at each point (the checkpoint as the
preparer writes it, the card as the create left it), read by a fresh preparer over the
same files and the same card, as a restarted plugin finds them.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from cdi.writer import CdiSpecWriter
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.rest import KubeClient, object_path
from kubeletplugin.checkpoint import (
    Checkpoint,
    CheckpointFile,
    ClaimRecord,
    MigRecord,
    PrepareState,
)
from kubeletplugin.gpus import MockBackend
from kubeletplugin.metrics import PluginMetrics
from kubeletplugin.mig_prepare import MigPartitions
from kubeletplugin.mig_state import MigInstance
from kubeletplugin.preparer import ClaimPreparer, ClaimRef, PreparerSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths
from simulator.apiserver import APIServer

DRIVER = "vgpu.hami.io"
NODE = "node-a"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
CARD0 = "GPU-00000000-0000-0000-0000-0000000000a0"
H100 = "productName: NVIDIA H100 80GB HBM3, memory: 80Gi"
MOCK_GPUS = f"""
gpus:
  - {{uuid: {CARD0}, index: 0, {H100},
      mig: {{mode: enabled, instances: [{{profile: 1g.10gb, start: 6}}]}}}}
  - {{uuid: GPU-00000000-0000-0000-0000-0000000000a1, index: 1, {H100},
      mig: {{mode: enabled, pending: disabled}}}}
  - {{uuid: GPU-00000000-0000-0000-0000-0000000000a2, index: 2, {H100}}}
"""
ADMIN = ("1g.10gb", 6)
"""The administrator's static instance on card 0: never touched."""


@dataclass
class Node:
    root: Path
    client: KubeClient
    backend: MockBackend

    def preparer(
        self, boot_id: str = "boot-1", backend: MockBackend | None = None
    ) -> ClaimPreparer:
        registry = CollectorRegistry()
        return ClaimPreparer(
            PreparerSettings(
                driver=DRIVER,
                node_name=NODE,
                with_device_nodes=False,
                libvgpu=LibvgpuPaths(
                    host_dir=str(self.root / "vgpu"),
                    cache_root=str(self.root / "vgpu"),
                    lock_dir=str(self.root / "vgpulock"),
                ),
                cache_dirs=CacheDirSettings(mountinfo_glob=str(self.root / "none-*")),
            ),
            self.client,
            dict,
            self.checkpoint_file(boot_id),
            CdiSpecWriter(self.root / "cdi"),
            PluginMetrics(registry),
            EventRecorder(self.client, EventSettings(component="test")),
            MigPartitions(backend or self.backend),
        )

    def checkpoint_file(self, boot_id: str = "boot-1") -> CheckpointFile:
        return CheckpointFile(self.root / "state" / "checkpoint.json", boot_id)

    def instances(self, backend: MockBackend | None = None) -> set[tuple[str, int]]:
        state = (backend or self.backend).mig_devices[CARD0].state()
        return {(i.profile, i.placement.start) for i in state.instances} | {
            (profile, placement.start) for _, profile, placement in state.empty_gpu_instances
        }

    async def claim(self, name: str, device: str, config: list | None = None) -> ClaimRef:
        created = await self.client.create(
            CLAIMS,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": name},
                "spec": {
                    "devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "m"}}]}
                },
            },
        )
        result = {"request": "mig", "driver": DRIVER, "pool": NODE, "device": device}
        allocation = {
            "devices": {"results": [result], "config": config or []},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
            "allocationTimestamp": "2026-11-29T00:00:00Z",
        }
        await self.client.patch(
            object_path(CLAIMS, name) + "/status", {"status": {"allocation": allocation}}
        )
        return ClaimRef("default", name, created["metadata"]["uid"])


@pytest.fixture
async def node() -> AsyncIterator[Node]:
    root = Path(tempfile.mkdtemp(prefix="vgpu-mig-", dir="/tmp"))
    (root / "gpus.yaml").write_text(MOCK_GPUS)
    (root / "vgpu").mkdir()
    backend = MockBackend(root / "gpus.yaml")
    backend.discover()
    try:
        async with APIServer() as server:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            try:
                yield Node(root, client, backend)
            finally:
                await client.aclose()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def started(preparer: ClaimPreparer) -> ClaimPreparer:
    await preparer.start()
    return preparer


def spec_env(node: Node, uid: str) -> list[str]:
    (spec,) = (node.root / "cdi").glob(f"*{uid}*.json")
    document = json.loads(spec.read_text())
    return [
        env for device in document["devices"] for env in device["containerEdits"].get("env", [])
    ]


async def test_prepare_creates_the_instance_records_it_and_gives_its_uuid(node: Node) -> None:
    preparer = await started(node.preparer())
    ref = await node.claim("a", "gpu-0-mig-3g-40gb-at-0")
    result = (await preparer.prepare([ref]))[ref.uid]
    assert result.error == ""
    assert node.instances() == {ADMIN, ("3g.40gb", 0)}
    record = node.checkpoint_file().load().claims[ref.uid]
    assert record.state is PrepareState.COMPLETED
    (mig,) = record.mig
    assert (mig.gpu_uuid, mig.profile, mig.start, mig.size) == (CARD0, "3g.40gb", 0, 4)
    live = next(
        i for i in node.backend.mig_devices[CARD0].state().instances if i.placement.start == 0
    )
    assert (mig.gpu_instance_id, mig.compute_instance_id, mig.mig_uuid) == (
        live.gpu_instance_id,
        live.compute_instance_id,
        live.uuid,
    )
    assert spec_env(node, ref.uid) == [f"NVIDIA_VISIBLE_DEVICES={live.uuid}"]
    assert [d.device_name for d in result.devices] == ["gpu-0-mig-3g-40gb-at-0"]
    again = (await preparer.prepare([ref]))[ref.uid]
    assert again.devices == result.devices
    assert node.instances() == {ADMIN, ("3g.40gb", 0)}


async def test_unprepare_destroys_the_instance_once_and_leaves_the_admins(node: Node) -> None:
    preparer = await started(node.preparer())
    ref = await node.claim("a", "gpu-0-mig-2g-20gb-at-2")
    assert (await preparer.prepare([ref]))[ref.uid].error == ""
    assert (await preparer.unprepare([ref]))[ref.uid] == ""
    assert node.instances() == {ADMIN}
    assert ref.uid not in node.checkpoint_file().load().claims
    assert (await preparer.unprepare([ref]))[ref.uid] == ""
    assert node.instances() == {ADMIN}


def crash_state(node: Node, ref: ClaimRef, mig: MigRecord) -> None:
    """The checkpoint a kill -9 leaves after the STARTED record with `mig` was written."""
    record = ClaimRecord(ref.uid, ref.namespace, ref.name, PrepareState.STARTED, mig=(mig,))
    node.checkpoint_file().store(Checkpoint("boot-1", {ref.uid: record}))


def intent(profile: str, start: int, size: int) -> MigRecord:
    return MigRecord(CARD0, profile, start, size)


def created(instance: MigInstance) -> MigRecord:
    return MigRecord(
        CARD0,
        instance.profile,
        instance.placement.start,
        instance.placement.size,
        instance.gpu_instance_id,
        instance.compute_instance_id,
        instance.uuid,
    )


async def test_crash_before_the_create_leaves_nothing(node: Node) -> None:
    ref = await node.claim("a", "gpu-0-mig-3g-40gb-at-0")
    crash_state(node, ref, intent("3g.40gb", 0, 4))
    await started(node.preparer())
    assert node.instances() == {ADMIN}
    assert node.checkpoint_file().load().claims == {}


async def test_crash_after_the_create_before_its_record_destroys_the_instance(node: Node) -> None:
    ref = await node.claim("a", "gpu-0-mig-3g-40gb-at-0")
    crash_state(node, ref, intent("3g.40gb", 0, 4))
    node.backend.create_mig_instance(CARD0, "3g.40gb", 0)
    await started(node.preparer())
    assert node.instances() == {ADMIN}
    assert node.checkpoint_file().load().claims == {}


async def test_crash_between_the_gpu_and_compute_instance_destroys_the_gpu_instance(
    node: Node,
) -> None:
    ref = await node.claim("a", "gpu-0-mig-2g-20gb-at-0")
    crash_state(node, ref, intent("2g.20gb", 0, 2))
    node.backend.mig_devices[CARD0].create_gpu_instance("2g.20gb", 0)
    await started(node.preparer())
    assert node.instances() == {ADMIN}


async def test_crash_after_the_record_before_completion_destroys_the_instance(node: Node) -> None:
    ref = await node.claim("a", "gpu-0-mig-3g-40gb-at-0")
    made = node.backend.create_mig_instance(CARD0, "3g.40gb", 0)
    crash_state(node, ref, created(made))
    preparer = await started(node.preparer())
    assert node.instances() == {ADMIN}
    assert node.checkpoint_file().load().claims == {}
    result = (await preparer.prepare([ref]))[ref.uid]
    assert result.error == ""
    assert node.instances() == {ADMIN, ("3g.40gb", 0)}


async def test_crash_after_completion_keeps_the_instance(node: Node) -> None:
    ref = await node.claim("a", "gpu-0-mig-4g-40gb-at-0")
    first = (await (await started(node.preparer())).prepare([ref]))[ref.uid]
    restarted = await started(node.preparer())
    assert node.instances() == {ADMIN, ("4g.40gb", 0)}
    assert (await restarted.prepare([ref]))[ref.uid].devices == first.devices
    assert node.instances() == {ADMIN, ("4g.40gb", 0)}


class KilledDuringCreate(BaseException):
    """What the test double raises once the instance exists: the process dies there."""


@dataclass
class CardThatDiesAfterCreate(MockBackend):
    """The GPU (the part that cannot exist here) creating the instance, then failing
    before prepare hears of it."""

    def create_mig_instance(self, gpu_uuid: str, profile: str, start: int) -> MigInstance:
        super().create_mig_instance(gpu_uuid, profile, start)
        raise KilledDuringCreate()


async def test_a_failure_after_the_create_in_process_rolls_the_instance_back(node: Node) -> None:
    backend = CardThatDiesAfterCreate(node.root / "gpus.yaml")
    backend.discover()
    preparer = await started(node.preparer(backend=backend))
    ref = await node.claim("a", "gpu-0-mig-3g-40gb-at-0")
    with pytest.raises(KilledDuringCreate):
        await preparer.prepare([ref])
    assert node.instances(backend) == {ADMIN}
    assert node.checkpoint_file().load().claims == {}


async def test_reboot_replay_recreates_the_instance_at_its_placement(node: Node) -> None:
    ref = await node.claim("a", "gpu-0-mig-3g-40gb-at-0")
    assert (await (await started(node.preparer())).prepare([ref]))[ref.uid].error == ""
    rebooted = MockBackend(node.root / "gpus.yaml")
    rebooted.discover()
    assert node.instances(rebooted) == {ADMIN}
    preparer = await started(node.preparer("boot-2", rebooted))
    assert node.instances(rebooted) == {ADMIN}
    result = (await preparer.prepare([ref]))[ref.uid]
    assert result.error == ""
    assert node.instances(rebooted) == {ADMIN, ("3g.40gb", 0)}
    (mig,) = node.checkpoint_file("boot-2").load().claims[ref.uid].mig
    assert (mig.profile, mig.start, mig.created) == ("3g.40gb", 0, True)


async def test_a_completed_claim_whose_instance_vanished_is_prepared_again(node: Node) -> None:
    preparer = await started(node.preparer())
    ref = await node.claim("a", "gpu-0-mig-2g-20gb-at-4")
    assert (await preparer.prepare([ref]))[ref.uid].error == ""
    (mig,) = node.checkpoint_file().load().claims[ref.uid].mig
    assert mig.gpu_instance_id is not None
    node.backend.destroy_mig_instance(CARD0, mig.gpu_instance_id, mig.compute_instance_id)
    assert (await preparer.prepare([ref]))[ref.uid].error == ""
    assert node.instances() == {ADMIN, ("2g.20gb", 4)}


async def test_two_claims_racing_for_overlapping_placements_never_both_get_them(
    node: Node,
) -> None:
    preparer = await started(node.preparer())
    first = await node.claim("first", "gpu-0-mig-3g-40gb-at-0")
    second = await node.claim("second", "gpu-0-mig-4g-40gb-at-0")
    results = await asyncio.gather(preparer.prepare([first]), preparer.prepare([second]))
    errors = [r[ref.uid].error for r, ref in zip(results, (first, second), strict=True)]
    assert sorted(bool(e) for e in errors) == [False, True]
    refused = next(e for e in errors if e)
    winner = "first" if errors[0] == "" else "second"
    assert f"claim default/{winner}" in refused
    assert CARD0 in refused and "free:" in refused
    assert len(node.instances()) == 2


@pytest.mark.parametrize(
    ("device", "expected"),
    [
        ("gpu-2-mig-3g-40gb-at-0", "not in MIG mode"),
        ("gpu-1-mig-3g-40gb-at-0", "pending disable until a GPU reset"),
        ("gpu-0-mig-5g-50gb-at-0", "has no profile 5g-50gb"),
        ("gpu-0-mig-3g-40gb-at-2", "cannot start at memory slice 2"),
        ("gpu-0-mig-1g-20gb-at-6", "which this driver did not create"),
        ("gpu-7-mig-3g-40gb-at-0", "no GPU 7"),
    ],
)
async def test_bad_partitions_are_refused_with_nothing_created(
    node: Node, device: str, expected: str
) -> None:
    preparer = await started(node.preparer())
    ref = await node.claim("bad", device)
    error = (await preparer.prepare([ref]))[ref.uid].error
    assert expected in error
    assert "free:" in error or "no GPU" in error
    assert node.instances() == {ADMIN}
    assert node.checkpoint_file().load().claims == {}
    assert list((node.root / "cdi").glob("*.json")) == []


async def test_a_limit_on_a_partition_is_refused_naming_the_field(node: Node) -> None:
    preparer = await started(node.preparer())
    config = [
        {
            "source": "FromClaim",
            "opaque": {
                "driver": DRIVER,
                "parameters": {
                    "apiVersion": "vgpu.hami.io/v1alpha1",
                    "kind": "VGPUConfig",
                    "cores": 30,
                },
            },
        }
    ]
    ref = await node.claim("limited", "gpu-0-mig-3g-40gb-at-0", config)
    error = (await preparer.prepare([ref]))[ref.uid].error
    assert "status.allocation.devices.config[0].opaque.parameters.cores" in error
    assert "default/limited" in error
    assert node.instances() == {ADMIN}
