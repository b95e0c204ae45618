"""A HAMi pod's device requests, translated into the DRA claim that asks for the same shares.

Migration from the device plugin to DRA must not change what a workload gets:
the same vendor, the same number of cards, the same memory and cores per
card, the same card filters. So this module does not read resources itself:
each container is read by the legacy scheduler's own request reading
(`pod_workloads.container_request`, which calls every vendor backend's
`read_request` and NVIDIA's webhook defaults), and the engine's
`DeviceRequest` it yields is written back out as one claim request of the
family's DeviceClass (`<family>.vgpu.hami.io`):

- count -> `exactly.count`; MiB -> `capacity.requests.memory`; cores percent
  -> `capacity.requests.cores` (AWS Neuron counts NeuronCores, two per device
  in DRA mode, so one core is 50 %, with half the card's memory, which HAMi does
  not account for Neuron and DRA always does); a memory percentage -> the VGPUConfig's
  `memoryPercentage`; whole-card families (`DraVendor.exclusive`) take only a
  count, as every share of theirs is the whole card;
- use/nouse type and uuid annotations -> CEL selectors on the published
  `type` and `uuid` attributes, with HAMi's rules (case-insensitive substring
  of the type, exact uuid), so kube-scheduler and the controller both see them;
  a per-chip legacy backend (Ascend, Iluvatar) adds a selector for its chip;
- numa-bind, `nvidia.com/priority`, the GPU and node policy annotations ->
  the VGPUConfig fields of the same meaning (opaque config per request).

Whatever DRA cannot express yet (a vendor without a class, MIG/MPS modes,
Metax sGPU's qos annotations, a request HAMi itself drops) is an
`Untranslatable` with the field and the reason; a pod with any of them is not
migrated, never migrated with a part left out. Pure: plain dicts in and out,
so the webhook, `dra-driver migrate plan` and the tests share one answer.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from api import hami_annotations as keys
from api.vgpu_config import API_VERSION, KIND, VGPUConfigError, parse_vgpu_config
from dra_driver.engine.requests import MEMORY_PERCENT_UNSET, DeviceRequest
from dra_driver.engine.vendor_backends.base import VendorBackend
from dra_driver.engine.vendor_backends.reading import resource_value
from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.objects.dra_vendors import DRIVER, DraVendor, dra_vendor, vendor_of_request_type
from dra_driver.objects.pod_workloads import MATCHES_NOTHING, container_request

MIGRATE_LABEL = "vgpu.hami.io/migrate"
"""Namespace label or pod annotation, value `"true"`: the pod's HAMi requests become a claim."""
MIGRATED_ANNOTATION = "vgpu.hami.io/migrated-to"
"""Set on a migrated pod: the ResourceClaimTemplate its claim is made from."""
MIGRATED_TEMPLATE_LABEL = "vgpu.hami.io/migrated"
"""On every template the migration creates, so they can be listed and cleaned up."""
POD_CLAIM_NAME = "vgpu-migrated"
"""The pod's `spec.resourceClaims[].name` the migrated containers reference."""
TEMPLATE_PREFIX = "vgpu-migrated-"
HAMI_CORE_MODE = "hami-core"
NEURON_CORES_PER_DEVICE = 2
"""NeuronCores per device as DRA mode publishes them (`dra_vendors`: 50 % each)."""
PER_CHIP_FAMILIES: Mapping[str, str] = {"AscendBackend": "ascend", "IluvatarBackend": "iluvatar"}
"""Legacy backends configured per chip (request type = chip name) and their DRA family."""
LEGACY_ONLY_TYPES: Mapping[str, str] = {
    "kunlun": "xpu",
}
"""Legacy request types whose cards another family's class serves (Kunlunxin whole cards
are vXPU cards asked whole)."""


@dataclass(frozen=True, slots=True)
class Untranslatable:
    """Something of the pod DRA cannot express yet: the field and why."""

    field: str
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


