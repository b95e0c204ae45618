"""The per-claim CDI spec: frozen values and the pure function that builds them.

A claim gets one spec file whose devices are the claim's allocated devices
(or shares of them). Each device carries the libvgpu env and mounts the
plugin computed for it plus the GPU's device node; the control nodes every
CUDA process needs go once into the spec-wide edits. A runtime stats every
device node on the host and refuses the container when one is missing, so
the caller says which nodes the host has (`host_nodes`) and only those are
listed: none for mock GPUs, none when the NVIDIA CDI device of the same GPU
supplies them.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cdi.errors import InvalidCdiNameError, InvalidCdiSpecError
from cdi.naming import (
    CDI_KIND,
    ClaimUID,
    cdi_device_name,
    qualified_device_id,
    validate_claim_uid,
    validate_share_id,
)
from dra_driver.errors import InvalidParameterError

CDI_VERSION = "0.5.0"
"""The lowest version that accepts every spec built here, which runtimes check on load.

Device names start with the claim UID, hex that begins with a digit for ten
UIDs in sixteen, and a device name not starting with a letter needs 0.5.0
(`specs-go/version.go`, `requiresV050`, the same rule that gates
`deviceNodes[].hostPath`). Nothing newer is used: no mount `type` (0.4.0),
no annotations or `.` in the class (0.6.0), no additionalGids or intelRdt
(0.7.0), no netDevices (1.1.0).
"""

READ_ONLY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")
READ_WRITE_MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")

NVIDIA_CONTROL_DEVICE_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def nvidia_device_node(minor: int) -> str:
    return f"/dev/nvidia{minor}"


class EnvVarShape(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str: ...


class MountShape(Protocol):
    @property
    def host_path(self) -> str: ...
    @property
    def container_path(self) -> str: ...
    @property
    def read_only(self) -> bool: ...


class ContainerEditsShape(Protocol):
    """What `libvgpu.container_edits.ContainerEdits` offers.

    `cdi` and `libvgpu` are independent layers (neither imports the other),
    so the shape is declared here and the plugin passes libvgpu's value in.
    """

    @property
    def env(self) -> Sequence[EnvVarShape]: ...
    @property
    def mounts(self) -> Sequence[MountShape]: ...


@dataclass(frozen=True, slots=True)
class ClaimDeviceEdits:
    """One allocation result of a claim and what containers using it get."""

    device: str
    """The ResourceSlice device name, e.g. `gpu-0`."""

    gpu_minor: int
    """NVIDIA minor number of the GPU: its node is `/dev/nvidia<minor>`."""

    edits: ContainerEditsShape
    share_id: str | None = None
    """The result's shareID (None or "" when it has none, as in kubelet's v1beta1 messages);
    it enters the CDI name only when the claim holds the device more than once."""

    device_nodes: tuple[str, ...] | None = None
    """Container paths of the device's own nodes (AMD's `/dev/dri/*`); None = NVIDIA's
    `/dev/nvidia<gpu_minor>`. Listed, as every node, only where `host_nodes` has it."""


@dataclass(frozen=True, slots=True)
class CdiMount:
    host_path: str
    container_path: str
    options: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CdiDeviceNode:
    path: str
    """Where the node appears in the container."""

    host_path: str = ""
    """Where the runtime finds it on the host; "" when it is `path` itself."""


@dataclass(frozen=True, slots=True)
class CdiContainerEdits:
    env: tuple[str, ...] = ()
    """`NAME=value` entries."""

    device_nodes: tuple[CdiDeviceNode, ...] = ()
    """The runtime reads each host node's type and numbers, so it must exist there."""

    mounts: tuple[CdiMount, ...] = ()

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts)

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {}
        if self.env:
            document["env"] = list(self.env)
        if self.device_nodes:
            document["deviceNodes"] = [
                {"path": node.path, "hostPath": node.host_path}
                if node.host_path and node.host_path != node.path
                else {"path": node.path}
                for node in self.device_nodes
            ]
        if self.mounts:
            document["mounts"] = [
                {
                    "hostPath": mount.host_path,
                    "containerPath": mount.container_path,
                    "options": list(mount.options),
                }
                for mount in self.mounts
            ]
        return document


@dataclass(frozen=True, slots=True)
class CdiDevice:
    name: str
    edits: CdiContainerEdits

    @property
    def qualified_id(self) -> str:
        return qualified_device_id(self.name)


