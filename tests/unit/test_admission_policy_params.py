"""Parameterised ValidatingAdmissionPolicies in the emulator, as kube-apiserver v1.36
evaluates them: the policy's `paramKind`, the binding's `paramRef` (a name, or a
selector; its namespace, or the request's), `parameterNotFoundAction`, the param
object as `params` in CEL, a param change seen by the next write, the configuration
errors worded as the real dispatcher words them, and the checks on create."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.apiserver.admission_policies import RequestContext
from simulator.apiserver.authentication import ANONYMOUS_USER
from simulator.apiserver.cluster import Cluster
from simulator.apiserver.errors import ApiError
from simulator.apiserver.registry import ADMISSION, Registry
from simulator.apiserver.store import Storage

REGISTRY = Registry()
POLICIES = REGISTRY.get(ADMISSION, "v1", "validatingadmissionpolicies")
BINDINGS = REGISTRY.get(ADMISSION, "v1", "validatingadmissionpolicybindings")
CONFIGMAPS = REGISTRY.get("", "v1", "configmaps")
NAMESPACES = REGISTRY.get("", "v1", "namespaces")
RULE = {
    "apiGroups": [""],
    "apiVersions": ["v1"],
    "operations": ["CREATE", "UPDATE"],
    "resources": ["configmaps"],
}
CONFIGMAP_KIND = {"apiVersion": "v1", "kind": "ConfigMap"}
ALLOWED = {
    "expression": "object.data.k in params.data.allowed.split(',')",
    "message": "not allowed",
}
NOT_FOUND = (
    "failed to configure binding: no params found for policy binding with `Deny` "
    "parameterNotFoundAction"
)


def _cluster() -> Cluster:
    cluster = Cluster(Storage(REGISTRY, 100, 60.0), lambda callback: None)
    for name in ("default", "other", "params"):
        cluster.create(NAMESPACES, "", {"metadata": {"name": name}})
    return cluster


def _install(
    cluster: Cluster,
    param_ref: dict[str, Any] | None,
    validations: list[dict[str, Any]] | None = None,
    param_kind: dict[str, str] | None = CONFIGMAP_KIND,
    actions: tuple[str, ...] = ("Deny",),
    **spec: Any,
) -> None:
    policy: dict[str, Any] = {
        "matchConstraints": {"resourceRules": [RULE]},
        "validations": validations or [ALLOWED],
        **spec,
    }
    if param_kind is not None:
        policy["paramKind"] = param_kind
    cluster.create(POLICIES, "", {"metadata": {"name": "policy"}, "spec": policy})
    binding: dict[str, Any] = {"policyName": "policy", "validationActions": list(actions)}
    if param_ref is not None:
        binding["paramRef"] = param_ref
    cluster.create(BINDINGS, "", {"metadata": {"name": "binding"}, "spec": binding})


def _param(
    cluster: Cluster, allowed: str, name: str = "p", namespace: str = "params", **labels: str
) -> None:
    """The param ConfigMap, created or replaced (as its admin writes it: not admitted)."""
    body = {"metadata": {"name": name, "labels": labels}, "data": {"allowed": allowed}}
    if cluster.exists(CONFIGMAPS, namespace, name):
        cluster.update(CONFIGMAPS, namespace, name, body)
    else:
        cluster.create(CONFIGMAPS, namespace, body)


def _write(cluster: Cluster, value: str, name: str = "cm", namespace: str = "params") -> None:
    """A tenant's configmap write, under admission."""
    cluster.request = RequestContext(ANONYMOUS_USER)
    try:
        body = {"metadata": {"name": name}, "data": {"k": value}}
        if cluster.exists(CONFIGMAPS, namespace, name):
            cluster.update(CONFIGMAPS, namespace, name, body)
        else:
            cluster.create(CONFIGMAPS, namespace, body)
    finally:
        cluster.request = None


def _refusal(cluster: Cluster, value: str, **where: str) -> ApiError:
    with pytest.raises(ApiError) as raised:
        _write(cluster, value, **where)
    return raised.value


def _by_name(action: str = "Deny", **ref: str) -> dict[str, Any]:
    return {"name": "p", "namespace": "params", "parameterNotFoundAction": action, **ref}


