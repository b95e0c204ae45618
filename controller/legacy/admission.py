"""HAMi's mutating webhook for pods, as a pure decision: a JSON patch or a denial.

Rules (hami-protocol.md §1, §6; issue 11): a pod without containers is
denied; a pod already given to another scheduler is left alone; every
container goes through each enabled vendor's MutateAdmission
(`VendorBackend.mutate`: whether it asks for that vendor, and the limits,
requests, env and pod annotations that vendor's webhook sets). For NVIDIA,
per container, the count is added when only memory/cores/percentage are given
and an exclusive 100 cores when a whole card is asked for (the engine's
`admission_limits`), the percentage is validated, `priority` becomes
`CUDA_TASK_PRIORITY`, a non-default core policy becomes
`GPU_CORE_UTILIZATION_POLICY`, and with `overwriteEnv` a container without
GPU gets `NVIDIA_VISIBLE_DEVICES=none`. These container rules apply to init
and app containers alike, and their patch is kept for a pod without any GPU
container too, so that with `overwriteEnv` such a pod sees no GPU (HAMi's
`MutateAdmission` mutates every container, then the whole pod is patched).
A pod with any vendor's resources gets our schedulerName and the runtimeClassName
its first vendor that has one configures; it is denied when any of its containers is privileged (a
privileged sidecar sees every GPU of the node as much as the GPU container
does; HAMi's `privilegedContainerName`), when `spec.nodeName` is preset, or
when it would exceed its namespace's quota of any vendor it asks for (each
vendor's `limits.<memory name>` and `limits.<cores name>`, HAMi's
fitResourceQuota). Every denial says what to change.

Tamper-proofing (issue 17), for containers with NVIDIA GPUs (the vendor whose limits
HAMi-core enforces). In device-plugin mode kubelet puts the device
plugin's env first and the container's own after it, and the last value wins,
so only admission can keep a GPU container (init or app) from lifting its
limits. Such a container is refused, naming the container and the field, when
it sets a limit, cache or library variable (`CUDA_DEVICE_MEMORY_LIMIT*`,
`CUDA_DEVICE_SM_LIMIT*`, and `PINNED_ENV`: `CUDA_DEVICE_MEMORY_SHARED_CACHE`,
`CUDA_REDIRECT`) or an `LD_PRELOAD`
naming anything but libvgpu's container path; when it sets
`CUDA_DISABLE_CONTROL` or `GPU_CORE_UTILIZATION_POLICY` outside the namespaces
an administrator lists (`enforcement_opt_out_namespaces`); when it mounts a
volume at, inside or above the library, `/etc/ld.so.preload`, the lock dir or
the cache dir (a mount above replaces what lies under it, and how nested mounts
stack is the runtime's business, not admission's); and when an `envFrom` has no
`prefix`, or one that could spell a guarded name (a ConfigMap can carry any key
and change after admission). Pinning is used only where it cannot fight the
device plugin: outside the opt-out namespaces every GPU container gets
`CUDA_DISABLE_CONTROL=false` appended as the last entry of its env, so a value
that arrives some other way loses (the device plugin reads the container's env
with later entries winning). The limits are not pinned: the device plugin sets
them per allocation, and a pinned value would override its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from api.hami_annotations import NVIDIA_DEVICE_TYPE
from api.quantity import QuantityError, parse_quantity
from controller.legacy.config import CorePolicy, LegacySettings
from dra_driver.engine.quota import QuotaLedger
from dra_driver.engine.vendor_backends.registry import BackendRegistry
from dra_driver.errors import DriverError, InvalidParameterError
from dra_driver.objects.pod_workloads import container_request
from dra_driver.objects.tamper_rules import reaches, tamper_findings
from libvgpu.settings import (
    CONTAINER_LIBRARY_PATH,
    CONTAINER_LOCK_DIR,
    CORE_POLICY_ENV,
    DISABLE_CONTROL_ENV,
    LIMIT_ENV_FAMILIES,
    OPT_OUT_ENV,
    PINNED_ENV,
    TASK_PRIORITY_ENV,
    LibvgpuPaths,
    guarded_paths,
)

DEFAULT_SCHEDULER = "default-scheduler"
PRELOAD_ENV = "LD_PRELOAD"
_PATHS = LibvgpuPaths()
PROTECTED_PATHS = (
    _PATHS.container_library_path,
    _PATHS.container_preload_path,
    CONTAINER_LOCK_DIR,
    _PATHS.legacy_container_cache_dir,
)
"""Container paths the device plugin mounts for HAMi-core; a pod's own mount must not touch them."""

