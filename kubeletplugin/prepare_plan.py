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
user can be told to write a capacity request instead. A filter is another
matter: a result on a GPU the config excludes (`useUUIDs`, `noUseUUIDs`,
`useTypes`, `noUseTypes`, or a request's GPUs on two NUMA nodes under
`numaBind`) is refused, naming the config field that set the filter. The
scheduler-allocated overlay's admission policy refuses such claims at
creation; this is the line behind it, and behind any forged allocation.

Turning enforcement off (`disableControl`, `coreLimitPolicy: disable`) lifts
limits, so it is an administrator's decision, taken per request: honoured from
the DeviceClass's config (`source: FromClass`), and from a claim's own config
only when that request's class config sets `allowClaimOptOut` or the kubelet
plugin runs with `--allow-claim-opt-out`. Otherwise the claim's opt-out is
dropped, the limits stay, and the plan lists it (`ignored_opt_outs`) so the user
is told why. Each opt-out that does take effect is traced to the config that
set it and who allowed it (`honoured_opt_outs`), so the claim says on whose word
its enforcement is off. `allowClaimOptOut` in a claim's own config fails the
prepare, as any invalid parameter does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from api.quantity import MIB, QuantityError, format_quantity, to_bytes_ceil
from api.vgpu_config import (
    VGPUConfig,
    VGPUConfigError,
    enforcement_opt_outs,
    explicit_wire_fields,
    merge_configs,
    parse_vgpu_config,
    without_opt_outs,
)
from dra_driver.engine.fit import type_and_mode_allowed, uuid_allowed
from dra_driver.engine.requests import DeviceFilters
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import result_refusal
from dra_driver.objects.dra_vendors import NVIDIA, DraVendor, dra_vendor
from kubeletplugin.gpus import GpuInfo
from libvgpu.container_edits import CorePolicy


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    """A published device: its GPU and the capacity offered for sharing."""

    gpu: GpuInfo
    memory_bytes: int
    cores: int
    shares: int = 1
    """Concurrent shares the device takes (the slice's `shares` capacity); read by
    mixed mode's check, where legacy pods take slots of the same GPU."""
    published: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The device's capacities as the slice publishes them, requestPolicy included:
    a result kube-scheduler's rule refuses on them is refused (empty: not checked)."""


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


class OptOutAuthority(StrEnum):
    """Who allowed an honoured opt-out, as the claim's event names it."""

    CLASS_CONFIG = "DeviceClass config"
    CLASS_SWITCH = "class allowClaimOptOut"
    DRIVER_FLAG = "--allow-claim-opt-out"