def test_the_param_is_params_in_cel_with_its_kind() -> None:
    cluster = _cluster()
    _param(cluster, "a,b")
    typed = {"expression": "params.apiVersion == 'v1' && params.kind == 'ConfigMap'"}
    _install(cluster, _by_name(), [typed, ALLOWED])
    _write(cluster, "a")
    refused = _refusal(cluster, "c")
    assert refused.code == 422
    assert refused.message == (
        "configmaps \"cm\" is forbidden: ValidatingAdmissionPolicy 'policy' with binding "
        "'binding' denied request: not allowed"
    )


def test_a_changed_param_decides_the_next_write() -> None:
    """The decision memo keys on what `params` reads, so no stale answer survives."""
    cluster = _cluster()
    _param(cluster, "a")
    _install(cluster, _by_name())
    _write(cluster, "a")
    _param(cluster, "b")
    _refusal(cluster, "a")
    _write(cluster, "b")
    _param(cluster, "a,b")
    _write(cluster, "a")


def test_a_missing_param_denies_under_deny_with_the_servers_words() -> None:
    cluster = _cluster()
    _install(cluster, _by_name("Deny"), [{"expression": "true"}])
    refused = _refusal(cluster, "a")
    assert (refused.code, refused.reason) == (422, "Invalid")
    assert refused.message == (
        "configmaps \"cm\" is forbidden: ValidatingAdmissionPolicy 'policy' with binding "
        f"'binding' denied request: {NOT_FOUND}"
    )
    _param(cluster, "a")
    _write(cluster, "a")


def test_a_missing_param_skips_the_validations_under_allow() -> None:
    cluster = _cluster()
    _install(cluster, _by_name("Allow"), [{"expression": "false"}])
    _write(cluster, "anything")


@pytest.mark.parametrize(
    ("failure_policy", "actions", "refused"),
    [("Ignore", ("Deny",), False), ("Fail", ("Warn",), True), ("Fail", ("Audit",), True)],
)
def test_a_binding_error_follows_the_failure_policy_not_the_actions(
    failure_policy: str, actions: tuple[str, ...], refused: bool
) -> None:
    """The real dispatcher adds configuration errors to the denials itself."""
    cluster = _cluster()
    _install(cluster, _by_name(), actions=actions, failurePolicy=failure_policy)
    if refused:
        assert _refusal(cluster, "a").message.endswith(NOT_FOUND)
    else:
        _write(cluster, "a")


def test_a_namespaced_param_without_a_namespace_is_looked_up_in_the_requests() -> None:
    cluster = _cluster()
    _param(cluster, "a", namespace="default")
    _install(cluster, {"name": "p", "parameterNotFoundAction": "Deny"})
    _write(cluster, "a", namespace="default")
    _refusal(cluster, "b", namespace="default")
    assert _refusal(cluster, "a", namespace="other").message.endswith(NOT_FOUND)


def test_a_selector_evaluates_every_param_it_selects() -> None:
    cluster = _cluster()
    _param(cluster, "a,b", name="first", role="limit")
    _param(cluster, "b,c", name="second", role="limit")
    _param(cluster, "x", name="unrelated")
    selector = {"matchLabels": {"role": "limit"}}
    _install(
        cluster, {"namespace": "params", "selector": selector, "parameterNotFoundAction": "Deny"}
    )
    _write(cluster, "b")
    _refusal(cluster, "a")
    _refusal(cluster, "c")


def test_a_selector_that_selects_nothing_admits_under_allow() -> None:
    cluster = _cluster()
    _install(
        cluster,
        {"selector": {"matchLabels": {"role": "none"}}, "parameterNotFoundAction": "Allow"},
        [{"expression": "false"}],
    )
    _write(cluster, "a")


def test_a_binding_without_param_ref_sees_null_params() -> None:
    cluster = _cluster()
    _install(cluster, None, [{"expression": "params == null"}])
    _write(cluster, "a")


def test_an_unknown_param_kind_fails_the_policy() -> None:
    cluster = _cluster()
    _install(cluster, _by_name(), param_kind={"apiVersion": "example.com/v1", "kind": "Widget"})
    assert _refusal(cluster, "a").message == (
        "configmaps \"cm\" is forbidden: ValidatingAdmissionPolicy 'policy' denied request: "
        "failed to configure policy: failed to find resource referenced by paramKind: "
        "'example.com/v1, Kind=Widget'"
    )