Patch = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class AdmissionDecision:
    """Allowed with a (possibly empty) patch, or denied with a code and a message."""

    allowed: bool
    patch: Patch = field(default_factory=list)
    message: str = ""
    code: int = 200
    reason: str = ""


class TamperError(DriverError):
    """A GPU container tries to lift or escape HAMi-core's limits; names the container and field."""

    def __init__(self, container: str, field: str, reason: str) -> None:
        super().__init__(f"container {container}: {field} {reason}")
        self.container = container
        self.field = field
        self.reason = reason


def allow(patch: Patch | None = None, message: str = "") -> AdmissionDecision:
    return AdmissionDecision(True, patch or [], message)


def deny(message: str, code: int = 403, reason: str = "Forbidden") -> AdmissionDecision:
    return AdmissionDecision(False, [], message, code, reason)


def pointer(*tokens: str | int) -> str:
    """An RFC 6901 JSON pointer ('/' and '~' escaped in each token)."""
    return "".join("/" + str(token).replace("~", "~0").replace("/", "~1") for token in tokens)


Demand = dict[str, tuple[int, int]]
"""Per vendor (HAMi request Type): memory in MiB and cores, as its quota counts them."""


@dataclass(slots=True)
class _Container:
    """What one container contributes: whether it asks for any vendor (and which count
    resources), whether libvgpu enforces it (NVIDIA), what it asks of each vendor's
    quota, its patch and the pod annotations its vendors' webhooks set."""

    has_gpu: bool = False
    libvgpu: bool = False
    resources: list[str] = field(default_factory=list)
    demand: Demand = field(default_factory=dict)
    patch: Patch = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)


def _integer(raw: object, field_path: str) -> int:
    try:
        value: Decimal = parse_quantity(str(raw))
    except QuantityError as error:
        raise InvalidParameterError(field_path, error.reason) from None
    if value != value.to_integral_value():
        raise InvalidParameterError(field_path, f"{raw!r} is not a whole number")
    return int(value)


def _env_refusal(name: str, item: Mapping[str, Any], opt_out: bool) -> str:
    """Why a GPU container may not set `name` itself, or "" when it may."""
    if name in PINNED_ENV or name.startswith(LIMIT_ENV_FAMILIES):
        return (
            "is set by the device plugin from the allocation, and the container's own value "
            "would replace it; remove it"
        )
    if name in OPT_OUT_ENV and not opt_out:
        return (
            "turns HAMi-core's enforcement off, which only namespaces an administrator lists "
            "may do; remove it"
        )
    if name == PRELOAD_ENV:
        entries = str(item.get("value") or "").replace(":", " ").split()
        if "valueFrom" in item or any(entry != CONTAINER_LIBRARY_PATH for entry in entries):
            return (
                "preloads a library other than libvgpu, which can hide CUDA from it; "
                f"remove it or set it to {CONTAINER_LIBRARY_PATH}"
            )
    return ""


def _prefix_spells_guarded(prefix: str, opt_out: bool) -> bool:
    """Whether `prefix` + some ConfigMap key could be a variable `_env_refusal` guards."""
    names = [*PINNED_ENV, PRELOAD_ENV] + ([] if opt_out else list(OPT_OUT_ENV))
    return any(name.startswith(prefix) and name != prefix for name in names) or any(
        family.startswith(prefix) or prefix.startswith(family) for family in LIMIT_ENV_FAMILIES
    )


