"""The legacy device plugin destroys the MIG instances it created for pods that ended,
end to end: kubelet's stand-in calls Allocate over the real socket for pods the API
emulator holds as HAMi's extender leaves them (`hami.io/vgpu-mig-allocations`), the
mock backend creates the instances, and the reconciler, fed by its pod watch, destroys
them once a pod is deleted or has Succeeded, also when the pod went while the plugin
was down; a live pod's instance and an administrator's stay. NVML's IN_USE refusal
runs through the fake pynvml: logged, retried, nothing crashes. Placements are NVIDIA's
H100 80GB ones (MIG user guide): 3g.40gb at 0:4 and 4:4, 2g.20gb at 0/2/4:2, 1g.10gb
at n:1."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from deviceplugin_rig import NODE, RESOURCE, GpuNode, api_client, bounded, node_rig, scratch_dir
from fake_pynvml import FakeCard, NVMLError_InUse, fake_nvml

from api.hami_annotations import VGPU_MIG_ALLOCATIONS, ContainerDevice
from api.hami_annotations.mig_allocations import (
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
)
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.mig_profiles import H100_80GB, Placement
from kubeletplugin.deviceplugin.allocation import PodRef
from kubeletplugin.deviceplugin.mig_journal import MigJournal
from kubeletplugin.deviceplugin.mig_reconcile import MigReconciler
from kubeletplugin.gpus import MockBackend, NvmlBackend
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.mig_state import MigInstance
from simulator.standins.kubelet_deviceplugin import AdmissionRejectedError, ContainerRequest

UUID = "GPU-00000000-0000-0000-0000-0000000000c1"
PODS = "/api/v1/namespaces/default/pods"


def h100(*instances: str) -> str:
    """A mock H100 in MIG mode with an administrator's instances (`profile@start`)."""
    seeded = ", ".join(
        f"{{profile: {item.split('@')[0]}, start: {item.split('@')[1]}}}" for item in instances
    )
    return f"""
gpus:
  - uuid: {UUID}
    index: 0
    memory: 80Gi
    productName: NVIDIA H100 80GB HBM3
    mig: {{mode: enabled, instances: [{seeded}]}}
"""


def placements(backend: MockBackend) -> list[tuple[str, Placement]]:
    return sorted((i.profile, i.placement) for i in backend.mig_devices[UUID].state().instances)


async def slice_pod(rig: GpuNode, name: str, profile: str, start: int, size: int) -> None:
    """A pod given one slice by the extender, as Allocate finds it."""
    await rig.bound_pod(name, [[ContainerDevice(UUID, "NVIDIA", 1024, 10)]])
    slice_ = MigAllocation(0, 0, UUID, profile, start, size)
    await rig.client.patch(
        object_path(PODS, name),
        {"metadata": {"annotations": {VGPU_MIG_ALLOCATIONS: encode_mig_allocations([slice_])}}},
    )


async def allocate(rig: GpuNode, name: str, profile: str, start: int, size: int) -> MigInstance:
    """A pod given one slice by the extender, served by Allocate; the instance it got."""
    await slice_pod(rig, name, profile, start, size)
    await bounded(rig.kubelet.admit_pod(f"uid-{name}", RESOURCE, [ContainerRequest("main", 1)]))
    pod = await rig.pod(name)
    (entry,) = decode_mig_allocations(pod["metadata"]["annotations"][VGPU_MIG_ALLOCATIONS])
    assert entry.gpu_instance_id is not None and entry.compute_instance_id is not None
    return MigInstance(
        entry.gpu_instance_id,
        entry.compute_instance_id,
        profile,
        Placement(start, size),
        entry.mig_uuid,
    )


async def delete(client: KubeClient, name: str) -> None:
    await client.delete(object_path(PODS, name), gracePeriodSeconds=0)


