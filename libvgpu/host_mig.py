"""The MIG devices present on a node's cards, as the monitor's MIG series need them.

A MIG device is a GPU instance and one of its compute instances; the series name it by
MIG uuid, profile, both instance ids and the placement (first memory slice and how
many it spans). Two sources, as for the host series:

- NVML: a card's MIG devices are walked through their device handles
  (`nvmlDeviceGetMigDeviceHandleByIndex`), each giving its instance ids and uuid; the
  GPU instance (`nvmlDeviceGetGpuInstanceById`, `nvmlGpuInstanceGetInfo`) gives the
  profile id and the placement, and the profile id is named by the card's own profile
  info (NVIDIA's table for the model when the driver's info carries no name). A card
  without MIG (NOT_SUPPORTED, or a binding without the call) or not in MIG mode has
  none. The calls are read-only; the monitor never creates or destroys an instance.
- The mock GPU file: a card's `mig` as the kubelet plugin's mock seeds it (instances in
  the order listed, GPU instance ids from 1, one compute instance 0 each, an unset start
  taking the first placement that overlaps none before it, MIG uuids `MIG-` + uuid5 of
  card, GPU instance and compute instance in the namespace below). Instances the
  plugin's mock creates later (prepare) live in the plugin's process and are not seen.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.objects.mig_profiles import MigCard, Placement, mig_card

log = logging.getLogger(__name__)

NVML_DEVICE_MIG_ENABLE = 1
GPU_INSTANCE_PROFILE_COUNT = 0x12
"""`NVML_GPU_INSTANCE_PROFILE_COUNT` of nvml.h 13.x, when the binding lacks it."""
MOCK_MIG_UUID_NAMESPACE = uuid.UUID("5c1f3b0e-6f7a-4d8e-9a51-3e0b8f6c2d47")
"""The kubelet plugin's mock names its MIG devices in this namespace (a test holds the
two to the same uuids)."""


@dataclass(frozen=True, slots=True)
class HostMigInstance:
    """One MIG device on a card."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    placement: Placement
    mig_uuid: str


def _text(value: Any) -> str:
    """As `host_gpus.nvml_text` (which imports this module, so cannot be imported here)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_instance_profiles(nvml: Any, handle: Any) -> Iterator[tuple[int, Any]]:
    """(NVML profile enum, its profile info) for each GPU-instance profile the card
    answers for; the others (NOT_SUPPORTED and the like) are skipped."""
    count = int(getattr(nvml, "NVML_GPU_INSTANCE_PROFILE_COUNT", GPU_INSTANCE_PROFILE_COUNT))
    for nvml_profile in range(count):
        try:
            info = nvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, nvml_profile)
        except nvml.NVMLError:
            continue
        yield nvml_profile, info


def read_nvml_mig_instances(nvml: Any, handle: Any) -> tuple[HostMigInstance, ...]:
    """The MIG devices of one card through NVML, by placement; none when the card is not
    in MIG mode. NVML errors other than NOT_SUPPORTED propagate (the caller logs them)."""
    get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)
    if get_mode is None:
        return ()
    try:
        current, _pending = get_mode(handle)
    except nvml.NVMLError as error:
        if isinstance(error, getattr(nvml, "NVMLError_NotSupported", ())):
            return ()
        raise
    if current != NVML_DEVICE_MIG_ENABLE:
        return ()
    names = _profile_names(nvml, handle)
    instances = []
    for position in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, position)
        except nvml.NVMLError:
            continue
        gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
        info = nvml.nvmlGpuInstanceGetInfo(nvml.nvmlDeviceGetGpuInstanceById(handle, gi))
        instances.append(
            HostMigInstance(
                gpu_instance_id=gi,
                compute_instance_id=int(nvml.nvmlDeviceGetComputeInstanceId(mig)),
                profile=names.get(int(info.profileId), f"profile-{int(info.profileId)}"),
                placement=Placement(int(info.placement.start), int(info.placement.size)),
                mig_uuid=_text(nvml.nvmlDeviceGetUUID(mig)),
            )
        )
    return tuple(sorted(instances, key=lambda i: (i.placement, i.compute_instance_id)))


def _profile_names(nvml: Any, handle: Any) -> dict[int, str]:
    """Profile id -> name (`3g.40gb`), from the card's profile info, else NVIDIA's table."""
    card = mig_card(
        _text(nvml.nvmlDeviceGetName(handle)), int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    )
    names: dict[int, str] = {}
    for _, info in gpu_instance_profiles(nvml, handle):
        name = _text(getattr(info, "name", b"") or b"").removeprefix("MIG ").strip()
        known = card.profile_by_id(int(info.id)) if card is not None else None
        names[int(info.id)] = name or (known.name if known is not None else "")
    return {profile_id: name for profile_id, name in names.items() if name}


def mock_mig_uuid(parent: str, gpu_instance: int, compute_instance: int) -> str:
    """A mock MIG device's uuid, stable across restarts: the plugin's mock names the
    devices it creates so, and the monitor the ones a mock file seeds."""
    return "MIG-" + str(
        uuid.uuid5(MOCK_MIG_UUID_NAMESPACE, f"{parent}/{gpu_instance}/{compute_instance}")
    )


def mock_mig_instances(
    parent_uuid: str, product: str, memory_bytes: int, mig: Mapping[str, Any]
) -> tuple[HostMigInstance, ...]:
    """A mock card's MIG devices as its `mig` entry seeds them; an instance the card's
    table lacks or whose placement is taken is left out (the plugin refuses such a file)."""
    card = mig_card(product, memory_bytes)
    if card is None or mig.get("mode", "enabled") != "enabled":
        return ()
    taken: list[Placement] = []
    instances = []
    for entry in mig.get("instances") or ():
        placement = _seed_placement(card, str(entry.get("profile", "")), entry.get("start"), taken)
        if placement is None:
            log.warning("mock MIG instance %s of %s does not fit; left out", entry, parent_uuid)
            continue
        taken.append(placement)
        gi = len(taken)
        instances.append(
            HostMigInstance(
                gi, 0, str(entry["profile"]), placement, mock_mig_uuid(parent_uuid, gi, 0)
            )
        )
    return tuple(sorted(instances, key=lambda i: i.placement))


def _seed_placement(
    card: MigCard, profile_name: str, start: Any, taken: list[Placement]
) -> Placement | None:
    profile = card.profile(profile_name)
    if profile is None:
        return None
    free = [p for p in profile.placements if not any(p.overlaps(t) for t in taken)]
    if start is None:
        return free[0] if free else None
    return next((p for p in free if p.start == int(start)), None)
