"""What is free on a MIG-mode card, from what discovery read of it. Pure.

Refusals (NVML's, and prepare's own) name what a claim could have had instead,
so an operator reading the error knows whether the card is full or the placement
alone is taken. NVML's own rule is followed: a placement is free when it overlaps
no GPU instance (with or without compute instances), the profile has instances
left and the card has the compute slices for it.
"""

from __future__ import annotations

from collections.abc import Iterable

from dra_driver.objects.mig_profiles import MigProfile, Placement
from kubeletplugin.mig_state import MigState


def taken_placements(state: MigState) -> tuple[tuple[str, Placement], ...]:
    """(profile, placement) of every GPU instance on the card, one per GPU instance."""
    taken = ((profile, placement) for _, profile, placement in state.gpu_instances())
    return tuple(sorted(taken, key=lambda entry: entry[1]))


def free_placements(
    state: MigState, profile: MigProfile, also_taken: Iterable[Placement] = ()
) -> tuple[Placement, ...]:
    """The profile's placements free on the card, `also_taken` (held by claims whose
    instances do not exist yet) counted as taken."""
    taken = taken_placements(state)
    same = sum(1 for name, _ in taken if name == profile.name)
    compute = sum(p.compute_slices for name, _ in taken if (p := state.profile(name)) is not None)
    if same >= profile.max_instances or compute + profile.compute_slices > _compute_slices(state):
        return ()
    blocked = [placement for _, placement in taken] + list(also_taken)
    return tuple(p for p in profile.placements if not any(p.overlaps(b) for b in blocked))


def describe_free(state: MigState, also_taken: Iterable[Placement] = ()) -> str:
    """`3g.40gb at 0:4 4:4; 1g.10gb at 0:1 ...`, or `nothing`."""
    held = tuple(also_taken)
    parts = []
    for profile in state.profiles:
        free = free_placements(state, profile, held)
        if free:
            parts.append(f"{profile.name} at {' '.join(str(p) for p in free)}")
    return "; ".join(parts) or "nothing"


def _compute_slices(state: MigState) -> int:
    """The card's compute slices: those of its largest profile (the whole-card one)."""
    return max((p.compute_slices for p in state.profiles), default=0)