@dataclass(frozen=True, slots=True)
class ClaimRequestPlan:
    """One claim request: one vendor's devices of one container."""

    name: str
    container: str
    """The container's field path (`spec.containers[0]`)."""
    device_class: str
    count: int
    memory_mib: int | None = None
    cores: int | None = None
    selectors: tuple[str, ...] = ()
    config: Mapping[str, Any] = field(default_factory=dict)
    """VGPUConfig fields (wire names) beyond apiVersion/kind; empty: no opaque config."""

    def request(self) -> dict[str, Any]:
        """The `spec.devices.requests[]` entry."""
        exactly: dict[str, Any] = {
            "deviceClassName": self.device_class,
            "allocationMode": "ExactCount",
            "count": self.count,
        }
        capacity = {}
        if self.memory_mib is not None:
            capacity["memory"] = f"{self.memory_mib}Mi"
        if self.cores is not None:
            capacity["cores"] = str(self.cores)
        if capacity:
            exactly["capacity"] = {"requests": capacity}
        if self.selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in self.selectors]
        return {"name": self.name, "exactly": exactly}


@dataclass(frozen=True, slots=True)
class PodMigration:
    """What a pod would become: its claim requests, or why it cannot move yet."""

    requests: tuple[ClaimRequestPlan, ...]
    problems: tuple[Untranslatable, ...] = ()
    migrated_to: str | None = None
    """Set when the pod was migrated already (it holds the migration's claim and asks for
    nothing through HAMi): the ResourceClaimTemplate, or claim, that claim comes from."""

    @property
    def translatable(self) -> bool:
        return bool(self.requests) and not self.problems

    @property
    def needed(self) -> bool:
        """The pod asks for HAMi devices at all."""
        return bool(self.requests or self.problems)


def plan_migration(pod: Mapping[str, Any], backends: BackendRegistry) -> PodMigration:
    """Translate every container's HAMi requests (init containers first, as HAMi reads)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    vendors = backends.vendors()
    requests: list[ClaimRequestPlan] = []
    problems: list[Untranslatable] = []
    policy = _policy_config(annotations, problems)
    for kind, short in (("initContainers", "init"), ("containers", "ctr")):
        for position, container in enumerate(spec.get(kind) or []):
            where = f"spec.{kind}[{position}]"
            dropped: list[str] = []
            try:
                read = container_request(
                    container, annotations, vendors, where, True, dropped=dropped
                )
            except ValueError as error:
                problems.append(Untranslatable(where, str(error)))
                continue
            problems.extend(Untranslatable(where, reason) for reason in dropped)
            for request in read:
                backend = backends.get(request.vendor)
                assert backend is not None
                plan = _claim_request(
                    request, backend, container, annotations, f"{short}{position}", where, policy
                )
                if isinstance(plan, Untranslatable):
                    problems.append(plan)
                else:
                    requests.append(plan)
    claim = next(
        (c for c in spec.get("resourceClaims") or [] if c.get("name") == POD_CLAIM_NAME), None
    )
    if claim is not None and not (requests or problems):
        source = claim.get("resourceClaimTemplateName") or claim.get("resourceClaimName")
        return PodMigration((), migrated_to=str(source or POD_CLAIM_NAME))
    if claim is not None:
        problems.insert(
            0,
            Untranslatable("spec.resourceClaims", f"already has a claim named {POD_CLAIM_NAME!r}"),
        )
    return PodMigration(tuple(requests), tuple(problems))


def family_of(backend: VendorBackend) -> DraVendor | None:
    """The DRA family whose class serves a legacy backend's cards, or None."""
    per_chip = PER_CHIP_FAMILIES.get(type(backend).__name__)
    if per_chip is not None:
        return dra_vendor(per_chip)
    other = LEGACY_ONLY_TYPES.get(backend.name)
    if other is not None:
        return dra_vendor(other)
    return vendor_of_request_type(backend.name)