@dataclass(frozen=True, slots=True)
class HonouredOptOut:
    """An opt-out in effect: the wire path of the field that set it, and who allowed it."""

    path: str
    allowed_by: OptOutAuthority


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One of the driver's allocation config entries, parsed."""

    path: str
    """Wire path of its parameters: `status.allocation.devices.config[i].opaque.parameters`."""
    from_class: bool
    requests: frozenset[str]
    """The requests it applies to; empty means every request."""
    config: VGPUConfig


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
    honoured_opt_outs: tuple[HonouredOptOut, ...] = ()
    """The opt-outs in effect: the prepared share runs with (part of) enforcement off."""

    def opt_out_message(self) -> str:
        """What the user reads on the claim when its opt-outs were ignored."""
        return (
            f"claim {self.namespace}/{self.name} ({self.uid}): "
            f"{', '.join(self.ignored_opt_outs)} ignored: turning HAMi-core's enforcement "
            "off is the administrator's decision, honoured from the DeviceClass's config "
            "(or from claims when the class's config sets allowClaimOptOut or the kubelet "
            "plugin runs with --allow-claim-opt-out); the limits stay"
        )

    def enforcement_off_message(self) -> str:
        """What the user reads on the claim when an opt-out was honoured."""
        fields = ", ".join(f"{o.path} (allowed by {o.allowed_by})" for o in self.honoured_opt_outs)
        effect = (
            "libvgpu.so is not preloaded, so no memory or SM limit holds"
            if self.disable_control
            else "SM throttling is off; the memory limits hold"
        )
        return (
            f"claim {self.namespace}/{self.name} ({self.uid}): HAMi-core enforcement "
            f"disabled by {fields}: {effect}"
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
    configs = _configs(allocated.get("config") or [], driver, who)
    grants = []
    uncharged = []
    effective: list[VGPUConfig] = []
    ignored: dict[str, None] = {}
    setters: list[dict[str, HonouredOptOut]] = []
    for position, result in enumerate(results):
        where = f"status.allocation.devices.results[{position}]"
        name = result.get("device") or ""
        capacity = devices.get(name)
        if capacity is None:
            raise InvalidParameterError(
                f"{where}.device", f"claim {who}: device {name!r} is not published by this node"
            )
        request = result.get("request") or ""
        refusal = result_refusal(claim, result, capacity.published) if capacity.published else None
        if refusal is not None:
            raise InvalidParameterError(
                where, f"claim {who}: request {request} on device {name}: {refusal}"
            )
        config, dropped, set_by = _request_config(configs, request, allow_claim_opt_out)
        effective.append(config)
        ignored.update(dict.fromkeys(dropped))
        setters.append(set_by)
        grant, mismatch = _grant(result, capacity, config, where, who)
        grants.append(grant)
        if mismatch is not None:
            uncharged.append(mismatch)
    _refuse_broken_filters(grants, effective, configs, who)
    policy = next(
        (c.core_limit_policy for c in effective if c.core_limit_policy != "default"), None
    )
    priority = next((c.priority for c in effective if c.priority is not None), None)
    in_effect = {"disableControl": any(c.disable_control for c in effective)}
    in_effect["coreLimitPolicy"] = policy == "disable"
    honoured = {
        setter: None for set_by in setters for name, setter in set_by.items() if in_effect[name]
    }
    return ClaimPlan(
        uid=metadata.get("uid") or "",
        namespace=metadata.get("namespace") or "",
        name=metadata.get("name") or "",
        grants=tuple(grants),
        policy=CorePolicy(policy) if policy else CorePolicy.DEFAULT,
        priority=priority,
        disable_control=in_effect["disableControl"],
        uncharged=tuple(uncharged),
        ignored_opt_outs=tuple(ignored),
        honoured_opt_outs=tuple(honoured),
    )


def base_request(request: str) -> str:
    """The claim's request a result belongs to: `main` for a `firstAvailable` result
    `main/sub`, the name containers (`resources.claims[].request`) and configs use."""
    return request.split("/", 1)[0]


def _in(scope: frozenset[str], request: str) -> bool:
    """Config scoping: empty = every request; `main/sub` results match `main`."""
    return not scope or request in scope or base_request(request) in scope


def _configs(entries: Sequence[Mapping[str, Any]], driver: str, who: str) -> list[ConfigEntry]:
    """The driver's config entries, parsed; a class entry may set class-only fields."""
    parsed = []
    for position, entry in enumerate(entries):
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        path = f"status.allocation.devices.config[{position}].opaque.parameters"
        from_class = entry.get("source", "") == "FromClass"
        try:
            config = parse_vgpu_config(opaque.get("parameters") or {}, path, from_class=from_class)
        except VGPUConfigError as error:
            raise InvalidParameterError(path, f"claim {who}: {error}") from None
        parsed.append(ConfigEntry(path, from_class, frozenset(entry.get("requests") or ()), config))
    return parsed


def _request_config(
    entries: Sequence[ConfigEntry], request: str, allow_claim_opt_out: bool
) -> tuple[VGPUConfig, tuple[str, ...], dict[str, HonouredOptOut]]:
    """The request's merged config (class entries first), the wire paths of the claim
    opt-outs dropped for it, and, per opt-out in effect, the entry that set it last."""
    from_class = [e for e in entries if e.from_class and _in(e.requests, request)]
    from_claim = [e for e in entries if not e.from_class and _in(e.requests, request)]
    if merge_configs([e.config for e in from_class], []).allow_claim_opt_out:
        claim_authority: OptOutAuthority | None = OptOutAuthority.CLASS_SWITCH
    elif allow_claim_opt_out:
        claim_authority = OptOutAuthority.DRIVER_FLAG
    else:
        claim_authority = None
    ordered = list(from_class)
    dropped: list[str] = []
    for entry in from_claim:
        if claim_authority is None:
            dropped += [f"{entry.path}.{name}" for name in enforcement_opt_outs(entry.config)]
            ordered.append(replace(entry, config=without_opt_outs(entry.config)))
        else:
            ordered.append(entry)
    config = merge_configs([e.config for e in ordered], [])
    set_by: dict[str, HonouredOptOut] = {}
    for name in enforcement_opt_outs(config):
        setter = next(e for e in reversed(ordered) if name in explicit_wire_fields(e.config))
        authority = OptOutAuthority.CLASS_CONFIG if setter.from_class else claim_authority
        assert authority is not None, "a claim's opt-outs are dropped unless allowed"
        set_by[name] = HonouredOptOut(f"{setter.path}.{name}", authority)
    return config, tuple(dropped), set_by


SELECTOR_HINT = (
    "kube-scheduler reads no VGPUConfig: where it allocates, select GPUs with a CEL "
    "selector on device.attributes['vgpu.hami.io'].uuid or .type in the request"
)
NUMA_HINT = (
    "kube-scheduler reads no VGPUConfig: where it allocates, constrain the request "
    "with matchAttribute: vgpu.hami.io/numa"
)


def _refuse_broken_filters(
    grants: Sequence[DeviceGrant],
    configs: Sequence[VGPUConfig],
    entries: Sequence[ConfigEntry],
    who: str,
) -> None:
    """Each result on a GPU its request's filters allow (HAMi's CheckType and CheckUUID,
    the engine's own checks), and under numaBind each request's GPUs on one NUMA node."""
    numa: dict[str, set[int]] = {}
    for grant, config in zip(grants, configs, strict=True):
        breaches = _filter_breaches(config, grant.gpu)
        if breaches:
            name, reason = breaches[0]
            raise InvalidParameterError(
                _setter_path(entries, grant.request, name),
                f"claim {who}: device {grant.device} of request {grant.request!r}: "
                f"{reason}; the allocation breaks the filter, so it is not prepared "
                f"({SELECTOR_HINT})",
            )
        if config.numa_bind:
            numa.setdefault(grant.request, set()).add(grant.gpu.numa_node)
    for request, nodes in numa.items():
        if len(nodes) > 1:
            raise InvalidParameterError(
                _setter_path(entries, request, "numaBind"),
                f"claim {who}: request {request!r} has GPUs on NUMA nodes "
                f"{', '.join(map(str, sorted(nodes)))}; the allocation breaks numaBind, so it "
                f"is not prepared ({NUMA_HINT})",
            )


def _filter_breaches(config: VGPUConfig, gpu: GpuInfo) -> list[tuple[str, str]]:
    """(wire name, reason) of each uuid or type filter of the config the GPU fails."""
    uuid = gpu.uuid
    device_type = dra_vendor(gpu.vendor).device_type(gpu.product_name)
    use_uuids, no_use_uuids = tuple(config.use_uuids or ()), tuple(config.no_use_uuids or ())
    use_types, no_use_types = tuple(config.use_types or ()), tuple(config.no_use_types or ())
    checks = (
        (
            "useUUIDs",
            uuid_allowed(DeviceFilters(use_uuids=use_uuids), uuid),
            f"{uuid} is not one of {', '.join(use_uuids)}",
        ),
        (
            "noUseUUIDs",
            uuid_allowed(DeviceFilters(no_use_uuids=no_use_uuids), uuid),
            f"{uuid} is one of {', '.join(no_use_uuids)}",
        ),
        (
            "useTypes",
            type_and_mode_allowed(DeviceFilters(use_types=use_types), device_type, ""),
            f"type {device_type} contains none of {', '.join(use_types)}",
        ),
        (
            "noUseTypes",
            type_and_mode_allowed(DeviceFilters(no_use_types=no_use_types), device_type, ""),
            f"type {device_type} contains one of {', '.join(no_use_types)}",
        ),
    )
    return [(name, reason) for name, allowed, reason in checks if not allowed]


def _setter_path(entries: Sequence[ConfigEntry], request: str, wire_name: str) -> str:
    """Wire path of the field in the entry whose value the request's merged config took:
    the last that sets it, class entries before claim entries, as `_request_config` merges."""
    ordered = [e for e in entries if e.from_class] + [e for e in entries if not e.from_class]
    setter = next(
        e
        for e in reversed(ordered)
        if _in(e.requests, request) and wire_name in explicit_wire_fields(e.config)
    )
    return f"{setter.path}.{wire_name}"


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


def plan_vendor(plan: ClaimPlan) -> DraVendor:
    """The family of the claim's cards on this node; a node's plugin serves one family, so
    cards of two families in one claim's results mean a broken inventory."""
    found = {grant.gpu.vendor for grant in plan.grants}
    if len(found) > 1:
        raise InvalidParameterError(
            "status.allocation.devices.results",
            f"claim {plan.namespace}/{plan.name} ({plan.uid}) has cards of several vendors "
            f"here ({', '.join(sorted(found))}); one plugin serves one family",
        )
    return dra_vendor(found.pop() if found else NVIDIA.id)
