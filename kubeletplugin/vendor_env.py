"""What a container gets for a share of a non-NVIDIA card: its vendor's variables and ours.

HAMi-core (`libvgpu.so`) is NVIDIA's; no other family's sharing layer is
ours to load, so for them a share is enforced (or not) by the vendor's own
runtime and device plugin stack. Prepare sets what those read, as HAMi's
stack for the vendor sets it, where that is known:

- Ascend: `ASCEND_VISIBLE_DEVICES`, the physical NPU indexes Ascend's docker
  runtime mounts (HAMi's scheduler writes the same variable, `pkg/device/ascend`);
- AMD: `ROCR_VISIBLE_DEVICES` (the cards as the container numbers them: the
  spec exposes only the claim's render nodes, so ROCm counts them from 0) and
  `HIP_DEVICE_MEMORY_LIMIT=<MiB>m`, which HAMi's AMD LD_AUDIT layer enforces
  (HAMi `docs/develop/amd-vgpu.md`; one value per container, so the smallest
  of the container's limits);
- AWS Neuron: `AWS_NEURON_VISIBLE_DEVICES`, the devices the Neuron runtime opens.

For every family, also NVIDIA-free variables that state the share exactly as it
was allocated, so a workload (or a person) can read what it was given even
where nothing enforces it: `VGPU_SHARE_VENDOR`, `VGPU_SHARE_DEVICES` (uuids in
device order), `VGPU_SHARE_MEMORY_LIMIT_<i>` (`<MiB>m`, libvgpu's encoding) and
`VGPU_SHARE_CORE_LIMIT_<i>` (percent; 0 = no core limit). The allocation is
accounted in the claim either way. Pure and deterministic, as kubelet's repeated
prepares need.
"""

from __future__ import annotations

from collections.abc import Sequence

from dra_driver.objects.dra_vendors import DraVendor
from libvgpu.container_edits import (
    NO_OWN_LIMIT,
    DeviceShare,
    EnvVar,
    encode_core_limit,
    encode_memory_limit,
    order_devices,
)

SHARE_ENV_PREFIX = "VGPU_SHARE_"

VISIBLE_DEVICES_ENV = {
    "ascend": "ASCEND_VISIBLE_DEVICES",
    "amd": "ROCR_VISIBLE_DEVICES",
    "neuron": "AWS_NEURON_VISIBLE_DEVICES",
}
"""The vendor runtime's device list where HAMi's stack is known to set one: host card
indexes for the runtimes that mount the cards themselves (Ascend's, Neuron's)."""
CONTAINER_NUMBERED = frozenset({"amd"})
"""Families whose runtime numbers the cards it finds in the container from 0."""

AMD_MEMORY_LIMIT_ENV = "HIP_DEVICE_MEMORY_LIMIT"


def share_env(vendor: DraVendor, devices: Sequence[DeviceShare]) -> tuple[EnvVar, ...]:
    """Every variable one container's shares of `vendor`'s cards set, in a fixed order."""
    ordered = order_devices(devices)
    env = []
    visible = VISIBLE_DEVICES_ENV.get(vendor.id)
    if visible is not None:
        numbers = (
            range(len(ordered))
            if vendor.id in CONTAINER_NUMBERED
            else [share.host_index for share in ordered]
        )
        env.append(EnvVar(visible, ",".join(str(number) for number in numbers)))
    limits = [s.memory_limit_bytes for s in ordered if s.memory_limit_bytes is not None]
    if vendor.id == "amd" and limits:
        env.append(EnvVar(AMD_MEMORY_LIMIT_ENV, encode_memory_limit(min(limits))))
    env += [
        EnvVar(f"{SHARE_ENV_PREFIX}VENDOR", vendor.id),
        EnvVar(f"{SHARE_ENV_PREFIX}DEVICES", ",".join(share.uuid for share in ordered)),
    ]
    for ordinal, share in enumerate(ordered):
        memory = share.memory_limit_bytes
        cores = share.core_limit_percent
        env += [
            EnvVar(
                f"{SHARE_ENV_PREFIX}MEMORY_LIMIT_{ordinal}",
                NO_OWN_LIMIT if memory is None else encode_memory_limit(memory),
            ),
            EnvVar(
                f"{SHARE_ENV_PREFIX}CORE_LIMIT_{ordinal}",
                NO_OWN_LIMIT if cores is None else encode_core_limit(cores),
            ),
        ]
    return tuple(env)