def _claim_request(
    request: DeviceRequest,
    backend: VendorBackend,
    container: Mapping[str, Any],
    annotations: Mapping[str, str],
    label: str,
    where: str,
    policy: Mapping[str, Any],
) -> ClaimRequestPlan | Untranslatable:
    family = family_of(backend)
    if family is None:
        return Untranslatable(
            f"{where}.resources.{backend.count_resource}",
            f"{backend.name} cards have no DRA DeviceClass of this driver yet",
        )
    if request.pod_facts:
        facts = ", ".join(key for key, _ in request.pod_facts)
        return Untranslatable(
            f"metadata.annotations[{facts}]", f"{backend.name}'s {facts} have no DRA equivalent yet"
        )
    filters = request.filters
    if filters.modes is not None and HAMI_CORE_MODE not in filters.modes:
        return Untranslatable(
            f"metadata.annotations[{backend.adapter.annotations.mode}]",
            f"{filters.modes!r}: DRA devices are shared through HAMi-core only (no MIG or MPS)",
        )
    name = f"{label}-{family.id}"
    config = dict(policy)
    memory_mib = cores = None
    if not family.exclusive:
        if request.memory_mib > 0:
            memory_mib = request.memory_mib
        elif request.memory_percent not in (MEMORY_PERCENT_UNSET, 100) and request.memory_percent:
            config["memoryPercentage"] = request.memory_percent
        cores = _cores(request, family)
        if cores is None:
            return Untranslatable(
                f"{where}.resources.{backend.adapter.resources.cores}",
                f"{request.cores} NeuronCores per device: DRA devices have "
                f"{NEURON_CORES_PER_DEVICE}",
            )
        if family.id == "neuron" and cores < 100:
            config["memoryPercentage"] = cores
    if filters.numa_bind:
        config["numaBind"] = True
    priority_name = backend.adapter.resources.priority
    priority = resource_value(container, priority_name or "")
    if priority is not None:
        try:
            config["priority"] = int(str(priority))
        except ValueError:
            return Untranslatable(f"{where}.resources.{priority_name}", "not a whole number")
    try:
        parse_vgpu_config({"apiVersion": API_VERSION, "kind": KIND, **config}, "config")
    except VGPUConfigError as error:
        return Untranslatable(where, f"no valid VGPUConfig: {error}")
    chip = backend.name if type(backend).__name__ in PER_CHIP_FAMILIES else None
    return ClaimRequestPlan(
        name=name,
        container=where,
        device_class=family.device_class,
        count=request.count,
        memory_mib=memory_mib,
        cores=cores or None,
        selectors=_selectors(request, chip),
        config=config,
    )


def _cores(request: DeviceRequest, family: DraVendor) -> int | None:
    """The `cores` percentage; None when it cannot be one (too many NeuronCores)."""
    if family.id != "neuron":
        return request.cores
    if request.cores == 0:
        return 100
    if request.cores > NEURON_CORES_PER_DEVICE:
        return None
    return request.cores * 100 // NEURON_CORES_PER_DEVICE


def _policy_config(
    annotations: Mapping[str, str], problems: list[Untranslatable]
) -> dict[str, Any]:
    config: dict[str, Any] = {}
    for key, wire in (
        (keys.GPU_SCHEDULER_POLICY, "gpuPolicy"),
        (keys.NODE_SCHEDULER_POLICY, "nodePolicy"),
    ):
        value = annotations.get(key)
        if value is None:
            continue
        try:
            parse_vgpu_config({"apiVersion": API_VERSION, "kind": KIND, wire: value}, wire)
        except VGPUConfigError as error:
            problems.append(Untranslatable(f"metadata.annotations[{key}]", str(error)))
            continue
        config[wire] = value
    return config


def _literal(text: str) -> str:
    """A CEL string literal (CEL's escapes are a superset of JSON's)."""
    return json.dumps(text)


def _selectors(request: DeviceRequest, chip: str | None) -> tuple[str, ...]:
    """HAMi's CheckType and CheckUUID as CEL over the published attributes."""
    attributes = f"device.attributes['{DRIVER}']"
    filters = request.filters

    def any_type(types: Sequence[str]) -> str:
        if MATCHES_NOTHING in types:
            return "false"
        return " || ".join(
            f"{attributes}.type.lowerAscii().contains({_literal(t.lower())})" for t in types
        )

    def uuid_in(uuids: Sequence[str]) -> str:
        if MATCHES_NOTHING in uuids:
            return "false"
        return f"{attributes}.uuid in [{', '.join(_literal(u) for u in uuids)}]"

    selectors = []
    if chip is not None:
        selectors.append(any_type([chip]))
    if filters.use_types:
        selectors.append(any_type(filters.use_types))
    if filters.no_use_types and MATCHES_NOTHING not in filters.no_use_types:
        selectors.append(f"!({any_type(filters.no_use_types)})")
    if filters.use_uuids:
        selectors.append(uuid_in(filters.use_uuids))
    if filters.no_use_uuids and MATCHES_NOTHING not in filters.no_use_uuids:
        selectors.append(f"!({uuid_in(filters.no_use_uuids)})")
    return tuple(selectors)


