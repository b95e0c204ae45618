"""Which requests a ValidatingAdmissionPolicy or its binding applies to: pure.

kube-apiserver's matcher, reduced to one served version per resource (so
`matchPolicy: Equivalent` finds nothing Exact would not): a request matches when
the namespace selector, the object selector and a resource rule match and no
exclude rule does. A policy's `matchConstraints` and a binding's
`matchResources` are matched the same way; a binding without `resourceRules`
narrows nothing but its selectors.

The rules of the real matcher kept here: `*` in resources matches every resource
but no subresource, `pods/*` a pod and all its subresources, `*/status` every
status; `resourceNames` compares the request's name (empty for a create that
asks for a generated one). The namespace selector matches every cluster-scoped
object except a Namespace, which is matched by its own labels (the stored ones
on a delete). The object selector matches when the object or the old object has
the labels.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .selectors import Requirement

CREATE, UPDATE, DELETE, CONNECT = "CREATE", "UPDATE", "DELETE", "CONNECT"
_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


@dataclass(frozen=True, slots=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    def cel(self) -> dict[str, str]:
        return {"group": self.group, "version": self.version, "kind": self.kind}


@dataclass(frozen=True, slots=True)
class Request:
    """What one admission decision is about: the attributes kube-apiserver passes."""

    group: str
    version: str
    resource: str
    subresource: str
    kind: GroupVersionKind
    operation: str
    name: str
    namespace: str
    obj: dict[str, Any] | None
    old: dict[str, Any] | None
    cluster_scoped: bool

    @property
    def is_namespace(self) -> bool:
        return self.group == "" and self.resource == "namespaces"


def _listed(values: Any, wanted: str) -> bool:
    return isinstance(values, list) and ("*" in values or wanted in values)


def _resource_listed(resources: Any, resource: str, subresource: str) -> bool:
    for entry in resources if isinstance(resources, list) else []:
        main, _, sub = str(entry).partition("/")
        if main in ("*", resource) and sub in ("*", subresource):
            return True
    return False


def _scope_matches(scope: Any, request: Request) -> bool:
    if scope in (None, "*"):
        return True
    cluster = request.is_namespace or request.cluster_scoped
    return cluster if scope == "Cluster" else scope == "Namespaced" and not cluster


def rule_matches(rule: Mapping[str, Any], request: Request) -> bool:
    """One NamedRuleWithOperations against the request."""
    if not (
        _scope_matches(rule.get("scope"), request)
        and _listed(rule.get("operations"), request.operation)
        and _listed(rule.get("apiGroups"), request.group)
        and _listed(rule.get("apiVersions"), request.version)
        and _resource_listed(rule.get("resources"), request.resource, request.subresource)
    ):
        return False
    names = rule.get("resourceNames") or []
    return not names or request.name in names


def requirements(selector: Mapping[str, Any] | None) -> tuple[Requirement, ...]:
    """A LabelSelector (matchLabels, matchExpressions) as the emulator's requirements."""
    if not selector:
        return ()
    out = [
        Requirement(k, "=", frozenset([str(v)]))
        for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for expression in selector.get("matchExpressions") or []:
        operator = _OPERATORS[expression["operator"]]
        out.append(
            Requirement(expression["key"], operator, frozenset(expression.get("values") or []))
        )
    return tuple(out)


def _labels(obj: Mapping[str, Any] | None) -> Mapping[str, str] | None:
    if obj is None:
        return None
    return (obj.get("metadata") or {}).get("labels") or {}


def _selected(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    return all(r.matches(labels) for r in requirements(selector))


def _namespace_selected(
    selector: Mapping[str, Any] | None,
    request: Request,
    namespace_labels: Callable[[], Mapping[str, str] | None],
) -> bool:
    if request.cluster_scoped and not request.is_namespace:
        return True
    if not requirements(selector):
        return True
    if request.is_namespace and not request.subresource and request.operation in (CREATE, UPDATE):
        labels = _labels(request.obj) or {}
    else:
        found = namespace_labels()
        if found is None:
            return False
        labels = found
    return _selected(selector, labels)


def _object_selected(selector: Mapping[str, Any] | None, request: Request) -> bool:
    if not requirements(selector):
        return True
    return any(
        labels is not None and _selected(selector, labels)
        for labels in (_labels(request.obj), _labels(request.old))
    )


def resources_match(
    match: Mapping[str, Any] | None,
    request: Request,
    namespace_labels: Callable[[], Mapping[str, str] | None],
) -> bool:
    """A policy's matchConstraints or a binding's matchResources against the request;
    `namespace_labels` reads the request's namespace (None when there is none)."""
    match = match or {}
    if not _namespace_selected(match.get("namespaceSelector"), request, namespace_labels):
        return False
    if not _object_selected(match.get("objectSelector"), request):
        return False
    if any(rule_matches(rule, request) for rule in match.get("excludeResourceRules") or []):
        return False
    rules = match.get("resourceRules") or []
    return not rules or any(rule_matches(rule, request) for rule in rules)
