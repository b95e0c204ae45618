"""Whether a tenant's pod that runs still has its limits: the decision, apart from the I/O.

A pod the API server, the policies and the webhook let through may still try
to lift its share through HAMi-core's variables (its env, an envFrom of a
ConfigMap) or its claim's opt-out. What counts is the env the container ends
up with: in DRA the CDI spec's env replaces the container's own (the runtime
applies CDI edits last), in device-plugin mode the container's env wins over
what Allocate returned. A variable the tenant set that the driver overrides
is neutralised (shown as pod value -> pinned value); one whose value stands
is a bypass. A claim opt-out is neutralised when the kubelet plugin dropped it
(`VGPUConfigOptOutIgnored`) and a bypass when it was honoured. A pod that runs
with none of these held back got what it tried: ALLOWED.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.objects.enforcement_events import ENFORCEMENT_DISABLED, OPT_OUT_IGNORED
from libvgpu.settings import (
    DISABLE_CONTROL_ENV,
    LIMIT_ENV_FAMILIES,
    OPT_OUT_ENV,
    PINNED_ENV,
    TASK_PRIORITY_ENV,
)
from simulator.attempts import Outcome

SINGLE_KNOBS = frozenset({*OPT_OUT_ENV, *PINNED_ENV, TASK_PRIORITY_ENV})
CONTAINER_KINDS = ("initContainers", "containers")


def is_hamicore_variable(name: str) -> bool:
    """Whether HAMi-core reads `name` to set or lift a limit."""
    return name in SINGLE_KNOBS or any(
        name == family or name.startswith(f"{family}_") for family in LIMIT_ENV_FAMILIES
    )


def container_env(
    container: Mapping[str, Any], config_maps: Mapping[str, Mapping[str, str]]
) -> dict[str, str]:
    """The env a container spec asks for, as kubelet builds it: envFrom first (with its
    prefix), then env, a later entry winning; values from ConfigMap keys resolved."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        reference = source.get("configMapRef") or {}
        for key, value in (config_maps.get(reference.get("name", "")) or {}).items():
            env[f"{source.get('prefix', '')}{key}"] = str(value)
    for item in container.get("env") or []:
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        reference = (item.get("valueFrom") or {}).get("configMapKeyRef") or {}
        data = config_maps.get(reference.get("name", "")) or {}
        if reference.get("key") in data:
            env[item["name"]] = str(data[reference["key"]])
    return env


def _containers(pod: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    spec = pod.get("spec") or {}
    return {c["name"]: c for kind in CONTAINER_KINDS for c in spec.get(kind) or []}


@dataclass(frozen=True, slots=True)
class RunningPod:
    """What the runner found out about a tenant's pod that runs."""

    submitted: Mapping[str, Any]
    """The pod as the tenant sent it (what it tried)."""
    stored: Mapping[str, Any]
    """The pod as stored (after the webhook's mutation)."""
    driver_env: Mapping[str, Mapping[str, str]]
    """Per container: the env the driver gives (the CDI spec's, or Allocate's)."""
    driver_env_wins: bool
    """True in DRA (CDI edits replace the container's env), False in device-plugin mode."""
    config_maps: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    claim_events: Sequence[Mapping[str, Any]] = ()
    """Events about the pod's claims (the kubelet plugin's opt-out verdicts)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    reason: str
    details: list[str]


def judge_running_pod(pod: RunningPod) -> Verdict:
    """Neutralised when everything the pod tried is held back, ALLOWED when anything stands."""
    held, stands = [], []
    stored = _containers(pod.stored)
    for name, container in _containers(pod.submitted).items():
        tried = {
            key: value
            for key, value in container_env(container, pod.config_maps).items()
            if is_hamicore_variable(key)
        }
        driver = pod.driver_env.get(name) or {}
        own = container_env(stored.get(name) or container, pod.config_maps)
        effective = {**own, **driver} if pod.driver_env_wins else {**driver, **own}
        for key, value in sorted(tried.items()):
            final = effective.get(key)
            if final != value or (pod.driver_env_wins and key in driver):
                held.append(f"{name} {key}: {value} -> {final if final is not None else 'unset'}")
            else:
                stands.append(f"{name} {key}={value} stands")
        if effective.get(DISABLE_CONTROL_ENV, "").lower() == "true":
            stands.append(f"{name} {DISABLE_CONTROL_ENV}=true: HAMi-core enforces nothing")
    for event in pod.claim_events:
        claim = (event.get("involvedObject") or {}).get("name", "")
        if event.get("reason") == OPT_OUT_IGNORED:
            held.append(f"claim {claim}: {OPT_OUT_IGNORED}: {event.get('message', '')}")
        elif event.get("reason") == ENFORCEMENT_DISABLED:
            stands.append(f"claim {claim}: {ENFORCEMENT_DISABLED}: {event.get('message', '')}")
    if stands:
        return Verdict(Outcome.ALLOWED, "; ".join(stands), held + stands)
    if held:
        return Verdict(
            Outcome.NEUTRALISED, "the pod runs, its limits hold: " + "; ".join(held), held
        )
    return Verdict(
        Outcome.ALLOWED, "the pod runs and nothing it tried was refused, pinned or dropped", []
    )