def build_claim_spec(migration: PodMigration) -> dict[str, Any]:
    """The ResourceClaimSpec asking for every request of the migration."""
    devices: dict[str, Any] = {"requests": [plan.request() for plan in migration.requests]}
    config = [
        {
            "requests": [plan.name],
            "opaque": {
                "driver": DRIVER,
                "parameters": {"apiVersion": API_VERSION, "kind": KIND, **plan.config},
            },
        }
        for plan in migration.requests
        if plan.config
    ]
    if config:
        devices["config"] = config
    return {"devices": devices}


def template_name(claim_spec: Mapping[str, Any]) -> str:
    """One template per request shape: the name is a digest of the claim spec, so pods of
    the same shape share one and a changed shape gets its own."""
    digest = hashlib.sha256(json.dumps(claim_spec, sort_keys=True).encode()).hexdigest()
    return f"{TEMPLATE_PREFIX}{digest[:12]}"


def build_claim_template(namespace: str, claim_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The ResourceClaimTemplate the migrated pod's claim is made from."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": template_name(claim_spec),
            "namespace": namespace,
            "labels": {MIGRATED_TEMPLATE_LABEL: "true"},
        },
        "spec": {"spec": copy.deepcopy(dict(claim_spec))},
    }


def build_migrated_pod(
    pod: Mapping[str, Any],
    migration: PodMigration,
    backends: BackendRegistry,
    template: str,
    legacy_scheduler_name: str | None = None,
) -> dict[str, Any]:
    """The pod asking for the claim instead: the vendors' extended resources removed from
    every container that had a request, `resources.claims` pointing at its requests, the
    template referenced in `spec.resourceClaims` (kube-controller-manager then makes one
    claim per pod, owned by the pod), and a legacy scheduler name reset to the default."""
    migrated = copy.deepcopy(dict(pod))
    spec = migrated.setdefault("spec", {})
    names = {
        name
        for backend in backends
        for name in (
            backend.adapter.resources.count,
            backend.adapter.resources.memory,
            backend.adapter.resources.memory_percentage,
            backend.adapter.resources.cores,
            backend.adapter.resources.priority,
        )
        if name
    }
    by_container: dict[str, list[str]] = {}
    for plan in migration.requests:
        by_container.setdefault(plan.container, []).append(plan.name)
    for kind in ("initContainers", "containers"):
        for position, container in enumerate(spec.get(kind) or []):
            claimed = by_container.get(f"spec.{kind}[{position}]")
            if not claimed:
                continue
            resources = container.setdefault("resources", {})
            for part in ("limits", "requests"):
                values = {k: v for k, v in (resources.get(part) or {}).items() if k not in names}
                if values:
                    resources[part] = values
                else:
                    resources.pop(part, None)
            resources["claims"] = [
                *(resources.get("claims") or []),
                *({"name": POD_CLAIM_NAME, "request": request} for request in claimed),
            ]
    spec["resourceClaims"] = [
        *(spec.get("resourceClaims") or []),
        {"name": POD_CLAIM_NAME, "resourceClaimTemplateName": template},
    ]
    if legacy_scheduler_name and spec.get("schedulerName") == legacy_scheduler_name:
        del spec["schedulerName"]
    metadata = migrated.setdefault("metadata", {})
    metadata["annotations"] = {**(metadata.get("annotations") or {}), MIGRATED_ANNOTATION: template}
    return migrated


def opted_in(pod: Mapping[str, Any], namespace_labels: Mapping[str, str]) -> bool:
    """The pod's annotation or label, else its namespace's label, says
    `vgpu.hami.io/migrate: "true"`; the pod's own `"false"` wins over its namespace's.
    (A webhook's objectSelector reads labels only, hence both on the pod.)"""
    metadata = pod.get("metadata") or {}
    for own in ((metadata.get("annotations") or {}), (metadata.get("labels") or {})):
        if MIGRATE_LABEL in own:
            return str(own[MIGRATE_LABEL]).strip().lower() == "true"
    return namespace_labels.get(MIGRATE_LABEL, "").strip().lower() == "true"
