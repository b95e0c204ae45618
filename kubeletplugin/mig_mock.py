"""One mock card's MIG instances, kept as NVML keeps them, refused as NVML refuses.

The mock backend (and the test stand-in for pynvml) hold one `MockMigDevice` per
MIG-capable mock card, so prepare, cleanup and discovery can create, destroy and
list GPU and compute instances on machines without GPUs. Choices that are the
mock's own, not NVML's: a GPU instance without an explicit start takes the free
placement with the lowest start; GPU instance ids are the lowest free from 1 and
compute instance ids the lowest free from 0 within their GPU instance; a MIG
device's uuid is `MIG-` + uuid5 of the parent uuid, GPU instance and compute
instance, so it is stable across restarts of the mock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dra_driver.objects.mig_profiles import MigCard, MigProfile, Placement
from kubeletplugin.mig_state import (
    MigInstance,
    MigInsufficientResourcesError,
    MigInUseError,
    MigInvalidPlacementError,
    MigNotFoundError,
    MigNotSupportedError,
    MigState,
)
from libvgpu.host_mig import mock_mig_uuid


@dataclass(slots=True)
class _GpuInstance:
    id: int
    profile: MigProfile
    placement: Placement
    compute: dict[int, int] = field(default_factory=dict)
    """Compute instance id -> its compute slices."""


@dataclass(frozen=True, slots=True)
class GpuInstanceView:
    """A GPU instance as listed: its compute instances as (id, compute slices)."""

    id: int
    profile: MigProfile
    placement: Placement
    compute: tuple[tuple[int, int], ...]


@dataclass(slots=True)
class MockMigDevice:
    """A MIG-capable card: its mode and its GPU and compute instances."""

    uuid: str
    card: MigCard
    enabled: bool = True
    pending_enabled: bool = True
    _gpu_instances: dict[int, _GpuInstance] = field(default_factory=dict)

    def create_gpu_instance(self, profile_name: str, start: int | None = None) -> int:
        """Create a GPU instance of the profile, at `start` or at the first free placement;
        returns its id."""
        self._require_partitionable()
        profile = self._profile(profile_name)
        free = self.free_placements(profile_name)
        if start is None:
            if not free:
                raise MigInsufficientResourcesError(self._name, self._no_room(profile))
            placement = free[0]
        else:
            placement = next((p for p in profile.placements if p.start == start), None)
            if placement is None:
                starts = ", ".join(str(p) for p in profile.placements)
                raise MigInvalidPlacementError(
                    self._name,
                    f"profile {profile.name} cannot start at memory slice {start}; "
                    f"its placements: {starts}",
                )
            if placement not in free:
                raise MigInsufficientResourcesError(self._name, self._no_room(profile, placement))
        gi_id = _lowest_free(self._gpu_instances, 1)
        self._gpu_instances[gi_id] = _GpuInstance(gi_id, profile, placement)
        return gi_id

    def create_compute_instance(self, gpu_instance: int, slices: int | None = None) -> int:
        """Create a compute instance of `slices` compute slices (all of the GPU instance's
        when None) in a GPU instance; returns its id."""
        self._require_partitionable()
        gi = self._gpu_instance(gpu_instance)
        size = gi.profile.compute_slices if slices is None else slices
        used = sum(gi.compute.values())
        if size < 1 or size > gi.profile.compute_slices:
            raise MigNotSupportedError(
                self._name,
                f"GPU instance {gi.id} ({gi.profile.name}) has no {size}-slice compute profile",
            )
        if used + size > gi.profile.compute_slices:
            raise MigInsufficientResourcesError(
                self._name,
                f"GPU instance {gi.id} ({gi.profile.name}) has "
                f"{gi.profile.compute_slices - used} of {gi.profile.compute_slices} compute "
                f"slices free, {size} asked",
            )
        ci_id = _lowest_free(gi.compute, 0)
        gi.compute[ci_id] = size
        return ci_id

    def destroy_compute_instance(self, gpu_instance: int, compute_instance: int) -> None:
        gi = self._gpu_instance(gpu_instance)
        if gi.compute.pop(compute_instance, None) is None:
            raise MigNotFoundError(
                self._name, f"GPU instance {gi.id} has no compute instance {compute_instance}"
            )

    def destroy_gpu_instance(self, gpu_instance: int) -> None:
        gi = self._gpu_instance(gpu_instance)
        if gi.compute:
            held = ", ".join(str(ci) for ci in sorted(gi.compute))
            raise MigInUseError(
                self._name,
                f"GPU instance {gi.id} ({gi.profile.name} at {gi.placement}) still holds "
                f"compute instances {held}",
            )
        del self._gpu_instances[gpu_instance]

    def free_placements(self, profile_name: str) -> tuple[Placement, ...]:
        """The profile's placements an instance could take now: overlapping no GPU
        instance, within the card's compute slices and the profile's instance count."""
        profile = self._profile(profile_name)
        taken = list(self._gpu_instances.values())
        same = sum(1 for gi in taken if gi.profile.profile_id == profile.profile_id)
        compute = sum(gi.profile.compute_slices for gi in taken)
        if same >= profile.max_instances:
            return ()
        if compute + profile.compute_slices > self.card.compute_slices:
            return ()
        return tuple(
            p for p in profile.placements if not any(p.overlaps(gi.placement) for gi in taken)
        )

    def gpu_instances(self) -> tuple[GpuInstanceView, ...]:
        """The GPU instances by placement."""
        return tuple(
            GpuInstanceView(gi.id, gi.profile, gi.placement, tuple(sorted(gi.compute.items())))
            for gi in sorted(self._gpu_instances.values(), key=lambda g: g.placement)
        )

    def state(self) -> MigState:
        views = self.gpu_instances()
        return MigState(
            capable=True,
            enabled=self.enabled,
            pending_enabled=self.pending_enabled,
            profiles=self.card.profiles if self.enabled else (),
            instances=tuple(
                MigInstance(gi.id, ci, gi.profile.name, gi.placement, self.mig_uuid(gi.id, ci))
                for gi in views
                for ci, _ in gi.compute
            ),
            empty_gpu_instances=tuple(
                (gi.id, gi.profile.name, gi.placement) for gi in views if not gi.compute
            ),
        )

    def mig_uuid(self, gpu_instance: int, compute_instance: int) -> str:
        return mock_mig_uuid(self.uuid, gpu_instance, compute_instance)

    @property
    def _name(self) -> str:
        return f"{self.uuid} ({self.card.model})"

    def _require_partitionable(self) -> None:
        if not self.enabled:
            raise MigNotSupportedError(self._name, "not in MIG mode")
        if not self.pending_enabled:
            raise MigNotSupportedError(
                self._name, "MIG mode is pending disable until a GPU reset; no new instances"
            )

    def _profile(self, name: str) -> MigProfile:
        profile = self.card.profile(name)
        if profile is None:
            raise MigNotSupportedError(
                self._name,
                f"profile {name} not supported; its profiles: {', '.join(self.card.profile_names)}",
            )
        return profile

    def _gpu_instance(self, gpu_instance: int) -> _GpuInstance:
        gi = self._gpu_instances.get(gpu_instance)
        if gi is None:
            raise MigNotFoundError(self._name, f"no GPU instance {gpu_instance}")
        return gi

    def _no_room(self, profile: MigProfile, placement: Placement | None = None) -> str:
        where = f" at {placement}" if placement is not None else ""
        taken = ", ".join(
            f"{gi.id}: {gi.profile.name} at {gi.placement}"
            for gi in sorted(self._gpu_instances.values(), key=lambda g: g.placement)
        )
        free = ", ".join(
            f"{p.name} at {' '.join(str(x) for x in self.free_placements(p.name))}"
            for p in self.card.profiles
            if self.free_placements(p.name)
        )
        return (
            f"no room for profile {profile.name}{where}; GPU instances: {taken or 'none'}; "
            f"free: {free or 'nothing'}"
        )


def _lowest_free(used: dict[int, object], first: int) -> int:
    candidate = first
    while candidate in used:
        candidate += 1
    return candidate