def test_a_cluster_scoped_param_takes_no_namespace() -> None:
    cluster = _cluster()
    _install(cluster, _by_name(), param_kind={"apiVersion": "v1", "kind": "Namespace"})
    assert _refusal(cluster, "a").message.endswith(
        "denied request: failed to configure binding: paramRef.namespace must not be "
        "provided for a cluster-scoped `paramKind`"
    )


def test_a_cluster_scoped_param_by_name() -> None:
    cluster = _cluster()
    _install(
        cluster,
        {"name": "other", "parameterNotFoundAction": "Deny"},
        [{"expression": "params.metadata.name == object.data.k"}],
        param_kind={"apiVersion": "v1", "kind": "Namespace"},
    )
    _write(cluster, "other")
    _refusal(cluster, "default")


@pytest.mark.parametrize(
    ("param_kind", "errors"),
    [
        (
            {},
            [
                "spec.paramKind.apiVersion: Required value",
                "spec.paramKind.kind: Required value",
            ],
        ),
        (
            {"apiVersion": "a/b/c", "kind": "X"},
            ['spec.paramKind.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string'],
        ),
        (
            {"apiVersion": "example.com/", "kind": "X"},
            ['spec.paramKind.apiVersion: Invalid value: "example.com/": version must be specified'],
        ),
        (
            {"apiVersion": "v1", "kind": "Config_Map"},
            [
                'spec.paramKind.kind: Invalid value: "Config_Map": may have mixed case, but '
                "should otherwise match: a DNS-1035 label must consist of lower case"
            ],
        ),
    ],
)
def test_a_policys_param_kind_is_checked_on_create(
    param_kind: dict[str, str], errors: list[str]
) -> None:
    cluster = _cluster()
    body = {
        "metadata": {"name": "policy"},
        "spec": {
            "paramKind": param_kind,
            "matchConstraints": {"resourceRules": [RULE]},
            "validations": [{"expression": "true"}],
        },
    }
    with pytest.raises(ApiError) as raised:
        cluster.create(POLICIES, "", body)
    assert raised.value.code == 422
    for error in errors:
        assert error in raised.value.message


@pytest.mark.parametrize(
    ("param_ref", "errors"),
    [
        (
            {},
            [
                "spec.paramRef: Required value: one of name or selector must be specified",
                "spec.paramRef.parameterNotFoundAction: Required value",
            ],
        ),
        (
            {"name": "p", "selector": {}, "parameterNotFoundAction": "Deny"},
            [
                "spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive",
            ],
        ),
        (
            {"name": "a/b", "parameterNotFoundAction": "Deny"},
            ["spec.paramRef.name: Invalid value: \"a/b\": may not contain '/'"],
        ),
        (
            {"name": "..", "parameterNotFoundAction": "Deny"},
            ["spec.paramRef.name: Invalid value: \"..\": may not be '..'"],
        ),
        (
            {"name": "p", "parameterNotFoundAction": "Maybe"},
            [
                'spec.paramRef.parameterNotFoundAction: Unsupported value: "Maybe": '
                'supported values: "Deny", "Allow"'
            ],
        ),
        (
            {
                "selector": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
                "parameterNotFoundAction": "Allow",
            },
            [
                "spec.paramRef.selector.matchExpressions[0].operator: Invalid value: "
                '"Near": not a valid selector operator'
            ],
        ),
        (
            {
                "selector": {"matchExpressions": [{"key": "a", "operator": "In"}]},
                "parameterNotFoundAction": "Allow",
            },
            [
                "spec.paramRef.selector.matchExpressions[0].values: Required value: must be "
                "specified when `operator` is 'In' or 'NotIn'"
            ],
        ),
    ],
)
def test_a_bindings_param_ref_is_checked_on_create(
    param_ref: dict[str, Any], errors: list[str]
) -> None:
    cluster = _cluster()
    body = {
        "metadata": {"name": "binding"},
        "spec": {"policyName": "policy", "validationActions": ["Deny"], "paramRef": param_ref},
    }
    with pytest.raises(ApiError) as raised:
        cluster.create(BINDINGS, "", body)
    assert raised.value.code == 422
    for error in errors:
        assert error in raised.value.message
