"""What preparing a claim means on this node, decided without side effects.

From the claim as the API server returns it: the allocation results of this
driver in this node's pool, each sized from `consumedCapacity` (what the
allocator charged) or else the opaque `VGPUConfig` (class config first, then
claim config, scoped to requests), checked against the device's capacity.
kubelet repeats calls, so the same claim always yields the same plan.

When kube-scheduler allocates, opaque parameters are invisible to it: a
claim with `VGPUConfig {memory: 2Gi}` and no capacity request is charged the
whole card. The container still gets what the config asked for when that is
within the charge, and the plan lists each such result (`uncharged`) so the
user can be told to write a capacity request instead.

Turning enforcement off (`disableControl`, `coreLimitPolicy: disable`) lifts
every limit, so it is an administrator's decision: honoured from the
DeviceClass's config, and from a claim's only when the driver allows claims
to opt out. Otherwise the claim's opt-out is dropped, the limits stay, and
the plan lists it (`ignored_opt_outs`) so the user is told why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from api.quantity import MIB, QuantityError, format_quantity, to_bytes_ceil
from api.vgpu_config import (
    VGPUConfig,
    VGPUConfigError,
    enforcement_opt_outs,
    merge_configs,
    parse_vgpu_config,
    without_opt_outs,
)
from dra_driver.errors import InvalidParameterError
from kubeletplugin.gpus import GpuInfo
from libvgpu.container_edits import CorePolicy


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    """A published device: its GPU and the capacity offered for sharing."""

    gpu: GpuInfo
    memory_bytes: int
    cores: int


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """One allocation result of the claim, sized."""

    request: str
    pool: str
    device: str
    share_id: str
    gpu: GpuInfo
    memory_limit_bytes: int
    core_limit: int


@dataclass(frozen=True, slots=True)
class UnchargedConfig:
    """A result whose `VGPUConfig` asked for other amounts than its allocation charged."""

    request: str
    device: str
    asked_memory_bytes: int | None
    asked_cores: int | None
    charged_memory_bytes: int
    charged_cores: int
    grant: DeviceGrant

    def message(self) -> str:
        """What the user reads on the claim: what happened and the capacity request to write."""
        asked, requests = [], []
        if self.asked_memory_bytes is not None:
            memory = format_quantity(self.asked_memory_bytes // MIB * MIB)
            asked.append(f"memory {memory}")
            requests.append(f"memory: {memory}")
        if self.asked_cores is not None:
            asked.append(f"cores {self.asked_cores}")
            requests.append(f'cores: "{self.asked_cores}"')
        cores = self.grant.core_limit
        limit = format_quantity(self.grant.memory_limit_bytes // MIB * MIB)
        return (
            f"VGPUConfig of request {self.request!r} asks for {', '.join(asked)}, but the "
            f"allocation charged device {self.device} memory "
            f"{format_quantity(self.charged_memory_bytes)}, cores {self.charged_cores}: "
            "opaque parameters are not capacity requests when kube-scheduler allocates. "
            f"The container is limited to memory {limit}, "
            f"{f'cores {cores}' if cores else 'no core limit'}; the device stays charged as "
            "allocated. Ask for capacity in the claim's request instead: "
            f"capacity: {{requests: {{{', '.join(requests)}}}}}"
        )


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    uid: str
    namespace: str
    name: str
    grants: tuple[DeviceGrant, ...]
    policy: CorePolicy = CorePolicy.DEFAULT
    priority: int | None = None
    disable_control: bool = False
    uncharged: tuple[UnchargedConfig, ...] = ()
    ignored_opt_outs: tuple[str, ...] = ()
    """Wire paths of the claim's enforcement opt-outs that were not honoured."""

    def opt_out_message(self) -> str:
        """What the user reads on the claim when its opt-outs were ignored."""
        return (
            f"claim {self.namespace}/{self.name} ({self.uid}): "
            f"{', '.join(self.ignored_opt_outs)} ignored: turning HAMi-core's enforcement "
            "off is the administrator's decision, honoured from the DeviceClass's config "
            "(or from claims when the kubelet plugin runs with --allow-claim-opt-out); "
            "the limits stay"
        )


