"""The legacy device plugin's Allocate for a HAMi MIG slice, end to end: kubelet's stand-in
calls Allocate over the real socket for a pod the API emulator holds as HAMi's extender
leaves it (device lists plus `hami.io/vgpu-mig-allocations`), the mock backend creates
the instance at the annotated placement, the container gets the MIG device and no
libvgpu limit, and the instance's runtime identity is written back to the annotation."""

from __future__ import annotations

from typing import Any

from deviceplugin_rig import RESOURCE, bounded, node_rig

from api.hami_annotations import VGPU_MIG_ALLOCATIONS, ContainerDevice
from api.hami_annotations.mig_allocations import (
    MigAllocation,
    decode_mig_allocations,
    encode_mig_allocations,
)
from dra_driver.kube.rest import object_path
from simulator.standins.kubelet_deviceplugin import ContainerRequest

UUID = "GPU-00000000-0000-0000-0000-0000000000c1"
H100_IN_MIG_MODE = f"""
gpus:
  - uuid: {UUID}
    index: 0
    memory: 80Gi
    productName: NVIDIA H100 80GB HBM3
    mig: {{mode: enabled}}
"""
PODS = "/api/v1/namespaces/default/pods"


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


async def test_allocate_creates_the_annotated_instance_and_records_it() -> None:
    async with node_rig(gpus=H100_IN_MIG_MODE) as rig, rig.plugin():
        await bounded(rig.kubelet.wait_update(RESOURCE))
        await rig.bound_pod("mig", [[ContainerDevice(UUID, "NVIDIA", 40960, 42)]])
        slice_ = MigAllocation(0, 0, UUID, "3g.40gb", 4, 4)
        await rig.client.patch(
            object_path(PODS, "mig"),
            {"metadata": {"annotations": {VGPU_MIG_ALLOCATIONS: encode_mig_allocations([slice_])}}},
        )
        admission = await bounded(
            rig.kubelet.admit_pod("kubelet-uid", RESOURCE, [ContainerRequest("main", 1)])
        )
        after = await rig.pod("mig")

    envs = admission.responses["main"].envs
    assert envs["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert not any(name.startswith("CUDA_DEVICE_MEMORY_LIMIT") for name in envs)
    (recorded,) = decode_mig_allocations(annotations(after)[VGPU_MIG_ALLOCATIONS])
    assert (recorded.gpu_uuid, recorded.profile, recorded.start) == (UUID, "3g.40gb", 4)
    assert recorded.mig_uuid == envs["NVIDIA_VISIBLE_DEVICES"]
    assert recorded.gpu_instance_id is not None and recorded.compute_instance_id is not None
