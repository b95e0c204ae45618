"""Vastai (request Type `Vastai`) and the `vastai:` section of device-config.yaml.

Where it differs from NVIDIA (reference/hami-vendors.md, HAMi's
`pkg/device/vastai`): whole devices only (`{count, memory 0, 100 %, 0 cores}`);
the register annotation `hami.io/node-va-register` is JSON only and every
device counts 100 cores; the handshake is `hami.io/node-handshake-va`; the
uuid pair is `vastaitech.com/use-gpuuuid` / `vastaitech.com/nouse-gpuuuid`;
the pod keys are `hami.io/Vastai-devices-*` (capital V); and the Fit checks
no memory or cores: health, type, uuid, free slot, mutex. In **die mode**
(the first device's `customInfo.DeviceStrategy` is `die`) a card (AIC) holds
several dies: Fit collects every die that passes, takes the first when one
is asked for and otherwise fills from the AIC with most candidates first
(ties: the AIC seen first; HAMi leaves them to Go's map order), and under
the mutex policy a die whose sibling is in use is refused. ScoreNode adds,
per container, the share of its dies on its most used AIC. Shared lock.
Biren's Fit is this Fit without dies.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace

from pydantic import Field

from api.hami_annotations import RegisteredDevice, decode_node_devices_json
from dra_driver.engine import reasons
from dra_driver.engine.grants import ContainerGrants, Grant, Slot
from dra_driver.engine.model import Node
from dra_driver.engine.requests import ContainerRequest, DeviceRequest
from dra_driver.engine.vendor_backends.adapters import ConfigSection, vendor_keys, vendor_resources
from dra_driver.engine.vendor_backends.base import BackendFamily, VendorBackend
from dra_driver.engine.vendor_backends.fit_checks import sharing_refusal
from dra_driver.engine.vendors import FitContext, VendorAdapter

VASTAI = "Vastai"
DEVICE_CORES = 100
"""Registered for scoring only, whatever the plugin says."""
STRATEGY = "DeviceStrategy"
DIE = "die"
AIC = "AIC"


class WholeDeviceConfig(ConfigSection):
    """A section with only `resourceCountName` (Go `VastaiConfig`, `BirenConfig`)."""

    resource_count_name: str = Field("", alias="resourceCountName")


def is_die_mode(slots: Sequence[Slot]) -> bool:
    """HAMi's isDieMode: the node's first device says `DeviceStrategy: die`."""
    return bool(slots) and slots[0].device.custom_info.get(STRATEGY) == DIE


def aic_of(info: Mapping[str, object]) -> str | None:
    value = info.get(AIC)
    return value if isinstance(value, str) else None


def fit_whole_devices(
    slots: Sequence[Slot],
    request: DeviceRequest,
    ctx: FitContext,
    earlier: Sequence[ContainerGrants],
    *,
    vendor: str = VASTAI,
    dies: bool = True,
) -> tuple[list[Grant] | None, str]:
    """Vastai's (and, with `dies` off, Biren's) Fit over the tail-first walk."""
    die_mode = dies and is_die_mode(slots)
    occupied = (
        {aic_of(s.device.custom_info) for s in slots if s.used > 0} - {None}
        if die_mode and ctx.policy.mutex
        else set()
    )
    failed: Counter[str] = Counter()
    picks: list[Grant] = []
    for slot in reversed(slots):
        device = slot.device
        if not device.healthy:
            failed[reasons.CARD_NOT_HEALTH] += 1
        elif request.vendor != vendor:
            failed[reasons.CARD_TYPE_MISMATCH] += 1
        elif refusal := sharing_refusal(slot, request.filters, ctx.policy.mutex):
            failed[refusal] += 1
        elif ctx.policy.mutex and aic_of(device.custom_info) in occupied:
            failed[reasons.EXCLUSIVE_DEVICE_ALLOCATE_CONFLICT] += 1
        else:
            picks.append(Grant(device.id, request.vendor, 0, request.cores, device.index))
            if not die_mode and len(picks) == request.count:
                return picks, ""
    if die_mode and len(picks) >= request.count:
        infos = {s.device.id: s.device.custom_info for s in slots}
        return best_combination(request.count, picks, infos), ""
    if picks:
        failed[reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST] = len(picks)
    return None, reasons.format_reason(failed, len(slots))


def best_combination(
    wanted: int, picks: Sequence[Grant], infos: Mapping[str, Mapping[str, object]]
) -> list[Grant]:
    """One die: the first candidate. Several: AICs by candidate count, most first,
    each emptied in candidate order until enough (dies without an AIC are skipped)."""
    if wanted == 1 or len(picks) == wanted:
        return list(picks[:wanted])
    groups: dict[str, list[Grant]] = {}
    for grant in picks:
        aic = aic_of(infos.get(grant.uuid, {}))
        if aic is not None:
            groups.setdefault(aic, []).append(grant)
    ordered = sorted(groups.values(), key=len, reverse=True)
    return [grant for group in ordered for grant in group][:wanted]


def aic_score(
    node: Node,
    grants: Sequence[ContainerGrants],
    container_requests: Sequence[ContainerRequest],
    node_policy: str,
) -> float:
    """HAMi's ScoreNode: per container, most dies on one AIC / its dies; 0 as soon
    as a granted device is not a die or names no AIC."""
    infos = {device.id: device.custom_info for device in node.devices}
    score = 0.0
    for container in grants:
        mine = [grant for grant in container if grant.vendor == VASTAI]
        if not mine:
            continue
        per_aic: Counter[str] = Counter()
        for grant in mine:
            info = infos.get(grant.uuid, {})
            aic = aic_of(info)
            if info.get(STRATEGY, DIE) != DIE or aic is None:
                return 0.0
            per_aic[aic] += 1
        score += max(per_aic.values()) / len(mine)
    return score


def whole_device_adapter(
    name: str, count_resource: str, uuid_domain: str, fit: object, score: object = None
) -> VendorAdapter:
    """A whole-device vendor: NVIDIA's reading gives `{count, 0, 100 %, 0}`."""
    return VendorAdapter(
        name=name,
        common_word=name,
        resources=vendor_resources(count_resource),
        annotations=vendor_keys(
            use_uuids=f"{uuid_domain}/use-gpuuuid",
            no_use_uuids=f"{uuid_domain}/nouse-gpuuuid",
            to_allocate=f"hami.io/{name}-devices-to-allocate",
            allocated=f"hami.io/{name}-devices-allocated",
        ),
        default_count=0,
        fit=fit,  # type: ignore[arg-type]
        score=score,  # type: ignore[arg-type]
    )


class WholeDeviceBackend(VendorBackend):
    """A JSON-registered whole-device vendor (Vastai, Biren): 100 cores per device."""

    def decode_register(self, value: str) -> list[RegisteredDevice]:
        assert self.register_key is not None
        decoded = decode_node_devices_json(value, self.register_key)
        return [replace(device, devcore=DEVICE_CORES) for device in decoded]


def vastai_backend(config: WholeDeviceConfig) -> WholeDeviceBackend:
    return WholeDeviceBackend(
        whole_device_adapter(
            VASTAI, config.resource_count_name, "vastaitech.com", fit_whole_devices, aic_score
        ),
        register_key="hami.io/node-va-register",
        handshake_key="hami.io/node-handshake-va",
    )


FAMILY = BackendFamily(
    section="vastai",
    model=WholeDeviceConfig,
    build=lambda config: (vastai_backend(config),),
)
