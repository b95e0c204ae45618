"""scheduling.k8s.io/v1 PriorityClass and the Priority admission plugin (reference §10).

The validation is ValidatePriorityClass(Update): a user class may not exceed
1000000000, a `system-` name must be one of the two system classes with its value,
`value` and `preemptionPolicy` are immutable. The admission half reads other objects
(the stored classes), so the Cluster calls it with them: a new pod's
`priorityClassName` (or the globalDefault class, else 0 and PreemptLowerPriority)
becomes `spec.priority` and `spec.preemptionPolicy`; a class that does not exist, or a
priority or policy the pod gives that disagrees, is a 403 worded as the plugin words
it; a second globalDefault class is refused the same way. The two system classes are
objects every real server creates at start (`system_priority_classes`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import ApiError, FieldError, Target, forbidden, invalid, not_supported

HIGHEST_USER_DEFINABLE_PRIORITY = 1000000000
SYSTEM_PREFIX = "system-"
SYSTEM_CLASSES: dict[str, int] = {
    "system-cluster-critical": 2000000000,
    "system-node-critical": 2000001000,
}
PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
PREEMPTION_POLICIES = ["Never", PREEMPT_LOWER_PRIORITY]
PRIORITY_CLASSES = Target("scheduling.k8s.io", "priorityclasses", "PriorityClass")
PODS = Target("", "pods", "Pod")


def system_priority_classes() -> list[dict[str, Any]]:
    """The classes kube-apiserver's bootstrap hook creates before it serves."""
    return [
        {
            "metadata": {"name": name},
            "value": value,
            "description": "Used for system critical pods that must not be moved from "
            "their current node."
            if name == "system-node-critical"
            else "Used for system critical pods that must run in the cluster, but can be "
            "moved to another node if necessary.",
        }
        for name, value in SYSTEM_CLASSES.items()
    ]


def normalize_priority_class(obj: dict[str, Any], old: dict[str, Any] | None) -> None:
    """SetDefaults_PriorityClass: the policy defaults to PreemptLowerPriority."""
    obj.setdefault("preemptionPolicy", PREEMPT_LOWER_PRIORITY)


def _known_system_class_error(name: str, value: Any, global_default: bool) -> str | None:
    """IsKnownSystemPriorityClass's reason `name` is not one, or None when it is."""
    if name not in SYSTEM_CLASSES:
        return f"{name} is not a known system priority class"
    if value != SYSTEM_CLASSES[name]:
        return f"value of {name} PriorityClass must be {SYSTEM_CLASSES[name]}"
    if global_default:
        return f"globalDefault of {name} PriorityClass must be false"
    return None


def validate_priority_class(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    name = obj["metadata"].get("name", "")
    value = obj.get("value", 0)
    errors: list[FieldError] = []
    if name.startswith(SYSTEM_PREFIX):
        reason = _known_system_class_error(name, value, bool(obj.get("globalDefault")))
        if reason is not None:
            detail = (
                f"priority class names with '{SYSTEM_PREFIX}' prefix are reserved for system "
                f"use only. error: {reason}"
            )
            errors.append(forbidden("metadata.name", detail))
    elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        limit = HIGHEST_USER_DEFINABLE_PRIORITY
        errors.append(
            forbidden("value", f"maximum allowed value of a user defined priority is {limit}")
        )
    policy = obj.get("preemptionPolicy")
    if policy not in PREEMPTION_POLICIES:
        errors.append(not_supported("preemptionPolicy", policy, PREEMPTION_POLICIES))
    if old is not None:
        if value != old.get("value", 0):
            errors.append(forbidden("value", "may not be changed in an update."))
        if policy != old.get("preemptionPolicy"):
            errors.append(invalid("preemptionPolicy", policy, "field is immutable"))
    return errors


def _refused(target: Target, name: str, why: str) -> ApiError:
    """admission.NewForbidden: the resource, the name when there is one, the reason."""
    subject = f'{target.qualified} "{name}"' if name else target.qualified
    return ApiError(403, f"{subject} is forbidden: {why}", details=target.details(target.plural))


def _global_default(classes: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """The default class; of several (a race), the lowest value, as the plugin picks."""
    defaults = [c for c in classes if c.get("globalDefault")]
    return min(defaults, key=lambda c: c.get("value", 0)) if defaults else None


def admit_priority_class(
    obj: dict[str, Any], old: dict[str, Any] | None, classes: Iterable[dict[str, Any]]
) -> None:
    """Only one globalDefault class may exist."""
    if not obj.get("globalDefault"):
        return
    current = _global_default(classes)
    name = obj["metadata"].get("name", "")
    if current is not None and (old is None or current["metadata"]["name"] != name):
        why = (
            f"PriorityClass {current['metadata']['name']} is already marked as default. "
            "Only one default can exist"
        )
        raise _refused(PRIORITY_CLASSES, name, why)


def admit_pod_priority(pod: dict[str, Any], name: str, classes: Iterable[dict[str, Any]]) -> None:
    """The Priority plugin's admitPod on create: resolve the class into the pod's spec."""
    spec = pod.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    by_name = {c["metadata"]["name"]: c for c in classes}
    class_name = spec.get("priorityClassName") or ""
    if class_name:
        chosen = by_name.get(class_name)
        if chosen is None:
            raise _refused(PODS, name, f"no PriorityClass with name {class_name} was found")
    else:
        chosen = _global_default(by_name.values())
        if chosen is not None:
            spec["priorityClassName"] = chosen["metadata"]["name"]
    priority = chosen.get("value", 0) if chosen is not None else 0
    policy = chosen.get("preemptionPolicy") if chosen is not None else PREEMPT_LOWER_PRIORITY
    given = spec.get("priority")
    if given is not None and given != priority:
        why = (
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {priority} from the given PriorityClass name"
        )
        raise _refused(PODS, name, why)
    spec["priority"] = priority
    if policy is not None:
        given_policy = spec.get("preemptionPolicy")
        if given_policy is not None and given_policy != policy:
            why = (
                f"the string value of PreemptionPolicy ({given_policy}) must not be provided in "
                f"pod spec; priority admission controller computed {policy} from the given "
                "PriorityClass name"
            )
            raise _refused(PODS, name, why)
        spec["preemptionPolicy"] = policy