async def test_a_deleted_pods_instance_is_destroyed_and_its_placement_free_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with node_rig(gpus=h100()) as rig:
        backend = MockBackend(rig.mock_gpus)
        async with rig.plugin(backend) as plugin:
            await bounded(rig.kubelet.wait_update(RESOURCE))
            made = await allocate(rig, "mig", "3g.40gb", 4, 4)
            assert placements(backend) == [("3g.40gb", Placement(4, 4))]
            assert Placement(4, 4) not in backend.mig_devices[UUID].free_placements("3g.40gb")
            reconciler = plugin.mig_reconciler
            assert reconciler is not None
            with caplog.at_level(logging.INFO):
                await delete(rig.client, "mig")
                await bounded(reconciler.wait_for(lambda r: r.destroyed == 1))

    assert placements(backend) == []
    assert Placement(4, 4) in backend.mig_devices[UUID].free_placements("3g.40gb")
    assert reconciler.journal.records() == ()
    (logged,) = [
        r for r in caplog.records if r.getMessage() == "MIG instance of an ended pod destroyed"
    ]
    fields = {k: getattr(logged, k) for k in ("pod", "gpu", "profile", "placement", "mig_uuid")}
    assert fields == {
        "pod": "default/mig",
        "gpu": UUID,
        "profile": "3g.40gb",
        "placement": "4:4",
        "mig_uuid": made.uuid,
    }


async def test_a_succeeded_pods_instance_is_destroyed() -> None:
    async with node_rig(gpus=h100()) as rig:
        backend = MockBackend(rig.mock_gpus)
        async with rig.plugin(backend) as plugin:
            await bounded(rig.kubelet.wait_update(RESOURCE))
            await allocate(rig, "batch", "2g.20gb", 2, 2)
            await rig.client.patch(
                object_path(PODS, "batch") + "/status", {"status": {"phase": "Succeeded"}}
            )
            assert plugin.mig_reconciler is not None
            await bounded(plugin.mig_reconciler.wait_for(lambda r: r.destroyed == 1))
        assert placements(backend) == []


async def test_a_live_pods_and_an_administrators_instances_are_kept() -> None:
    async with node_rig(gpus=h100("1g.10gb@0")) as rig:
        backend = MockBackend(rig.mock_gpus)
        async with rig.plugin(backend) as plugin:
            await bounded(rig.kubelet.wait_update(RESOURCE))
            await allocate(rig, "gone", "1g.10gb", 1, 1)
            await allocate(rig, "stays", "2g.20gb", 2, 2)
            reconciler = plugin.mig_reconciler
            assert reconciler is not None
            await delete(rig.client, "gone")
            await bounded(reconciler.wait_for(lambda r: r.destroyed == 1))
            again = await reconciler.reconcile()

    assert again.destroyed == ()
    assert reconciler.destroyed == 1
    assert placements(backend) == [("1g.10gb", Placement(0, 1)), ("2g.20gb", Placement(2, 2))]
    (record,) = reconciler.journal.records()
    assert record.pod == PodRef("default", "stays")


async def test_a_pod_deleted_while_the_plugin_was_down_loses_its_instance_on_start() -> None:
    """The record outlives the plugin: on start, the pod it names answers 404, so its
    instance goes; an instance the record does not name (made meanwhile) stays."""
    async with node_rig(gpus=h100()) as rig:
        backend = MockBackend(rig.mock_gpus)
        async with rig.plugin(backend):
            await bounded(rig.kubelet.wait_update(RESOURCE))
            await allocate(rig, "mig", "3g.40gb", 0, 4)
        await delete(rig.client, "mig")
        backend.create_mig_instance(UUID, "3g.40gb", 4)
        async with rig.plugin(backend) as restarted:
            assert restarted.mig_reconciler is not None
            await bounded(restarted.mig_reconciler.wait_for(lambda r: r.destroyed == 1))
        assert placements(backend) == [("3g.40gb", Placement(4, 4))]


async def test_a_pod_that_cannot_be_read_keeps_its_instance_until_it_can() -> None:
    async with node_rig(gpus=h100()) as rig:
        backend = MockBackend(rig.mock_gpus)
        async with rig.plugin(backend):
            await bounded(rig.kubelet.wait_update(RESOURCE))
            await allocate(rig, "mig", "1g.10gb", 3, 1)
        await delete(rig.client, "mig")
        assert rig.server is not None
        rig.server.faults.fail("/pods/mig$", verb="GET", status=403, message="no")
        async with rig.plugin(backend) as restarted:
            reconciler = restarted.mig_reconciler
            assert reconciler is not None
            await bounded(reconciler.wait_for(lambda r: r.passes >= 1))
            assert reconciler.destroyed == 0
            assert placements(backend) == [("1g.10gb", Placement(3, 1))]
            second = await reconciler.reconcile()
        assert [r.pod.name for r in second.destroyed] == ["mig"]


