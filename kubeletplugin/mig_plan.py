"""Which MIG instances a claim of partitions needs on this node, decided without side
effects.

A partition device's name says the card, the profile and the placement
(`dra_driver.objects.mig_devices`), so the plan is the allocation read against
what discovery found on the card now: the card must be in MIG mode and staying so,
have the profile, and the placement must be one of the profile's. The check
against the node's other holders (`partition_conflict`) runs apart, at the one
moment the claim's intent is recorded, so two claims racing for overlapping
placements can never both pass it. Every refusal names the card, the profile,
the placement and what is free. A claim's config may not ask for HAMi-core limits
on a partition: they are not supported inside a MIG instance in this round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.vgpu_config import VGPUConfigError, explicit_wire_fields, parse_vgpu_config
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.mig_devices import (
    PartitionName,
    parse_partition_device_name,
    profile_slug,
)
from dra_driver.objects.mig_profiles import MigProfile, Placement
from kubeletplugin.checkpoint import ClaimRecord, MigRecord
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.mig_free import describe_free
from kubeletplugin.mig_state import MigState
from kubeletplugin.prepare_plan import ClaimPlan, DeviceGrant, base_request, claim_ref

LIMIT_FIELDS = ("memory", "memoryPercentage", "cores", "priority", "coreLimitPolicy")
"""`VGPUConfig` fields that would set a HAMi-core limit, refused on a partition."""


@dataclass(frozen=True, slots=True)
class PartitionGrant:
    """One allocation result that is a partition, read against its card."""

    request: str
    pool: str
    device: str
    share_id: str
    gpu: GpuInfo
    profile: MigProfile
    placement: Placement

    def intent(self) -> MigRecord:
        return MigRecord(
            self.gpu.uuid, self.profile.name, self.placement.start, self.placement.size
        )

    @property
    def card(self) -> str:
        return f"{self.gpu.uuid} ({self.gpu.product_name})"


@dataclass(frozen=True, slots=True)
class PartitionPlan:
    uid: str
    namespace: str
    name: str
    grants: tuple[PartitionGrant, ...]
    cards: Mapping[str, MigState]
    """What discovery read of each card the claim uses, by uuid."""

    @property
    def who(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"

    def claim_plan(self) -> ClaimPlan:
        """The plan as `claim_layout` groups results into views (no limits: none apply)."""
        grants = tuple(
            DeviceGrant(g.request, g.pool, g.device, g.share_id, g.gpu, g.profile.memory_bytes, 0)
            for g in self.grants
        )
        return ClaimPlan(self.uid, self.namespace, self.name, grants)


def partition_results(
    claim: Mapping[str, Any], driver: str, pool: str
) -> list[tuple[int, Mapping[str, Any], PartitionName | None]]:
    """The claim's results of this driver on this node, each with its partition name
    (None for a device that is not a partition)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [
        (position, result, parse_partition_device_name(result.get("device") or ""))
        for position, result in enumerate(results)
        if result.get("driver") == driver and result.get("pool") == pool
    ]


def plan_partitions(
    claim: Mapping[str, Any], *, driver: str, pool: str, gpus: Sequence[GpuInfo]
) -> PartitionPlan | None:
    """The plan, or None when no result of the claim here is a partition."""
    results = partition_results(claim, driver, pool)
    if not any(name is not None for _, _, name in results):
        return None
    who = claim_ref(claim)
    by_index = {gpu.index: gpu for gpu in gpus}
    grants = []
    for position, result, name in results:
        where = f"status.allocation.devices.results[{position}].device"
        device = result.get("device") or ""
        if name is None:
            raise InvalidParameterError(
                where,
                f"claim {who}: device {device} is a share, and the claim also holds MIG "
                "partitions here; one claim takes partitions or shares on a node, not both",
            )
        gpu = by_index.get(name.gpu_index)
        if gpu is None:
            raise InvalidParameterError(
                where, f"claim {who}: device {device}: this node has no GPU {name.gpu_index}"
            )
        profile, placement = _partition(gpu, name, f"claim {who}: device {device}", where)
        request = result.get("request") or ""
        _refuse_limits(claim, driver, request, device, who)
        grants.append(
            PartitionGrant(
                request, pool, device, result.get("shareID") or "", gpu, profile, placement
            )
        )
    metadata = claim.get("metadata") or {}
    return PartitionPlan(
        metadata.get("uid") or "",
        metadata.get("namespace") or "",
        metadata.get("name") or "",
        tuple(grants),
        {g.gpu.uuid: g.gpu.mig for g in grants},
    )