@dataclass(frozen=True, slots=True)
class CdiSpec:
    """One claim's spec; `devices` keep the order of the results they were built from."""

    claim_uid: ClaimUID
    devices: tuple[CdiDevice, ...]
    common_edits: CdiContainerEdits = CdiContainerEdits()
    """Applied once whenever any device of the spec is injected."""

    cdi_version: str = CDI_VERSION
    kind: str = CDI_KIND

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "cdiVersion": self.cdi_version,
            "kind": self.kind,
            "devices": [
                {"name": device.name, "containerEdits": device.edits.to_document()}
                for device in self.devices
            ],
        }
        if not self.common_edits.is_empty():
            document["containerEdits"] = self.common_edits.to_document()
        return document

    def to_json(self) -> str:
        return json.dumps(self.to_document(), indent=2) + "\n"


def _env_entry(variable: EnvVarShape) -> str:
    name, value = variable.name, variable.value
    if not name or "=" in name or "\0" in name or "\0" in value:
        raise InvalidCdiSpecError("env", f"{name!r} cannot be written as NAME=value")
    return f"{name}={value}"


def _cdi_mount(mount: MountShape) -> CdiMount:
    options = READ_ONLY_MOUNT_OPTIONS if mount.read_only else READ_WRITE_MOUNT_OPTIONS
    return CdiMount(mount.host_path, mount.container_path, options)


def _device_names(claim_uid: ClaimUID, devices: Sequence[ClaimDeviceEdits]) -> list[str]:
    """One CDI name per result; refuses rather than lets two results share a name."""
    uses = Counter(device.device for device in devices)
    names: list[str] = []
    for device in devices:
        share_id = device.share_id or None
        if uses[device.device] == 1:
            if share_id is not None:
                validate_share_id(share_id)
            names.append(cdi_device_name(claim_uid, device.device))
        elif share_id is None:
            raise InvalidCdiNameError(
                "shareID",
                f"device {device.device} is allocated {uses[device.device]} times in claim "
                f"{claim_uid}; each share needs its shareID",
            )
        else:
            names.append(cdi_device_name(claim_uid, device.device, share_id))
    for name, count in Counter(names).items():
        if count > 1:
            raise InvalidCdiNameError(
                "devices", f"CDI device name {name} would name {count} results"
            )
    return names


def _nodes(paths: Sequence[str], host_nodes: Mapping[str, str]) -> tuple[CdiDeviceNode, ...]:
    return tuple(CdiDeviceNode(path, host_nodes[path]) for path in paths if path in host_nodes)


def build_claim_spec(
    claim_uid: str,
    devices: Sequence[ClaimDeviceEdits],
    *,
    common: ContainerEditsShape | None = None,
    host_nodes: Mapping[str, str] | None = None,
    control_nodes: Sequence[str] = NVIDIA_CONTROL_DEVICE_NODES,
) -> CdiSpec:
    """The claim's spec; deterministic, so a repeated prepare writes the same file.

    `common` edits apply once whenever any device of the claim is injected
    (claim-wide env such as the visible-device list, and the mounts), while
    each device carries what is its own. `host_nodes` maps the container path
    of each NVIDIA device node the host has to its host path: a GPU's
    `/dev/nvidia<minor>` and the control nodes are listed only when present
    there, and none at all without it (mock GPUs; or the NVIDIA CDI device the
    plugin returns next to ours supplies them). `control_nodes` are the spec-wide
    nodes of the cards' family (AMD: `/dev/kfd`).
    """
    host_nodes = host_nodes or {}
    uid = validate_claim_uid(claim_uid)
    if not devices:
        raise InvalidParameterError("devices", f"claim {uid} has no device to write a spec for")
    names = _device_names(uid, devices)
    cdi_devices = []
    for name, device in zip(names, devices, strict=True):
        if isinstance(device.gpu_minor, bool) or not (
            isinstance(device.gpu_minor, int) and device.gpu_minor >= 0
        ):
            raise InvalidParameterError("gpuMinor", f"{device.gpu_minor!r} is not a minor number")
        edits = CdiContainerEdits(
            env=tuple(_env_entry(variable) for variable in device.edits.env),
            device_nodes=_nodes(
                device.device_nodes
                if device.device_nodes is not None
                else [nvidia_device_node(device.gpu_minor)],
                host_nodes,
            ),
            mounts=tuple(_cdi_mount(mount) for mount in device.edits.mounts),
        )
        if edits.is_empty():
            raise InvalidCdiSpecError(
                f"devices[{len(cdi_devices)}].containerEdits",
                f"device {device.device} has nothing to inject, which CDI refuses",
            )
        cdi_devices.append(CdiDevice(name, edits))
    common_edits = CdiContainerEdits(
        env=tuple(_env_entry(variable) for variable in common.env) if common else (),
        device_nodes=_nodes(control_nodes, host_nodes),
        mounts=tuple(_cdi_mount(mount) for mount in common.mounts) if common else (),
    )
    return CdiSpec(claim_uid=uid, devices=tuple(cdi_devices), common_edits=common_edits)