def _check_tamper(container: Mapping[str, Any], where: str, opt_out: bool) -> None:
    """Raise TamperError for the first field of a GPU container that could lift its limits."""
    name = container.get("name") or where
    for index, item in enumerate(container.get("env") or []):
        variable = str(item.get("name") or "")
        reason = _env_refusal(variable, item, opt_out)
        if reason:
            raise TamperError(name, f"{where}.env[{index}] ({variable})", reason)
    for index, source in enumerate(container.get("envFrom") or []):
        prefix = str(source.get("prefix") or "")
        if not prefix or _prefix_spells_guarded(prefix, opt_out):
            raise TamperError(
                name,
                f"{where}.envFrom[{index}] (prefix {prefix!r})",
                "could bring in HAMi-core's variables (a ConfigMap or Secret can carry any key "
                "and change after admission); give it a prefix such as APP_",
            )
    for index, mount in enumerate(container.get("volumeMounts") or []):
        path = str(mount.get("mountPath") or "")
        for protected in PROTECTED_PATHS:
            if reaches(path, (protected,)):
                raise TamperError(
                    name,
                    f"{where}.volumeMounts[{index}] ({path})",
                    f"would cover {protected}, which the device plugin mounts for HAMi-core; "
                    "mount the volume elsewhere",
                )


def _set_ops(
    container: Mapping[str, Any], base: tuple[str | int, ...], kind: str, values: Mapping[str, str]
) -> Patch:
    """JSON patch setting `resources.<kind>` entries, creating the maps that are missing."""
    if not values:
        return []
    resources = container.get("resources")
    if resources is not None and kind in resources:
        return [
            {"op": "add", "path": pointer(*base, "resources", kind, key), "value": value}
            for key, value in values.items()
        ]
    if resources is not None:
        return [{"op": "add", "path": pointer(*base, "resources", kind), "value": dict(values)}]
    return [{"op": "add", "path": pointer(*base, "resources"), "value": {kind: dict(values)}}]


def _mutate_container(
    container: Mapping[str, Any],
    pod: Mapping[str, Any],
    base: tuple[str | int, ...],
    where: str,
    backends: BackendRegistry,
    settings: LegacySettings,
    opt_out: bool,
) -> _Container:
    """Every vendor's MutateAdmission on one container, then HAMi-core's rules for a
    container with NVIDIA GPUs (the vendor libvgpu enforces)."""
    names = settings.nvidia.vendor().resources
    config = settings.nvidia
    mutations = [(backend, backend.mutate(container, pod, where)) for backend in backends]
    result = _Container(has_gpu=any(mutation.has_resource for _, mutation in mutations))
    result.resources = [b.count_resource for b, m in mutations if m.has_resource]
    result.libvgpu = any(m.has_resource for b, m in mutations if b.name == NVIDIA_DEVICE_TYPE)
    if result.libvgpu:
        _check_tamper(container, where, opt_out)
    set_limits: dict[str, str] = {}
    set_requests: dict[str, str] = {}
    backend_env: list[dict[str, str]] = []
    for _, mutation in mutations:
        set_limits.update(mutation.limits)
        set_requests.update(mutation.requests)
        backend_env.extend(dict(item) for item in mutation.env)
        result.annotations.update(mutation.pod_annotations)
    result.patch += _set_ops(container, base, "limits", set_limits)
    result.patch += _set_ops(container, base, "requests", set_requests)
    limits = (container.get("resources") or {}).get("limits") or {}
    merged = {**limits, **set_limits}
    if names.memory_percentage in merged:
        path = f"{where}.resources.limits.{names.memory_percentage}"
        percent = _integer(merged[names.memory_percentage], path)
        if not 0 <= percent <= 100:
            raise InvalidParameterError(path, f"{percent} is outside 0..100; use a percentage")
    env: list[dict[str, str]] = []
    if names.priority and names.priority in merged:
        priority = _integer(merged[names.priority], f"{where}.resources.limits.{names.priority}")
        env.append({"name": TASK_PRIORITY_ENV, "value": str(priority)})
    if config.gpu_core_policy is not CorePolicy.DEFAULT:
        env.append({"name": CORE_POLICY_ENV, "value": config.gpu_core_policy.value})
    env += backend_env
    if result.libvgpu and not opt_out:
        env.append({"name": DISABLE_CONTROL_ENV, "value": "false"})
    if env:
        if container.get("env"):
            result.patch += [
                {"op": "add", "path": pointer(*base, "env", "-"), "value": item} for item in env
            ]
        else:
            result.patch.append({"op": "add", "path": pointer(*base, "env"), "value": env})
    if result.has_gpu:
        mutated = _with_resources(container, set_limits, set_requests)
        result.demand = _quota_demand(mutated, pod, where, backends)
    return result