def _partition(
    gpu: GpuInfo, name: PartitionName, prefix: str, where: str
) -> tuple[MigProfile, Placement]:
    """The card's profile and placement the name says; refused when the card cannot
    take it (not in MIG mode, a reset pending, no such profile or start)."""
    state = gpu.mig
    card = f"card {gpu.uuid} ({gpu.product_name})"
    asked = f"profile {name.profile_slug} at memory slice {name.start}"
    if not state.partitionable:
        if state.reset_pending:
            mode = "MIG mode is pending " + ("enable" if state.pending_enabled else "disable")
            mode += " until a GPU reset"
        else:
            mode = "not in MIG mode"
        raise InvalidParameterError(where, f"{prefix}: {card}: {asked}: {mode}; free: nothing")
    profile = next((p for p in state.profiles if profile_slug(p.name) == name.profile_slug), None)
    if profile is None:
        names = ", ".join(p.name for p in state.profiles)
        raise InvalidParameterError(
            where,
            f"{prefix}: {card} has no profile {name.profile_slug} (its profiles: {names}); "
            f"free: {describe_free(state)}",
        )
    placement = next((p for p in profile.placements if p.start == name.start), None)
    if placement is None:
        starts = " ".join(str(p) for p in profile.placements)
        raise InvalidParameterError(
            where,
            f"{prefix}: {card}: profile {profile.name} cannot start at memory slice "
            f"{name.start} (its placements: {starts}); free: {describe_free(state)}",
        )
    return profile, placement


def _refuse_limits(
    claim: Mapping[str, Any], driver: str, request: str, device: str, who: str
) -> None:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    for position, entry in enumerate((allocation.get("devices") or {}).get("config") or []):
        opaque = entry.get("opaque") or {}
        scope = entry.get("requests") or ()
        if opaque.get("driver") != driver or (scope and base_request(request) not in scope):
            continue
        path = f"status.allocation.devices.config[{position}].opaque.parameters"
        try:
            config = parse_vgpu_config(
                opaque.get("parameters") or {}, path, from_class=entry.get("source") == "FromClass"
            )
        except VGPUConfigError as error:
            raise InvalidParameterError(path, f"claim {who}: {error}") from None
        asked = [name for name in LIMIT_FIELDS if name in explicit_wire_fields(config)]
        if asked:
            raise InvalidParameterError(
                f"{path}.{asked[0]}",
                f"claim {who}: request {request!r} is MIG partition {device}: HAMi-core "
                f"limits ({', '.join(asked)}) inside a MIG instance are not supported; the "
                "instance is the limit",
            )


def partition_conflict(plan: PartitionPlan, records: Iterable[ClaimRecord]) -> str | None:
    """Why a grant cannot be created now, or None: its placement overlaps another of
    the claim's, an instance or intent another claim holds here, or a GPU instance
    this driver did not create (an administrator's)."""
    others = [r for r in records if r.uid != plan.uid]
    held = [(r, m) for r in others for m in r.mig]
    for position, grant in enumerate(plan.grants):
        state = plan.cards[grant.gpu.uuid]
        on_card = [(r, m) for r, m in held if m.gpu_uuid == grant.gpu.uuid]
        blocked = [Placement(m.start, m.size) for _, m in on_card]
        asked = f"{grant.card}: profile {grant.profile.name} at {grant.placement}"
        free = describe_free(state, blocked)
        for earlier in plan.grants[:position]:
            if earlier.gpu.uuid == grant.gpu.uuid and earlier.placement.overlaps(grant.placement):
                return f"claim {plan.who}: {asked} overlaps its own {earlier.device}; free: {free}"
        for record, mig in on_card:
            if Placement(mig.start, mig.size).overlaps(grant.placement):
                return (
                    f"claim {plan.who}: {asked} is taken: claim {record.namespace}/"
                    f"{record.name} ({record.uid}) holds {mig.profile} at "
                    f"{Placement(mig.start, mig.size)}; free: {free}"
                )
        for gpu_instance, profile, placement in _foreign(state, [m for _, m in on_card]):
            if placement.overlaps(grant.placement):
                return (
                    f"claim {plan.who}: {asked} is taken by GPU instance {gpu_instance} "
                    f"({profile} at {placement}), which this driver did not create; free: {free}"
                )
    return None


def _foreign(state: MigState, ours: Sequence[MigRecord]) -> list[tuple[int, str, Placement]]:
    """The card's GPU instances no record of this driver accounts for."""
    return [
        (gi, profile, placement)
        for gi, profile, placement in state.gpu_instances()
        if not any(owns(m, gi, profile, placement) for m in ours)
    ]


def owns(record: MigRecord, gpu_instance: int, profile: str, placement: Placement) -> bool:
    """Whether the GPU instance is the record's: its own ids, or for an intent not yet
    recorded as created, its profile at its placement."""
    same_place = record.profile == profile and Placement(record.start, record.size) == placement
    if record.created:
        return same_place and record.gpu_instance_id == gpu_instance
    return same_place