def claim_ref(claim: Mapping[str, Any]) -> str:
    metadata = claim.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')} ({metadata.get('uid')})"


def plan_claim(
    claim: Mapping[str, Any],
    *,
    driver: str,
    pool: str,
    devices: Mapping[str, DeviceCapacity],
    allow_claim_opt_out: bool = False,
) -> ClaimPlan:
    """The plan for one claim; InvalidParameterError names the claim and field."""
    metadata = claim.get("metadata") or {}
    allocation = (claim.get("status") or {}).get("allocation")
    who = claim_ref(claim)
    if not allocation:
        raise InvalidParameterError("status.allocation", f"claim {who} is not allocated")
    allocated = allocation.get("devices") or {}
    results = [
        r
        for r in allocated.get("results") or []
        if r.get("driver") == driver and r.get("pool") == pool
    ]
    if not results:
        raise InvalidParameterError(
            "status.allocation.devices.results",
            f"claim {who} has no device of driver {driver} in pool {pool} (this node)",
        )
    configs, ignored = _configs(allocated.get("config") or [], driver, who, allow_claim_opt_out)
    grants = []
    uncharged = []
    effective: list[VGPUConfig] = []
    for position, result in enumerate(results):
        where = f"status.allocation.devices.results[{position}]"
        name = result.get("device") or ""
        capacity = devices.get(name)
        if capacity is None:
            raise InvalidParameterError(
                f"{where}.device", f"claim {who}: device {name!r} is not published by this node"
            )
        request = result.get("request") or ""
        config = merge_configs(
            [c for source, scope, c in configs if source == "FromClass" and _in(scope, request)],
            [c for source, scope, c in configs if source != "FromClass" and _in(scope, request)],
        )
        effective.append(config)
        grant, mismatch = _grant(result, capacity, config, where, who)
        grants.append(grant)
        if mismatch is not None:
            uncharged.append(mismatch)
    policy = next(
        (c.core_limit_policy for c in effective if c.core_limit_policy != "default"), None
    )
    priority = next((c.priority for c in effective if c.priority is not None), None)
    return ClaimPlan(
        uid=metadata.get("uid") or "",
        namespace=metadata.get("namespace") or "",
        name=metadata.get("name") or "",
        grants=tuple(grants),
        policy=CorePolicy(policy) if policy else CorePolicy.DEFAULT,
        priority=priority,
        disable_control=any(c.disable_control for c in effective),
        uncharged=tuple(uncharged),
        ignored_opt_outs=ignored,
    )


def base_request(request: str) -> str:
    """The claim's request a result belongs to: `main` for a `firstAvailable` result
    `main/sub`, the name containers (`resources.claims[].request`) and configs use."""
    return request.split("/", 1)[0]


def _in(scope: frozenset[str], request: str) -> bool:
    """Config scoping: empty = every request; `main/sub` results match `main`."""
    return not scope or request in scope or base_request(request) in scope


def _configs(
    entries: Sequence[Mapping[str, Any]], driver: str, who: str, allow_claim_opt_out: bool
) -> tuple[list[tuple[str, frozenset[str], VGPUConfig]], tuple[str, ...]]:
    """The driver's configs as (source, requests, config), and the wire paths of the
    claim opt-outs dropped because only a class (or the driver flag) may turn enforcement off."""
    parsed = []
    ignored: list[str] = []
    for position, entry in enumerate(entries):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        path = f"status.allocation.devices.config[{position}].opaque.parameters"
        try:
            config = parse_vgpu_config(opaque.get("parameters") or {}, path)
        except VGPUConfigError as error:
            raise InvalidParameterError(path, f"claim {who}: {error}") from None
        source = entry.get("source", "")
        opt_outs = enforcement_opt_outs(config)
        if opt_outs and source != "FromClass" and not allow_claim_opt_out:
            ignored += [f"{path}.{name}" for name in opt_outs]
            config = without_opt_outs(config)
        parsed.append((source, frozenset(entry.get("requests") or ()), config))
    return parsed, tuple(ignored)