def _with_resources(
    container: Mapping[str, Any], limits: Mapping[str, str], requests: Mapping[str, str]
) -> dict[str, Any]:
    """The container as the webhook's patch leaves it: its limits and requests with
    what the vendors' webhooks set."""
    resources = container.get("resources") or {}
    return {
        **container,
        "resources": {
            **resources,
            "limits": {**(resources.get("limits") or {}), **limits},
            "requests": {**(resources.get("requests") or {}), **requests},
        },
    }


def _quota_demand(
    container: Mapping[str, Any], pod: Mapping[str, Any], where: str, backends: BackendRegistry
) -> Demand:
    """HAMi's fitResourceQuota for one mutated container: each vendor's request as its
    GenerateResourceRequests reads it (memory factor, defaults and templates applied),
    times its device count. A whole card asked by percentage counts no memory here;
    Filter charges it the card's memory."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    requests = container_request(
        container, annotations, backends.vendors(), where, admission_defaults=False
    )
    return {
        request.vendor: (request.memory_mib * request.count, request.cores * request.count)
        for request in requests
    }


def _privileged_container(spec: Mapping[str, Any]) -> str | None:
    """The first privileged container, init containers first (HAMi's order), by name."""
    for key in ("initContainers", "containers"):
        for index, container in enumerate(spec.get(key) or []):
            if (container.get("securityContext") or {}).get("privileged"):
                return container.get("name") or f"spec.{key}[{index}]"
    return None


def _reach_around_libvgpu(pod: Mapping[str, Any]) -> str | None:
    """Why a container of this GPU pod could lift its limits (CAP_SYS_ADMIN, a hostPath
    over libvgpu's files), by the rule the DRA prepare applies; None when none could.
    Privileged containers are refused before, in HAMi's words."""
    for finding in tamper_findings(pod, guarded_paths(LibvgpuPaths())):
        if not finding.field.endswith(".privileged"):
            return (
                f"container {finding.container}: {finding.field}: {finding.reason}; "
                "a pod that requests GPUs may not have it"
            )
    return None


def review_pod(
    pod: Mapping[str, Any],
    namespace: str,
    settings: LegacySettings,
    quota: QuotaLedger | None = None,
) -> AdmissionDecision:
    """Decide one pod CREATE. `quota` holds each namespace's limits per vendor and what
    the namespace already holds of each."""
    spec = pod.get("spec") or {}
    if not spec.get("containers"):
        return deny("pod has no containers; add at least one container to spec.containers")
    scheduler = spec.get("schedulerName") or ""
    ours = settings.scheduler_name
    if (
        scheduler
        and scheduler != ours
        and (not settings.force_overwrite_default_scheduler or scheduler != DEFAULT_SCHEDULER)
    ):
        return allow(message=f"pod is for scheduler {scheduler}; left alone")
    backends = settings.backends()
    patch: Patch = []
    gpu_containers: list[str] = []
    resources: list[str] = []
    libvgpu = False
    annotations: dict[str, str] = {}
    app_demand: Demand = {}
    init_demand: Demand = {}
    opt_out = namespace in settings.enforcement_opt_out_namespaces
    try:
        for key in ("initContainers", "containers"):
            for index, container in enumerate(spec.get(key) or []):
                where = f"spec.{key}[{index}]"
                mutated = _mutate_container(
                    container, pod, ("spec", key, index), where, backends, settings, opt_out
                )
                patch += mutated.patch
                annotations.update(mutated.annotations)
                if not mutated.has_gpu:
                    continue
                gpu_containers.append(container.get("name") or where)
                resources += [name for name in mutated.resources if name not in resources]
                libvgpu = libvgpu or mutated.libvgpu
                for vendor, (memory, cores) in mutated.demand.items():
                    if key == "initContainers":
                        peak = init_demand.get(vendor, (0, 0))
                        init_demand[vendor] = (max(peak[0], memory), max(peak[1], cores))
                    else:
                        total = app_demand.get(vendor, (0, 0))
                        app_demand[vendor] = (total[0] + memory, total[1] + cores)
    except InvalidParameterError as error:
        return deny(str(error), 400, "BadRequest")
    except TamperError as error:
        return deny(str(error))
    if not gpu_containers:
        return allow(patch, message="pod requests no GPU resources")
    privileged = _privileged_container(spec)
    if privileged:
        return deny(
            f"container {privileged} is privileged in a pod that requests {', '.join(resources)} "
            f"(in {', '.join(gpu_containers)}); a privileged container sees every GPU of "
            "the node, so remove its securityContext.privileged or the pod's GPU resources"
        )
    reach = _reach_around_libvgpu(pod) if libvgpu else None
    if reach:
        return deny(reach)
    if spec.get("nodeName"):
        return deny(
            f"pod sets spec.nodeName={spec['nodeName']}, which bypasses GPU scheduling; "
            f"remove spec.nodeName and let {ours} place the pod"
        )
    refusal = _quota_refusal(quota, namespace, app_demand, init_demand, backends)
    if refusal:
        return deny(refusal)
    if scheduler:
        patch.append({"op": "replace", "path": "/spec/schedulerName", "value": ours})
    else:
        patch.append({"op": "add", "path": "/spec/schedulerName", "value": ours})
    runtime_class = next(
        (b.runtime_class_name for b in backends if b.count_resource in resources), ""
    )
    if runtime_class and not spec.get("runtimeClassName"):
        patch.append({"op": "add", "path": "/spec/runtimeClassName", "value": runtime_class})
    patch += _annotation_ops(pod, annotations)
    return allow(patch)


def _annotation_ops(pod: Mapping[str, Any], annotations: Mapping[str, str]) -> Patch:
    """JSON patch setting pod annotations a vendor's webhook writes."""
    if not annotations:
        return []
    metadata = pod.get("metadata")
    if metadata is None:
        return [{"op": "add", "path": "/metadata", "value": {"annotations": dict(annotations)}}]
    if metadata.get("annotations") is None:
        return [{"op": "add", "path": "/metadata/annotations", "value": dict(annotations)}]
    return [
        {"op": "add", "path": pointer("metadata", "annotations", key), "value": value}
        for key, value in annotations.items()
    ]


def _quota_refusal(
    quota: QuotaLedger | None,
    namespace: str,
    app_demand: Demand,
    init_demand: Demand,
    backends: BackendRegistry,
) -> str:
    """HAMi's fitResourceQuota: per vendor, in registry order, the larger of the app
    containers' sum and the biggest init container (they run one at a time), against
    the namespace's limits of that vendor less what it already holds."""
    if quota is None:
        return ""
    for backend in backends:
        limits = quota.quotas.get((namespace, backend.name))
        if limits is None:
            continue
        app, init = app_demand.get(backend.name, (0, 0)), init_demand.get(backend.name, (0, 0))
        memory, cores = max(app[0], init[0]), max(app[1], init[1])
        names, factor = backend.adapter.resources, max(backend.adapter.memory_factor, 1)
        checks = (
            (limits.memory_limit_mib, limits.memory_used_mib, memory, names.memory, " MiB"),
            (limits.cores_limit, limits.cores_used, cores, names.cores, "%"),
        )
        for limit, used, asked, name, unit in checks:
            if limit is None or used + asked <= limit:
                continue
            stated = f"{limit}{unit}"
            if unit == " MiB" and factor > 1:
                stated += f" ({limit // factor} x {factor} MiB)"
            return (
                f"namespace {namespace} ResourceQuota limits.{name} is {stated} with "
                f"{used}{unit} in use, and this pod asks for {asked}{unit}; lower {name} "
                "or raise the quota"
            )
    return ""
