"""Core/v1 rules where the real server refuses or fills in: pods, bindings, namespaces.

Each validator takes the new object and the stored one (None on create); each
normalizer runs on every write before validation, as decoding and API defaulting
do; a defaulter (`on_create`) runs on create only, as admission plugins do.
resource.k8s.io lives in rules_resource.py (with rules_resource_slices.py and
rules_resource_claims.py), leases and events in rules_coordination.py and
rules_events.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from api.quantity import QuantityError, parse_quantity

from .errors import (
    ApiError,
    FieldError,
    bad_request,
    duplicate,
    forbidden,
    invalid,
    required,
    unparsable_quantity,
)
from .rules_pod_gates import gated_placement_changes, only_deleted_gates
from .validation import dns_subdomain, entry_name

Validator = Callable[[dict[str, Any], dict[str, Any] | None], list[FieldError]]
Defaulter = Callable[[dict[str, Any]], None]
Normalizer = Callable[[dict[str, Any], dict[str, Any] | None], None]

POD_UPDATE_FORBIDDEN = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
DEFAULT_TOLERATION_SECONDS = 300
SCHEDULING_GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


# ---- pods -------------------------------------------------------------------


def normalize_pod(pod: dict[str, Any], old: dict[str, Any] | None) -> None:
    """The API defaults every pod write gets (decoding), so a PUT that leaves them out
    is not taken for a spec change."""
    if not isinstance(pod.get("spec"), dict):
        return
    spec = pod["spec"] = copy.deepcopy(pod["spec"])
    _decode_quantities(spec)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("enableServiceLinks", True)
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            if isinstance(container, dict):
                container.setdefault("terminationMessagePath", "/dev/termination-log")
                container.setdefault("terminationMessagePolicy", "File")
                image = str(container.get("image", ""))
                tagged = ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest")
                container.setdefault("imagePullPolicy", "IfNotPresent" if tagged else "Always")
    default_requests_from_limits(spec)


def default_requests_from_limits(spec: dict[str, Any]) -> None:
    """SetDefaults_Pod: each limit of a container or init container with no request of
    its name becomes that request, so kube-scheduler's fit and kubelet see what a
    limits-only pod (every legacy GPU pod) asks for. Not ephemeral containers, which
    have no resources to schedule."""
    for key in ("initContainers", "containers"):
        for container in spec.get(key) or []:
            resources = container.get("resources") if isinstance(container, dict) else None
            limits = resources.get("limits") if isinstance(resources, dict) else None
            if not isinstance(limits, dict) or not limits:
                continue
            requests = resources.get("requests")
            if requests is None:
                requests = resources["requests"] = {}
            elif not isinstance(requests, dict):
                continue
            for name, quantity in limits.items():
                requests.setdefault(name, quantity)


def _resource_lists(spec: dict[str, Any]) -> list[Any]:
    """Every `ResourceList` of a pod spec: per container (all three kinds), pod-level
    resources and the runtime overhead."""
    lists = [spec.get("overhead")]
    holders = [spec.get("resources")]
    for key in ("initContainers", "containers", "ephemeralContainers"):
        holders += [c.get("resources") for c in spec.get(key) or [] if isinstance(c, dict)]
    for resources in holders:
        if isinstance(resources, dict):
            lists += [resources.get("limits"), resources.get("requests")]
    return lists


def _decode_quantities(spec: dict[str, Any]) -> None:
    """A resource value that is not a quantity fails decoding into the Go type: a 400 for
    the whole body, before any validation (kube-apiserver's `cannot be handled as a Pod`);
    a JSON null decodes to zero."""
    for values in _resource_lists(spec):
        for value in values.values() if isinstance(values, dict) else ():
            if value is None:
                continue
            try:
                parse_quantity(str(value))
            except QuantityError as error:
                raise unparsable_quantity("Pod") from error


def default_pod(pod: dict[str, Any]) -> None:
    """What admission adds on create: the service account, the tolerations of
    DefaultTolerationSeconds (the priority is the Priority plugin's, rules_scheduling.py);
    and the status a new pod starts with, SchedulingGated when it has gates (the pod
    strategy's PrepareForCreate)."""
    spec = pod.setdefault("spec", {})
    if isinstance(spec, dict):
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        tolerations = spec.get("tolerations") or []
        added = [
            {
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": DEFAULT_TOLERATION_SECONDS,
            }
            for key in NOT_READY_TAINTS
            if not any(_tolerates_no_execute(t, key) for t in tolerations)
        ]
        if added:
            spec["tolerations"] = [*tolerations, *added]
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    if isinstance(spec, dict) and spec.get("schedulingGates"):
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": None,
                "reason": "SchedulingGated",
                "message": SCHEDULING_GATED_MESSAGE,
            }
        ]


def _tolerates_no_execute(toleration: Any, key: str) -> bool:
    return (
        isinstance(toleration, dict)
        and toleration.get("key", "") in ("", key)
        and toleration.get("effect", "") in ("", "NoExecute")
    )


def validate_pod(pod: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    spec = pod.get("spec") or {}
    errors: list[FieldError] = []
    containers = spec.get("containers") or []
    if not containers:
        errors.append(required("spec.containers"))
    names: set[str] = set()
    for index, container in enumerate(containers):
        path = f"spec.containers[{index}]"
        errors += entry_name(path, container.get("name"), names)
        if not container.get("image") and old is None:
            errors.append(required(f"{path}.image"))
    if old is None and spec.get("nodeName") and spec.get("schedulingGates"):
        detail = "cannot be set until all schedulingGates have been cleared"
        errors.append(forbidden("spec.nodeName", detail))
    if old is not None:
        errors += _validate_pod_update(spec, old.get("spec") or {})
    return errors


def _validate_pod_update(spec: dict[str, Any], before: dict[str, Any]) -> list[FieldError]:
    """Only images, activeDeadlineSeconds, added tolerations, a negative grace period
    set to 1 and removed scheduling gates may change (ValidatePodUpdate); while the pod
    is gated, also additions to its node selector and required node affinity
    (rules_pod_gates.py)."""
    for key in ("containers", "initContainers"):
        if len(spec.get(key) or []) != len(before.get(key) or []):
            return [forbidden(f"spec.{key}", "pod updates may not add or remove containers")]
    errors = only_deleted_gates(spec.get("schedulingGates"), before.get("schedulingGates"))
    mutable = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for container, earlier in zip(mutable.get(key) or [], before.get(key) or [], strict=True):
            if isinstance(container, dict) and isinstance(earlier, dict):
                container["image"] = earlier.get("image")
    _copy_key(mutable, before, "activeDeadlineSeconds")
    earlier_tolerations = before.get("tolerations") or []
    if all(t in (mutable.get("tolerations") or []) for t in earlier_tolerations):
        _copy_key(mutable, before, "tolerations")
    grace, earlier_grace = (
        mutable.get("terminationGracePeriodSeconds"),
        before.get("terminationGracePeriodSeconds"),
    )
    if grace == 1 and isinstance(earlier_grace, int) and earlier_grace < 0:
        _copy_key(mutable, before, "terminationGracePeriodSeconds")
    _copy_key(mutable, before, "schedulingGates")
    if before.get("schedulingGates"):
        errors += gated_placement_changes(mutable, before)
    if mutable != before:
        errors.append(forbidden("spec", POD_UPDATE_FORBIDDEN))
    return errors


def _copy_key(target: dict[str, Any], source: dict[str, Any], key: str) -> None:
    if key in source:
        target[key] = source[key]
    else:
        target.pop(key, None)


def validate_pod_status(pod: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """status.resourceClaimStatuses must name entries of spec.resourceClaims, once each;
    a new status.nominatedNodeName must be a node name."""
    claims = {c.get("name") for c in (pod.get("spec") or {}).get("resourceClaims") or []}
    errors: list[FieldError] = []
    seen: set[str] = set()
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    for index, status in enumerate(statuses):
        path = f"status.resourceClaimStatuses[{index}]"
        name = status.get("name")
        if name not in claims:
            errors.append(
                invalid(
                    f"{path}.name", name, "must match the name of an entry in `spec.resourceClaims`"
                )
            )
        elif name in seen:
            errors.append(duplicate(f"{path}.name", name))
        seen.add(name)
        if status.get("resourceClaimName"):
            errors += dns_subdomain(f"{path}.resourceClaimName", status["resourceClaimName"])
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    if nominated and nominated != ((old or {}).get("status") or {}).get("nominatedNodeName"):
        errors += dns_subdomain("status.nominatedNodeName", nominated)
    return errors


def binding_node(name: str, body: Any) -> str:
    """The node a `pods/binding` body names, refused as BindingREST.Create refuses it."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be a Binding object")
    if (body.get("metadata") or {}).get("name") != name:
        raise bad_request("name in URL does not match name in Binding object")
    node = (body.get("target") or {}).get("name")
    if not node:
        raise ApiError(500, str(required("target.name")))
    return str(node)


# ---- namespaces ---------------------------------------------------------------


def default_namespace(namespace: dict[str, Any]) -> None:
    meta = namespace["metadata"]
    meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
    namespace.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
    namespace["status"] = {"phase": "Active"}


def clear_status(obj: dict[str, Any]) -> None:
    obj.pop("status", None)
