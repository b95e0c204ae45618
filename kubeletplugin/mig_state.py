"""What discovery reports about a card's MIG side, and the refusals MIG management gives.

A card not in MIG mode carries `MigState()` (not capable, disabled): it is published
as a whole GPU, as before. Switching the mode needs a GPU reset, which this driver
never does: the administrator does, and a card whose pending mode differs from its
current one is reported as not partitionable until that reset.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.objects.mig_profiles import MigProfile, Placement

NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One MIG device: a GPU instance and one of its compute instances."""

    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    placement: Placement
    uuid: str


@dataclass(frozen=True, slots=True)
class MigState:
    """A card's MIG mode, its GPU-instance profiles and the MIG devices present."""

    capable: bool = False
    enabled: bool = False
    """Current mode."""
    pending_enabled: bool = False
    """Mode after the next GPU reset."""
    profiles: tuple[MigProfile, ...] = ()
    """Read only while the current mode is MIG; placements included."""
    instances: tuple[MigInstance, ...] = ()
    empty_gpu_instances: tuple[tuple[int, str, Placement], ...] = ()
    """GPU instances (id, profile, placement) holding no compute instance yet: they take
    their placement, but there is no MIG device to hand out."""

    @property
    def reset_pending(self) -> bool:
        return self.capable and self.enabled != self.pending_enabled

    @property
    def partitionable(self) -> bool:
        """In MIG mode, and staying so: instances may be created on it."""
        return self.capable and self.enabled and self.pending_enabled

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def gpu_instances(self) -> list[tuple[int, str, Placement]]:
        """(id, profile, placement) of each GPU instance on the card, with or without
        compute instances, in id order: what takes a placement."""
        found = {
            i.gpu_instance_id: (i.gpu_instance_id, i.profile, i.placement) for i in self.instances
        }
        found.update({gi: (gi, profile, place) for gi, profile, place in self.empty_gpu_instances})
        return sorted(found.values())


class MigError(Exception):
    """A MIG operation NVML refused; `code` is NVML's return code."""

    code: int = 0

    def __init__(self, gpu: str, reason: str) -> None:
        super().__init__(f"{gpu}: {reason}")
        self.gpu = gpu
        self.reason = reason


class MigNotSupportedError(MigError):
    """Card not in MIG mode, a mode change pending, or a profile the card lacks."""

    code = NVML_ERROR_NOT_SUPPORTED


class MigInvalidPlacementError(MigError):
    """A start that is not one of the profile's possible placements."""

    code = NVML_ERROR_INVALID_ARGUMENT


class MigInsufficientResourcesError(MigError):
    """The placement overlaps an instance, or the profile's instances are all taken."""

    code = NVML_ERROR_INSUFFICIENT_RESOURCES


class MigInUseError(MigError):
    """A GPU instance that still holds compute instances."""

    code = NVML_ERROR_IN_USE


class MigNotFoundError(MigError):
    """No such GPU or compute instance."""

    code = NVML_ERROR_NOT_FOUND
