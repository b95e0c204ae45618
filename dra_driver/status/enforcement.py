"""Whether HAMi-core's limits hold for a share, and why not: the marks `dra-driver status` shows.

These rules are libvgpu's, so they mark shares of NVIDIA cards only; a share of
another family's card is marked from its `dra_vendors` entry (`model.py`).

With enforcement off a share's memory and cores are accounting only: libvgpu
does not hold the holder to them, so the card's other tenants are not
protected from it. What turns it off, and what shows that it did, differs by mode:

- DRA: a `VGPUConfig` opt-out (`disableControl`, `coreLimitPolicy: disable`) in
  the claim's allocated config. The configs in scope of each result's request
  are merged as the kubelet plugin merges them, class first, so a claim config
  that sets `disableControl: false` overrides its class's `true` here too. The
  plugin applies a claim's opt-outs to every device it prepares on that node, so
  one opted-out request marks all of the claim's shares in that pool. An opt-out
  from the DeviceClass always holds; one from the claim only when the plugin
  allows it (the class's `allowClaimOptOut`, or its `--allow-claim-opt-out`), and
  its event on the claim says which happened: the newest of ENFORCEMENT_DISABLED
  (off) and OPT_OUT_IGNORED (limits kept) since the allocation wins; before either
  the opt-out is only requested. A config that does not parse leaves the share
  unmarked (the claim already has an error event).
- Legacy: a GPU container's own env, read as HAMi's device plugin reads it (the
  last literal value of a name wins); the pod's device annotation lists one entry
  per container, init containers first, so each GPU is marked by the containers
  that hold it.

Pure: plain API objects in, marks out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from api.hami_annotations.go_compat import annotation_is_true
from api.vgpu_config import (
    VGPUConfig,
    VGPUConfigError,
    enforcement_opt_outs,
    merge_configs,
    parse_vgpu_config,
    without_opt_outs,
)
from dra_driver.engine.vendors import NVIDIA
from dra_driver.objects.enforcement_env import (
    CORE_POLICY_DISABLE,
    CORE_POLICY_ENV,
    DISABLE_CONTROL_ENV,
)
from dra_driver.objects.enforcement_events import ENFORCEMENT_DISABLED, OPT_OUT_IGNORED

FROM_CLASS = "FromClass"
NOT_PREPARED = "opt-out requested, not prepared yet"
LIMITS_KEPT = "opt-out ignored, limits kept: "
_REPORTS = frozenset({ENFORCEMENT_DISABLED, OPT_OUT_IGNORED})
_OLDEST = datetime.min.replace(tzinfo=UTC)
_WIRE_SETTINGS = {"disableControl": "disableControl", "coreLimitPolicy": "coreLimitPolicy: disable"}


@dataclass(frozen=True, slots=True)
class Enforcement:
    """`enforced` false: the limits do not hold. `note`: why, or what is still undecided."""

    enforced: bool = True
    note: str = ""


ENFORCED = Enforcement()

ClaimKey = tuple[str, str]
"""(namespace, name) of a ResourceClaim."""


def opt_out_reports(events: Iterable[Mapping[str, Any]]) -> dict[ClaimKey, list[Mapping[str, Any]]]:
    """The kubelet plugin's verdicts on claims' opt-outs, per claim, in list order."""
    reports: dict[ClaimKey, list[Mapping[str, Any]]] = {}
    for event in events:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if event.get("reason") not in _REPORTS or involved.get("kind") != "ResourceClaim":
            continue
        namespace = involved.get("namespace") or (event.get("metadata") or {}).get("namespace")
        reports.setdefault((namespace or "", involved.get("name") or ""), []).append(event)
    return reports


def claim_enforcement(
    claim: Mapping[str, Any], driver: str, reports: Sequence[Mapping[str, Any]]
) -> dict[str, Enforcement]:
    """Pool -> the enforcement of the claim's shares there; pools left out are enforced.

    `reports` are the claim's entries of `opt_out_reports`.
    """
    allocation = (claim.get("status") or {}).get("allocation") or {}
    devices = allocation.get("devices") or {}
    configs = _driver_configs(devices.get("config") or [], driver)
    if not configs:
        # No config of this driver (most claims): nothing can opt out, and merging
        # none per request would only build default configs.
        return {}
    requested: dict[str, list[str]] = {}
    for result in devices.get("results") or []:
        if result.get("driver") == driver:
            requested.setdefault(result.get("pool") or "", []).append(result.get("request") or "")
    marks = {}
    for pool, requests in requested.items():
        mark = _pool_enforcement(claim, requests, configs, reports, allocation)
        if mark != ENFORCED:
            marks[pool] = mark
    return marks


def legacy_opt_outs(pod: Mapping[str, Any]) -> list[str]:
    """Per container, init containers first (the order of HAMi's device annotation):
    why its limits are off, or "" where they hold."""
    spec = pod.get("spec") or {}
    return [
        _container_opt_out(container)
        for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    ]


def _container_opt_out(container: Mapping[str, Any]) -> str:
    limits = (container.get("resources") or {}).get("limits") or {}
    if NVIDIA.resources.count not in limits:
        return ""
    env = {
        str(item["name"]): str(item["value"])
        for item in container.get("env") or []
        if isinstance(item, Mapping) and "name" in item and "value" in item
    }
    settings = []
    if annotation_is_true(env.get(DISABLE_CONTROL_ENV)):
        settings.append(f"{DISABLE_CONTROL_ENV}={env[DISABLE_CONTROL_ENV]}")
    if env.get(CORE_POLICY_ENV, "").lower() == CORE_POLICY_DISABLE:
        settings.append(f"{CORE_POLICY_ENV}={env[CORE_POLICY_ENV]}")
    if not settings:
        return ""
    return f"container {container.get('name', '')} sets {' and '.join(settings)}"


def _driver_configs(
    entries: Iterable[Mapping[str, Any]], driver: str
) -> list[tuple[str, frozenset[str], VGPUConfig]] | None:
    """(source, requests, config) of the driver's configs; None when one does not parse."""
    parsed = []
    for entry in entries:
        opaque = entry.get("opaque") or {}
        if opaque.get("driver") != driver:
            continue
        source = entry.get("source") or ""
        try:
            config = parse_vgpu_config(
                opaque.get("parameters") or {}, from_class=source == FROM_CLASS
            )
        except VGPUConfigError:
            return None
        parsed.append((source, frozenset(entry.get("requests") or ()), config))
    return parsed


def _in(scope: frozenset[str], request: str) -> bool:
    """Config scoping: empty = every request; a result `main/sub` belongs to `main`."""
    return not scope or request in scope or request.split("/", 1)[0] in scope


def _pool_enforcement(
    claim: Mapping[str, Any],
    requests: Sequence[str],
    configs: Sequence[tuple[str, frozenset[str], VGPUConfig]],
    reports: Sequence[Mapping[str, Any]],
    allocation: Mapping[str, Any],
) -> Enforcement:
    """One mark for the pool: the plugin prepares a claim's devices on a node as one plan."""
    claim_opt_out = False
    for request in requests:
        classes = [
            c for source, scope, c in configs if source == FROM_CLASS and _in(scope, request)
        ]
        own = [c for source, scope, c in configs if source != FROM_CLASS and _in(scope, request)]
        held = enforcement_opt_outs(merge_configs(classes, [without_opt_outs(c) for c in own]))
        if held:
            settings = " and ".join(_WIRE_SETTINGS[name] for name in held)
            return Enforcement(
                False, f"DeviceClass {_device_class(claim, request)} config sets {settings}"
            )
        claim_opt_out = claim_opt_out or bool(enforcement_opt_outs(merge_configs(classes, own)))
    if not claim_opt_out:
        return ENFORCED
    return _reported(claim, reports, allocation)


def _reported(
    claim: Mapping[str, Any], reports: Sequence[Mapping[str, Any]], allocation: Mapping[str, Any]
) -> Enforcement:
    """The newest verdict since the allocation. One prepare that honours the opt-out of
    one request and drops another's writes both, Ignored first, often within one
    second (events carry whole seconds): at equal stamps Disabled wins, as the plugin
    turns enforcement off for the whole claim then."""
    uid = (claim.get("metadata") or {}).get("uid")
    since = _parse_time(allocation.get("allocationTimestamp"))
    newest: tuple[tuple[datetime, bool], Mapping[str, Any]] | None = None
    for event in reports:
        involved = event.get("involvedObject") or event.get("regarding") or {}
        if uid and involved.get("uid") and involved["uid"] != uid:
            continue
        stamp = _event_time(event)
        rank = (stamp, event.get("reason") == ENFORCEMENT_DISABLED)
        if stamp >= since and (newest is None or rank >= newest[0]):
            newest = (rank, event)
    if newest is None:
        return Enforcement(True, NOT_PREPARED)
    event = newest[1]
    message = str(event.get("message") or event.get("note") or "")
    if event.get("reason") == ENFORCEMENT_DISABLED:
        return Enforcement(False, message or ENFORCEMENT_DISABLED)
    return Enforcement(True, LIMITS_KEPT + message)


def _device_class(claim: Mapping[str, Any], request: str) -> str:
    """The DeviceClass of a result's request: `exactly`, or the `firstAvailable` entry `sub`."""
    main, _, sub = request.partition("/")
    unknown = f"of request {request}"
    for entry in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        if entry.get("name") != main:
            continue
        options = (entry.get("firstAvailable") or []) if sub else [entry.get("exactly") or {}]
        for option in options:
            if not sub or option.get("name") == sub:
                return str(option.get("deviceClassName") or unknown)
    return unknown


def _event_time(event: Mapping[str, Any]) -> datetime:
    series = event.get("series") or {}
    return _parse_time(
        event.get("lastTimestamp")
        or series.get("lastObservedTime")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
    )


def _parse_time(value: Any) -> datetime:
    """RFC 3339 Time or MicroTime; missing or malformed counts as oldest."""
    try:
        stamp = datetime.fromisoformat(str(value))
    except ValueError:
        return _OLDEST
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