@pytest.fixture
async def api() -> Any:
    async with scratch_dir() as root, api_client(root) as (_, client):
        await client.create("/api/v1/nodes", {"metadata": {"name": NODE}})
        yield client


async def test_a_destroy_nvml_refuses_is_logged_and_retried(
    api: KubeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """IN_USE while a process holds the compute instance, then IN_USE on the GPU instance
    once the compute instance went: each pass logs and goes on; the next one finishes."""
    nvml = fake_nvml([FakeCard(UUID, mig=MockMigDevice(UUID, H100_80GB))])
    backend = NvmlBackend(nvml)
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot\n")
    journal = MigJournal(tmp_path / "mig-instances.json", boot_id)
    pod = await api.create(
        PODS,
        {
            "metadata": {"name": "mig"},
            "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "cuda"}]},
        },
    )
    instance = backend.create_mig_instance(UUID, "3g.40gb", 0)
    journal.add(PodRef("default", "mig"), pod["metadata"]["uid"], UUID, instance)
    await delete(api, "mig")
    reconciler = MigReconciler(api, NODE, backend, journal, asyncio.Lock())

    nvml.refuse["nvmlComputeInstanceDestroy"] = NVMLError_InUse
    task = asyncio.create_task(reconciler.run())
    try:
        with caplog.at_level(logging.WARNING):
            await bounded(reconciler.wait_for(lambda r: r.refused == 1))
        assert [i.uuid for i in backend.discover()[0].mig.instances] == [instance.uuid]

        del nvml.refuse["nvmlComputeInstanceDestroy"]
        nvml.refuse["nvmlGpuInstanceDestroy"] = NVMLError_InUse
        half = await reconciler.reconcile()
        (gpu,) = backend.discover()
        assert (len(half.refused), gpu.mig.instances) == (1, ())
        assert gpu.mig.empty_gpu_instances == (
            (instance.gpu_instance_id, "3g.40gb", Placement(0, 4)),
        )

        del nvml.refuse["nvmlGpuInstanceDestroy"]
        done = await reconciler.reconcile()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert [r.instance.uuid for r in done.destroyed] == [instance.uuid]
    assert backend.discover()[0].mig.gpu_instances() == []
    assert journal.records() == ()
    refusals = [r for r in caplog.records if r.getMessage().startswith("MIG instance of an ended")]
    assert refusals and "NVML says" in refusals[0].error and refusals[0].mig_uuid == instance.uuid


async def test_a_record_from_a_newer_release_refuses_mig_allocates_and_is_never_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Rolled back below the release that wrote the record: a MIG Allocate is refused
    naming the file and the versions, the instance it made is destroyed, the record is
    left byte for byte; moved aside, the next Allocate is served without a restart."""
    async with node_rig(gpus=h100()) as rig:
        backend = MockBackend(rig.mock_gpus)
        path = rig.settings.mig_journal_path
        path.parent.mkdir(parents=True, exist_ok=True)
        newer = json.dumps({"version": 2, "writer": "9.1.0", "bootID": "b", "instances": []})
        path.write_text(newer)
        async with rig.plugin(backend):
            await bounded(rig.kubelet.wait_update(RESOURCE))
            await slice_pod(rig, "mig", "3g.40gb", 4, 4)
            with caplog.at_level(logging.ERROR), pytest.raises(AdmissionRejectedError) as refused:
                await bounded(
                    rig.kubelet.admit_pod("uid-mig", RESOURCE, [ContainerRequest("main", 1)])
                )
            message = refused.value.event_message
            assert f"{path}: version 2 (written by vgpu-dra-driver 9.1.0)" in message
            assert "this release reads version 1" in message
            assert placements(backend) == []
            assert path.read_text() == newer
            assert any(
                r.getMessage().startswith("MIG instance record refused") for r in caplog.records
            )

            path.rename(path.with_name("mig-instances.json.aside"))
            made = await allocate(rig, "again", "3g.40gb", 4, 4)
            assert placements(backend) == [("3g.40gb", Placement(4, 4))]
            written = json.loads(path.read_text())
            assert (written["version"], [i["migUUID"] for i in written["instances"]]) == (
                1,
                [made.uuid],
            )
