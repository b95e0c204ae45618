"""The emulator's ValidatingAdmissionPolicy plugin, decided in process (no HTTP): which
requests a policy matches, its variables, messages, reasons, failurePolicy, and the CEL
it refuses, worded as kube-apiserver v1.36 words them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simulator.apiserver.admission_policies import RequestContext
from simulator.apiserver.authentication import ANONYMOUS_USER, NODE_NAME, Tokens
from simulator.apiserver.cluster import Cluster
from simulator.apiserver.errors import ApiError
from simulator.apiserver.policy_cel import compile_expression
from simulator.apiserver.policy_matching import GroupVersionKind, Request, rule_matches
from simulator.apiserver.registry import ADMISSION, Registry
from simulator.apiserver.store import Storage

REGISTRY = Registry()
POLICIES = REGISTRY.get(ADMISSION, "v1", "validatingadmissionpolicies")
BINDINGS = REGISTRY.get(ADMISSION, "v1", "validatingadmissionpolicybindings")
CONFIGMAPS = REGISTRY.get("", "v1", "configmaps")
NAMESPACES = REGISTRY.get("", "v1", "namespaces")
PODS = REGISTRY.get("", "v1", "pods")
RULE = {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"], "resources": ["configmaps"]}


def _cluster() -> Cluster:
    cluster = Cluster(Storage(REGISTRY, 100, 60.0), lambda callback: None)
    for name, labels in (("default", {"team": "a"}), ("other", {"team": "b"})):
        cluster.create(NAMESPACES, "", {"metadata": {"name": name, "labels": labels}})
    return cluster


def _policy(
    cluster: Cluster,
    validations: list[dict[str, Any]],
    actions: tuple[str, ...] = ("Deny",),
    binding_match: dict[str, Any] | None = None,
    **spec: Any,
) -> None:
    spec.setdefault("matchConstraints", {"resourceRules": [RULE]})
    body = {"metadata": {"name": "p"}, "spec": {"validations": validations, **spec}}
    cluster.create(POLICIES, "", body)
    binding: dict[str, Any] = {"policyName": "p", "validationActions": list(actions)}
    if binding_match is not None:
        binding["matchResources"] = binding_match
    cluster.create(BINDINGS, "", {"metadata": {"name": "b"}, "spec": binding})


def _write(
    cluster: Cluster,
    name: str = "cm",
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    token: str | None = None,
    tokens: Tokens | None = None,
) -> RequestContext:
    user = (tokens or Tokens()).user(token) if token else ANONYMOUS_USER
    context = RequestContext(user)
    cluster.request = context
    try:
        meta: dict[str, Any] = {"name": name, "labels": labels or {}}
        cluster.create(CONFIGMAPS, namespace, {"metadata": meta, "data": {"k": "v"}})
    finally:
        cluster.request = None
    return context


def _refusal(cluster: Cluster, **write: Any) -> ApiError:
    with pytest.raises(ApiError) as raised:
        _write(cluster, **write)
    return raised.value


def _request(
    resource: str, subresource: str = "", operation: str = "CREATE", name: str = "x"
) -> Request:
    kind = GroupVersionKind("", "v1", "Pod")
    return Request(
        "", "v1", resource, subresource, kind, operation, name, "default", {}, None, False
    )


@pytest.mark.parametrize(
    ("resources", "resource", "subresource", "matches"),
    [
        (["*"], "pods", "", True),
        (["*"], "pods", "status", False),
        (["pods/*"], "pods", "", True),
        (["pods/*"], "pods", "binding", True),
        (["*/status"], "pods", "status", True),
        (["*/status"], "pods", "", False),
        (["pods/status"], "pods", "ephemeralcontainers", False),
        (["pods"], "pods", "status", False),
        (["*/*"], "nodes", "status", True),
    ],
)
def test_resource_rules_match_as_kube_apiserver(
    resources: list[str], resource: str, subresource: str, matches: bool
) -> None:
    rule = {"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": resources}
    assert rule_matches(rule, _request(resource, subresource)) is matches


def test_operations_and_resource_names_narrow_a_rule() -> None:
    rule = {**RULE, "resources": ["pods"], "operations": ["UPDATE"], "resourceNames": ["x"]}
    assert rule_matches(rule, _request("pods", operation="UPDATE"))
    assert not rule_matches(rule, _request("pods", operation="CREATE"))
    assert not rule_matches(rule, _request("pods", operation="UPDATE", name="y"))


def test_deny_message_reason_and_code_by_default() -> None:
    cluster = _cluster()
    _policy(cluster, [{"expression": "object.data.k == 'w'"}])
    error = _refusal(cluster)
    assert error.code == 422 and error.reason == "Invalid"
    assert error.message == (
        "configmaps \"cm\" is forbidden: ValidatingAdmissionPolicy 'p' with binding 'b' "
        "denied request: failed expression: object.data.k == 'w'"
    )
    assert cluster.storage.get(CONFIGMAPS, "default", "cm") is None


@pytest.mark.parametrize(
    ("reason", "code"),
    [("Forbidden", 403), ("Unauthorized", 401), ("RequestEntityTooLarge", 413), ("Invalid", 422)],
)
def test_a_validations_reason_sets_the_status(reason: str, code: int) -> None:
    cluster = _cluster()
    _policy(cluster, [{"expression": "false", "reason": reason, "message": "no"}])
    error = _refusal(cluster)
    assert (error.code, error.reason) == (code, reason)
    assert error.message.endswith("denied request: no")


@pytest.mark.parametrize(
    ("validation", "message"),
    [
        ({"message": " fixed "}, "fixed"),
        ({"message": "fixed", "messageExpression": "'from ' + object.data.k"}, "from v"),
        ({"message": "fixed", "messageExpression": "'   '"}, "fixed"),
        ({"message": "fixed", "messageExpression": "'two\\nlines'"}, "fixed"),
        ({"message": "fixed", "messageExpression": "object.nope"}, "fixed"),
        ({"messageExpression": "1 == 1"}, "failed expression: false"),
    ],
)
def test_message_expression_first_then_message_then_the_expression(
    validation: dict[str, str], message: str
) -> None:
    cluster = _cluster()
    _policy(cluster, [{"expression": "false", **validation}])
    assert _refusal(cluster).message.endswith(f"denied request: {message}")


def test_variables_are_evaluated_lazily_and_in_terms_of_each_other() -> None:
    cluster = _cluster()
    variables = [
        {"name": "broken", "expression": "object.data.missing"},
        {"name": "value", "expression": "object.data.k"},
        {"name": "shout", "expression": "variables.value.upperAscii()"},
    ]
    _policy(cluster, [{"expression": "variables.shout == 'V'"}], variables=variables)
    _write(cluster)
    assert cluster.storage.get(CONFIGMAPS, "default", "cm") is not None


def test_an_error_denies_under_fail_and_passes_under_ignore() -> None:
    cluster = _cluster()
    variables = [{"name": "broken", "expression": "object.data.missing"}]
    _policy(cluster, [{"expression": "variables.broken == 'x'"}], variables=variables)
    assert _refusal(cluster).message.endswith(
        "denied request: expression 'variables.broken == 'x'' resulted in error: "
        'composited variable "broken" fails to evaluate: no such key: missing'
    )
    ignoring = _cluster()
    _policy(ignoring, [{"expression": "object.data.missing"}], failurePolicy="Ignore")
    _write(ignoring)
    assert ignoring.storage.get(CONFIGMAPS, "default", "cm") is not None


def test_match_conditions_all_true_or_the_policy_does_not_apply() -> None:
    conditions = [
        {
            "name": "labelled",
            "expression": "has(object.metadata.labels) && 'x' in object.metadata.labels",
        },
        {"name": "node", "expression": f"'{NODE_NAME}' in request.userInfo.extra"},
    ]
    cluster = _cluster()
    _policy(cluster, [{"expression": "false"}], matchConditions=conditions)
    tokens = Tokens()
    bound = tokens.issue_service_account("ns", "sa", node_name="n1")
    _write(cluster, "unlabelled", token=bound, tokens=tokens)
    _write(cluster, "anonymous", labels={"x": "1"})
    _refusal(cluster, name="both", labels={"x": "1"}, token=bound, tokens=tokens)


def test_request_fields_seen_by_cel() -> None:
    cluster = _cluster()
    expression = (
        "request.operation == 'CREATE' && request.namespace == 'default' && "
        "request.name == 'cm' && request.resource.resource == 'configmaps' && "
        "request.kind.kind == 'ConfigMap' && request.userInfo.username == 'system:anonymous' && "
        "'system:unauthenticated' in request.userInfo.groups && oldObject == null && "
        "namespaceObject.metadata.labels.team == 'a' && params == null && !request.dryRun"
    )
    _policy(cluster, [{"expression": expression}])
    _write(cluster)
    assert cluster.storage.get(CONFIGMAPS, "default", "cm") is not None


def test_selectors_of_policy_and_binding_both_narrow() -> None:
    cluster = _cluster()
    namespace_selector = {"matchLabels": {"team": "a"}}
    object_selector = {"matchExpressions": [{"key": "guarded", "operator": "Exists"}]}
    _policy(
        cluster,
        [{"expression": "false"}],
        binding_match={"objectSelector": object_selector},
        matchConstraints={"resourceRules": [RULE], "namespaceSelector": namespace_selector},
    )
    _write(cluster, "other-team", namespace="other", labels={"guarded": "1"})
    _write(cluster, "unguarded")
    _refusal(cluster, name="guarded", labels={"guarded": "1"})


def test_warn_and_audit_do_not_refuse() -> None:
    cluster = _cluster()
    _policy(cluster, [{"expression": "false", "message": "m"}], actions=("Warn", "Audit"))
    context = _write(cluster)
    assert context.warnings == [
        "299 - \"Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': m\""
    ]


def test_the_emulators_own_writes_are_not_admitted() -> None:
    cluster = _cluster()
    _policy(cluster, [{"expression": "false"}])
    cluster.create(CONFIGMAPS, "default", {"metadata": {"name": "internal"}})
    assert cluster.storage.get(CONFIGMAPS, "default", "internal") is not None


@pytest.mark.parametrize(
    ("expression", "detail"),
    [
        ("object.spec.?nodeName.orValue('')", "does not support CEL optional syntax"),
        ("request.userInfo.extra[?'k']", "does not support CEL optional syntax"),
        ("optional.of(1) == optional.of(1)", "does not support optional values"),
        ("authorizer.group('').resource('pods').check('get').allowed()", "authorizer"),
        ("object.spec ==", "Syntax error"),
    ],
)
def test_unsupported_or_invalid_cel_refuses_the_policy(expression: str, detail: str) -> None:
    cluster = _cluster()
    with pytest.raises(ApiError) as raised:
        _policy(cluster, [{"expression": expression}])
    assert raised.value.code == 422
    assert raised.value.message.startswith(
        'ValidatingAdmissionPolicy.admissionregistration.k8s.io "p" is invalid: '
        "spec.validations[0].expression: Invalid value: "
    )
    assert detail in raised.value.message
    assert compile_expression(expression).error is not None


@given(
    labels=st.dictionaries(st.sampled_from("abcd"), st.sampled_from(["1", "2"]), max_size=4),
    wanted=st.dictionaries(st.sampled_from("abcd"), st.sampled_from(["1", "2"]), max_size=2),
)
def test_an_object_selector_matches_exactly_the_labelled_objects(
    labels: dict[str, str], wanted: dict[str, str]
) -> None:
    cluster = _cluster()
    _policy(
        cluster,
        [{"expression": "false"}],
        binding_match={"objectSelector": {"matchLabels": wanted}},
    )
    selected = all(labels.get(k) == v for k, v in wanted.items())
    try:
        _write(cluster, labels=labels)
    except ApiError:
        assert selected
    else:
        assert not selected


def test_a_node_bound_token_reviews_with_its_extras() -> None:
    tokens = Tokens()
    token = tokens.issue_service_account("ns", "sa", node_name="n1", pod_name="p", pod_uid="u")
    user = tokens.review({"spec": {"token": token}})["status"]["user"]
    assert user["username"] == "system:serviceaccount:ns:sa"
    extra = user["extra"]
    assert (extra[NODE_NAME], extra["authentication.kubernetes.io/pod-name"]) == (["n1"], ["p"])
    assert extra["authentication.kubernetes.io/pod-uid"] == ["u"]
    assert extra["authentication.kubernetes.io/credential-id"][0].startswith("JTI=")
    assert (
        "extra" not in tokens.review({"spec": {"token": tokens.issue("plain")}})["status"]["user"]
    )
    assert tokens.user("nobody's") == ANONYMOUS_USER
