"""Which nodes a pod may go to at all: kube-scheduler's rules, pure. (What a capacity
request rounds to is `capacity_policy`.)

The controller picks a node when it allocates, and kube-scheduler must then
be able to put the pod there; a node that fails one of these checks would
leave the pod Pending with a claim allocated on the wrong node. The reasons
are kube-scheduler's wording so events read the same. The DRA scheduler
stand-in applies the same rules, so the two never disagree.

NodeResourcesFit is `noderesources/fit.go fitsRequest` of v1.36 (`resource_fit`):
a resource the node does not list in allocatable counts as 0 there (a pod asking
`nvidia.com/gpu` of a node without the device plugin is `Insufficient
nvidia.com/gpu`), `pods` included; every insufficient resource is a reason; a
request larger than the node's whole allocatable is unresolvable (preemption
cannot help). A DRA extended resource, the name a DeviceClass answers to
(`deviceclass.resource.kubernetes.io/<class>` or its extendedResourceName), that
the node does not list is DynamicResources' to allocate, not NodeResourcesFit's
to refuse; with DRAExtendedResource on, fit.go also leaves any unlisted scalar to
DynamicResources when the pod asks for no extended resource at all (it reads no
class mapping then).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from api.quantity import QuantityError, parse_quantity

NODE_UNSCHEDULABLE = "node(s) were unschedulable"
SELECTOR_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
NODE_NAME_MISMATCH = "node(s) didn't match the requested node name"
TOO_MANY_PODS = "Too many pods"
INSUFFICIENT = "Insufficient "
"""How every other NodeResourcesFit reason starts (then the resource's name)."""
SCHEDULING_EFFECTS = ("NoSchedule", "NoExecute")
TERMINAL_PHASES = ("Succeeded", "Failed")
DEVICE_CLASS_RESOURCE_PREFIX = "deviceclass.resource.kubernetes.io/"
NODE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
"""The resources fit.go checks by name, only when the pod asks for some (> 0)."""

_QUALIFIED_NAME = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


@functools.lru_cache(maxsize=1024)
def is_extended_resource_name(name: str) -> bool:
    """kubelet's test: a domain-qualified name outside kubernetes.io, not a quota name."""
    if name.startswith("requests.") or not _QUALIFIED_NAME.match(name):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


@functools.lru_cache(maxsize=1024)
def is_scalar_resource_name(name: str) -> bool:
    """schedutil.IsScalarResourceName: what NodeInfo counts besides cpu, memory, storage
    and pods (anything else a pod names is ignored by the fit). Both tests are cached:
    Filter asks them per node, of the few names pods use."""
    return (
        is_extended_resource_name(name)
        or name.startswith(("hugepages-", "attachable-volumes-"))
        or "kubernetes.io/" in name
    )


def dra_extended_resources(classes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The resource names DeviceClasses answer to (extended.DeviceClassMapping): every
    class's implicit `deviceclass.resource.kubernetes.io/<name>` and its
    `spec.extendedResourceName`."""
    names: set[str] = set()
    for device_class in classes:
        names.add(DEVICE_CLASS_RESOURCE_PREFIX + device_class["metadata"]["name"])
        explicit = (device_class.get("spec") or {}).get("extendedResourceName")
        if explicit:
            names.add(explicit)
    return frozenset(names)


def resource_fit(
    requested: Mapping[str, Decimal],
    allocatable: Mapping[str, Decimal],
    used: Mapping[str, Decimal],
    pods_on_node: int,
    dra_resources: Collection[str] = frozenset(),
) -> tuple[tuple[str, ...], bool]:
    """NodeResourcesFit's Filter (fit.go fitsRequest), every reason kept: the reasons
    (empty: the pod fits) and whether preemption could resolve them."""
    reasons: list[str] = []
    unresolvable = False
    if pods_on_node + 1 > allocatable.get("pods", Decimal(0)):
        reasons.append(TOO_MANY_PODS)
    reads_classes = any(amount and is_extended_resource_name(n) for n, amount in requested.items())
    scalars = sorted(
        name for name in requested if name not in NODE_RESOURCES and is_scalar_resource_name(name)
    )
    for name in [*(n for n in NODE_RESOURCES if n in requested), *scalars]:
        amount = requested[name]
        if amount <= 0:
            continue
        if (
            name not in NODE_RESOURCES
            and name not in allocatable
            and (name in dra_resources or not reads_classes)
        ):
            continue
        total = allocatable.get(name, Decimal(0))
        if amount > total - used.get(name, Decimal(0)):
            reasons.append(f"{INSUFFICIENT}{name}")
            unresolvable = unresolvable or amount > total
    return tuple(reasons), not unresolvable


def _requirement_met(requirement: Mapping[str, Any], value: str | None) -> bool:
    operator, values = requirement.get("operator"), requirement.get("values") or []
    if operator == "In":
        return value in values
    if operator == "NotIn":
        return value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or not values:
        return False
    try:
        if operator == "Gt":
            return int(value) > int(values[0])
        return operator == "Lt" and int(value) < int(values[0])
    except ValueError:
        return False


def label_selector_matches(labels: Mapping[str, str], selector: Mapping[str, Any]) -> bool:
    """A metav1 LabelSelector: matchLabels and matchExpressions, all ANDed."""
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    return all(
        _requirement_met(r, labels.get(r.get("key")))
        for r in selector.get("matchExpressions") or []
    )


def node_selector_matches(node: Mapping[str, Any], selector: Mapping[str, Any] | None) -> bool:
    """A v1 NodeSelector: terms are ORed, the requirements of a term ANDed."""
    if not selector:
        return True
    labels = node["metadata"].get("labels") or {}
    fields = {"metadata.name": node["metadata"]["name"]}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        matched_fields = term.get("matchFields") or []
        if not expressions and not matched_fields:
            continue
        if all(_requirement_met(r, labels.get(r.get("key"))) for r in expressions) and all(
            _requirement_met(r, fields.get(r.get("key"))) for r in matched_fields
        ):
            return True
    return False


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    if toleration.get("effect") and toleration["effect"] != taint.get("effect"):
        return False
    if toleration.get("operator") == "Exists":
        return not toleration.get("key") or toleration["key"] == taint.get("key")
    return toleration.get("key") == taint.get("key") and toleration.get("value", "") == taint.get(
        "value", ""
    )


def untolerated_taint(
    taints: Iterable[Mapping[str, Any]], tolerations: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first NoSchedule/NoExecute taint that no toleration covers."""
    for taint in taints:
        if taint.get("effect") in SCHEDULING_EFFECTS and not any(
            _tolerates(t, taint) for t in tolerations
        ):
            return taint
    return None


@functools.lru_cache(maxsize=4096)
def _amount(quantity: Any) -> Decimal:
    """A quantity's value (0 when unreadable); node allocatables repeat, so it is cached."""
    try:
        return parse_quantity(str(quantity))
    except QuantityError:
        return Decimal(0)


def pod_resource_requests(pod: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests: the larger of the app containers' sum and any init container."""
    spec = pod.get("spec") or {}
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        for name, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, Decimal(0)) + _amount(quantity)
    for container in spec.get("initContainers") or []:
        for name, quantity in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total.get(name, Decimal(0)), _amount(quantity))
    return total


def requests_total(pods: Iterable[Mapping[str, Any]]) -> dict[str, Decimal]:
    """What `pods` request together (their effective requests summed)."""
    used: dict[str, Decimal] = {}
    for other in pods:
        for resource, amount in pod_resource_requests(other).items():
            used[resource] = used.get(resource, Decimal(0)) + amount
    return used


def node_refusal(
    pod: Mapping[str, Any],
    node: Mapping[str, Any],
    pods_on_node: int,
    used: Mapping[str, Decimal],
    requested: Mapping[str, Decimal] | None = None,
    dra_resources: Collection[str] = frozenset(),
) -> str | None:
    """Why kube-scheduler would not put `pod` on `node`, or None.

    `pods_on_node` counts the node's pods that still hold resources (not
    finished) and `used` is what they request together (`requests_total`);
    `requested` is `pod_resource_requests(pod)` when the caller has it already;
    `dra_resources` the names DeviceClasses answer to (`dra_extended_resources`).
    """
    reason = placement_refusal(pod, node)
    if reason is not None:
        return reason
    wanted = pod_resource_requests(pod) if requested is None else requested
    reasons, _ = resource_fit(wanted, node_allocatable(node), used, pods_on_node, dra_resources)
    return reasons[0] if reasons else None


def placement_refusal(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """The predicates no other pod's removal changes (node name, unschedulable, taints,
    selector and required affinity): why the pod may never go to `node`, or None."""
    spec = pod.get("spec") or {}
    name = node["metadata"]["name"]
    if spec.get("nodeName") and spec["nodeName"] != name:
        return NODE_NAME_MISMATCH
    if (node.get("spec") or {}).get("unschedulable"):
        return NODE_UNSCHEDULABLE
    taint = untolerated_taint(
        (node.get("spec") or {}).get("taints") or [], spec.get("tolerations") or []
    )
    if taint is not None:
        return f"node(s) had untolerated taint {{{taint.get('key')}: {taint.get('value', '')}}}"
    labels = node["metadata"].get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return SELECTOR_MISMATCH
    affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required and not node_selector_matches(node, required):
        return SELECTOR_MISMATCH
    return None


def node_allocatable(node: Mapping[str, Any]) -> dict[str, Decimal]:
    listed = (node.get("status") or {}).get("allocatable") or {}
    return {name: _amount(quantity) for name, quantity in listed.items()}


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """What NodeResourcesFit reads of one node, to judge a pod there as if some of the
    pods bound to it were gone (preemption's dry run, kube-scheduler's
    `SelectVictimsOnNode` removing and returning pods)."""

    allocatable: Mapping[str, Decimal]
    used: Mapping[str, Decimal]
    """What the node's pods request together, victims included."""
    pods: int
    pod_requests: Mapping[str, Mapping[str, Decimal]]
    """Each bound pod's effective requests by uid: what its removal gives back."""
    dra_resources: frozenset[str] = frozenset()

    def refusal_without(self, requested: Mapping[str, Decimal], gone: Iterable[str]) -> str | None:
        """Why the pod does not fit with the pods of these uids removed (a uid not bound
        here frees nothing), or None."""
        used = dict(self.used)
        count = self.pods
        for uid in gone:
            requests = self.pod_requests.get(uid)
            if requests is None:
                continue
            count -= 1
            for name, amount in requests.items():
                used[name] = used.get(name, Decimal(0)) - amount
        reasons, _ = resource_fit(requested, self.allocatable, used, count, self.dra_resources)
        return reasons[0] if reasons else None
