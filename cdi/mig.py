"""CDI edits for a MIG partition: the container gets the MIG device, not the card.

A partition's CDI device sets `NVIDIA_VISIBLE_DEVICES` to the MIG uuids of the
partitions the container gets (the toolkit's hook and CUDA select the instance by
it) and lists the device nodes a runtime needs for MIG, as the NVIDIA container
toolkit lists them: the parent card's `/dev/nvidia<minor>` and the
`/dev/nvidia-caps/nvidia-cap<N>` nodes of the GPU instance's and the compute
instance's access capabilities (the control nodes go spec-wide, as for any
NVIDIA device). As everywhere in `cdi.spec`, a node is listed only where the host
has it, so mock cards get the env alone.

No libvgpu: a HAMi-core limit inside a MIG instance is not supported in this
round (the instance is the isolation), so a partition's edits carry no preload,
no cache dir and no limit variables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cdi.spec import ClaimDeviceEdits, nvidia_device_node

NVIDIA_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
NVIDIA_CAPS_DIR = "/dev/nvidia-caps"


def nvidia_cap_node(minor: int) -> str:
    """`/dev/nvidia-caps/nvidia-cap<minor>`: the node of one MIG access capability."""
    return f"{NVIDIA_CAPS_DIR}/nvidia-cap{minor}"


@dataclass(frozen=True, slots=True)
class EnvVar:
    name: str
    value: str


@dataclass(frozen=True, slots=True)
class PartitionEdits:
    """What a partition's container gets besides device nodes: env only."""

    env: tuple[EnvVar, ...]
    mounts: tuple[()] = ()


@dataclass(frozen=True, slots=True)
class MigDevice:
    """One partition of a claim, created: what its CDI device needs."""

    device: str
    """The ResourceSlice device name, `gpu-<i>-mig-<profile>-at-<start>`."""
    parent_minor: int
    mig_uuid: str
    cap_minors: tuple[int, ...] = ()
    """Minors of the GPU instance's and compute instance's access capabilities; empty
    where the host has no device nodes (mock cards)."""
    share_id: str | None = None


def mig_device_nodes(device: MigDevice) -> tuple[str, ...]:
    """Container paths of the partition's own nodes: the parent card's, then the caps'."""
    caps = (nvidia_cap_node(minor) for minor in device.cap_minors)
    return (nvidia_device_node(device.parent_minor), *caps)


def partition_device_edits(device: MigDevice, visible: Sequence[str]) -> ClaimDeviceEdits:
    """The partition's CDI device: `visible` are the MIG uuids of every partition the
    containers that get this one also get (its view), in result order, so devices
    injected together agree on the variable."""
    return ClaimDeviceEdits(
        device.device,
        device.parent_minor,
        PartitionEdits((EnvVar(NVIDIA_VISIBLE_DEVICES, ",".join(visible)),)),
        device.share_id,
        mig_device_nodes(device),
    )