def _grant(
    result: Mapping[str, Any],
    capacity: DeviceCapacity,
    config: VGPUConfig,
    where: str,
    who: str,
) -> tuple[DeviceGrant, UnchargedConfig | None]:
    """The result's limits: what was charged, narrowed to what the config asked
    for when that is within the charge (a charge of 0 cores means unthrottled)."""
    consumed = result.get("consumedCapacity") or {}
    if config.memory_mib:
        asked_memory: int | None = config.memory_mib * MIB
    elif config.memory_percentage:
        asked_memory = capacity.memory_bytes * config.memory_percentage // 100
    else:
        asked_memory = None
    asked_cores = config.cores
    if "memory" in consumed:
        charged_memory = _quantity(consumed["memory"], f"{where}.consumedCapacity.memory", who)
        within = asked_memory is not None and asked_memory <= charged_memory
        memory = asked_memory if within and asked_memory is not None else charged_memory
    else:
        charged_memory = memory = capacity.memory_bytes if asked_memory is None else asked_memory
    if "cores" in consumed:
        charged_cores = _quantity(consumed["cores"], f"{where}.consumedCapacity.cores", who)
        within = asked_cores is not None and (charged_cores == 0 or asked_cores <= charged_cores)
        cores = asked_cores if within and asked_cores is not None else charged_cores
    else:
        charged_cores = cores = asked_cores or 0
    if memory < MIB or memory > capacity.memory_bytes:
        raise InvalidParameterError(
            f"{where}.consumedCapacity.memory",
            f"claim {who}: {memory} bytes is outside 1Mi..{capacity.memory_bytes} of "
            f"device {result.get('device')}",
        )
    if cores > capacity.cores:
        raise InvalidParameterError(
            f"{where}.consumedCapacity.cores",
            f"claim {who}: {cores} cores exceed the device's {capacity.cores}",
        )
    grant = DeviceGrant(
        request=result.get("request") or "",
        pool=result.get("pool") or "",
        device=result.get("device") or "",
        share_id=result.get("shareID") or "",
        gpu=capacity.gpu,
        memory_limit_bytes=memory,
        core_limit=min(cores, 100),
    )
    differs = (asked_memory is not None and asked_memory != charged_memory) or (
        asked_cores is not None and asked_cores != charged_cores
    )
    if not differs:
        return grant, None
    return grant, UnchargedConfig(
        grant.request,
        grant.device,
        asked_memory,
        asked_cores,
        charged_memory,
        charged_cores,
        grant,
    )


def _quantity(raw: Any, field: str, who: str) -> int:
    try:
        return to_bytes_ceil(str(raw))
    except QuantityError as error:
        raise InvalidParameterError(field, f"claim {who}: {error.reason}") from None


@dataclass(frozen=True, slots=True)
class DeviceLoad:
    memory_bytes: int = 0
    cores: int = 0


def overcommitted(
    prepared: Iterable[tuple[str, int, int]],
    plan: ClaimPlan,
    devices: Mapping[str, DeviceCapacity],
) -> str | None:
    """The safety net: a message when `plan` plus what is already prepared
    (device name, memory bytes, cores) would exceed a device's memory or cores.
    The API server does not check capacity across claims, so this is the last
    line before a running pod."""
    load: dict[str, DeviceLoad] = {}
    planned = [(g.device, g.memory_limit_bytes, g.core_limit) for g in plan.grants]
    for device, memory, cores in [*prepared, *planned]:
        current = load.get(device, DeviceLoad())
        load[device] = DeviceLoad(current.memory_bytes + memory, current.cores + cores)
    for grant in plan.grants:
        capacity, total = devices[grant.device], load[grant.device]
        if total.memory_bytes > capacity.memory_bytes:
            return (
                f"claim {plan.namespace}/{plan.name} ({plan.uid}) over-commits device "
                f"{grant.device}: {total.memory_bytes} bytes of memory prepared, "
                f"{capacity.memory_bytes} available"
            )
        if total.cores > capacity.cores:
            return (
                f"claim {plan.namespace}/{plan.name} ({plan.uid}) over-commits device "
                f"{grant.device}: {total.cores} cores prepared, {capacity.cores} available"
            )
    return None
