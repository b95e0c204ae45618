"""The ValidatingAdmissionPolicy plugin of the emulated kube-apiserver v1.36.

Every write that arrives over HTTP (create, update, patch, apply, delete and
subresource writes) passes here after its checks produced the object to store
and before it is stored, dry runs included. Each stored binding whose policy
exists is evaluated as the real dispatcher does: the policy's matchConstraints,
then the binding's matchResources, then matchConditions (all true, else the
policy does not apply), then the validations in order with the lazily
evaluated variables, once per param the binding selects (policy_params.py;
`params` is null for a policy or binding without parameters). A failed
validation, or an error under failurePolicy Fail, is acted on by the binding's
validationActions: Deny refuses the write with the first denial (reason and
code from the validation), Warn adds a `Warning` header, Audit records nothing
visible. A policy or binding that cannot be evaluated (a paramKind not served,
params not found under `parameterNotFoundAction: Deny`) refuses the write under
failurePolicy Fail whatever the actions, as the real dispatcher's configuration
errors do. The CEL is in policy_cel.py, what a request matches in
policy_matching.py, the checks on policy writes in rules_admission.py.

With no binding stored, `active()` is one dict lookup: a write without
policies costs nothing measurable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from celpy import celtypes

from .authentication import UserInfo
from .errors import ApiError
from .policy_cel import (
    MAX_MESSAGE_BYTES,
    LazyVariables,
    PolicyEvaluationError,
    compile_expression,
    to_cel,
)
from .policy_matching import Request, resources_match
from .policy_memo import DecisionMemo, projection
from .policy_params import ParamError, ParamSource
from .registry import ADMISSION, Registry
from .store import Storage

POLICIES = (ADMISSION, "v1", "validatingadmissionpolicies")
BINDINGS = (ADMISSION, "v1", "validatingadmissionpolicybindings")
REASON_CODES = {"Invalid": 422, "Forbidden": 403, "Unauthorized": 401, "RequestEntityTooLarge": 413}
_NAMESPACE_META = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "finalizers",
)
"""What `namespaceObject.metadata` keeps (the real CreateNamespaceObject drops the rest)."""


@dataclass(slots=True)
class RequestContext:
    """Who is writing, set by the HTTP layer around one request; `warnings` come back
    as `Warning` headers."""

    user: UserInfo
    subresource: str = ""
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class _Decision:
    """One validation that did not admit: its message and the Status reason it asks for."""

    message: str
    reason: str = "Invalid"


def _failure_policy(policy: Mapping[str, Any]) -> str:
    return (policy.get("spec") or {}).get("failurePolicy") or "Fail"


def _warning_header(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{escaped}"'


class PolicyAdmission:
    """Reads the stored policies and bindings at each write and decides it."""

    def __init__(self, storage: Storage, registry: Registry) -> None:
        self._storage = storage
        policies, bindings = registry.get(*POLICIES), registry.get(*BINDINGS)
        self._policies = storage.bucket(policies).objects if policies is not None else {}
        self._bindings = storage.bucket(bindings).objects if bindings is not None else {}
        self._namespaces = registry.get("", "v1", "namespaces")
        self._memo = DecisionMemo()
        self._params = ParamSource(storage, registry)

    def active(self) -> bool:
        """Whether any binding is stored (else no write needs looking at)."""
        return bool(self._bindings)

    def review(self, request: Request, context: RequestContext, dry_run: bool) -> None:
        """Refuse the write (ApiError) on a Deny; add Warn messages to the context."""
        policies = {key[1]: policy for key, policy in self._policies.items()}
        denials: list[tuple[str, str | None, _Decision]] = []
        for name in sorted(policies):
            policy = policies[name]
            spec = policy.get("spec") or {}
            fail = _failure_policy(policy) != "Ignore"
            bindings = [
                b
                for _, b in sorted(self._bindings.items())
                if (b.get("spec") or {}).get("policyName") == name
            ]
            if not bindings or not resources_match(
                spec.get("matchConstraints"), request, lambda: self._namespace_labels(request)
            ):
                continue
            try:
                self._params.resource(spec.get("paramKind"))
            except ParamError as error:
                if fail:
                    denials.append((name, None, _Decision(f"failed to configure policy: {error}")))
                continue
            for binding in bindings:
                binding_spec = binding.get("spec") or {}
                binding_name = binding["metadata"]["name"]
                match = binding_spec.get("matchResources")
                if match and not resources_match(
                    match, request, lambda: self._namespace_labels(request)
                ):
                    continue
                try:
                    params = self._params.collect(
                        spec.get("paramKind"), binding_spec.get("paramRef"), request.namespace
                    )
                except ParamError as error:
                    if fail:
                        decision = _Decision(f"failed to configure binding: {error}")
                        denials.append((name, binding_name, decision))
                    continue
                decisions = [
                    decision
                    for param in params
                    for decision in self._decide(policy, request, context.user, dry_run, param)
                ]
                actions = binding_spec.get("validationActions") or []
                for decision in decisions:
                    if "Deny" in actions:
                        denials.append((name, binding_name, decision))
                    if "Warn" in actions:
                        context.warnings.append(
                            _warning_header(
                                f"Validation failed for ValidatingAdmissionPolicy '{name}' "
                                f"with binding '{binding_name}': {decision.message}"
                            )
                        )
        if denials:
            raise _denied(request, *denials[0])

    # ---- one policy ---------------------------------------------------------------

    def _decide(
        self,
        policy: Mapping[str, Any],
        request: Request,
        user: UserInfo,
        dry_run: bool,
        param: dict[str, Any] | None,
    ) -> list[_Decision]:
        """`_validate` with `params` bound to `param`, remembered by what the policy's CEL
        reads (policy_memo.py): the param's fields are read like the request's, so a
        changed param is a different key."""
        paths = self._memo.paths(policy)
        if paths is None:
            return self._validate(policy, request, user, dry_run, param)
        roots = {
            "object": request.obj,
            "oldObject": request.old,
            "request": _request_value(request, user, dry_run),
            "params": param,
        }
        if any(path[0] == "namespaceObject" for path in paths):
            roots["namespaceObject"] = self._namespace_object(request)
        key = projection(roots, paths)
        found = self._memo.get(policy, key)
        if found is None:
            found = tuple(self._validate(policy, request, user, dry_run, param))
            self._memo.put(policy, key, found)
        return list(found)

    def _validate(
        self,
        policy: Mapping[str, Any],
        request: Request,
        user: UserInfo,
        dry_run: bool,
        param: dict[str, Any] | None,
    ) -> list[_Decision]:
        """The decisions that do not admit; an error counts only under failurePolicy Fail."""
        spec = policy.get("spec") or {}
        fail = _failure_policy(policy) != "Ignore"
        variables = spec.get("variables") or []
        activation = self._activation(request, user, dry_run, param, variables)
        errors = []
        for condition in spec.get("matchConditions") or []:
            try:
                result = compile_expression(condition["expression"]).evaluate(activation)
            except PolicyEvaluationError as error:
                errors.append(error.reason)
                continue
            if result == celtypes.BoolType(False):
                return []
        if errors:
            message = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            return [_Decision(message)] if fail else []
        decisions = []
        for validation in spec.get("validations") or []:
            expression = validation.get("expression", "")
            try:
                result = compile_expression(expression).evaluate(activation)
            except PolicyEvaluationError as error:
                if fail:
                    decisions.append(_Decision(error.reason))
                continue
            if result is True or result == celtypes.BoolType(True):
                continue
            message = _message(validation, activation)
            decisions.append(_Decision(message, validation.get("reason") or "Invalid"))
        return decisions

    def _activation(
        self,
        request: Request,
        user: UserInfo,
        dry_run: bool,
        param: dict[str, Any] | None,
        variables: list[Mapping[str, Any]],
    ) -> dict[str, Any]:
        lazy = LazyVariables({v["name"]: compile_expression(v["expression"]) for v in variables})
        activation = {
            "object": to_cel(request.obj),
            "oldObject": to_cel(request.old),
            "request": to_cel(_request_value(request, user, dry_run)),
            "params": to_cel(param),
            "namespaceObject": to_cel(self._namespace_object(request)),
            "variables": lazy,
        }
        lazy.activation = activation
        return activation

    # ---- the request's namespace --------------------------------------------------

    def _namespace(self, request: Request) -> dict[str, Any] | None:
        if self._namespaces is None or not request.namespace:
            return None
        return self._storage.get(self._namespaces, "", request.namespace)

    def _namespace_labels(self, request: Request) -> Mapping[str, str] | None:
        found = self._namespace(request)
        return None if found is None else (found["metadata"].get("labels") or {})

    def _namespace_object(self, request: Request) -> dict[str, Any] | None:
        if request.is_namespace:
            return None
        found = self._namespace(request)
        if found is None:
            return None
        meta = {k: v for k, v in found["metadata"].items() if k in _NAMESPACE_META}
        return {
            "metadata": meta,
            "spec": found.get("spec") or {},
            "status": found.get("status") or {},
        }


def _request_value(request: Request, user: UserInfo, dry_run: bool) -> dict[str, Any]:
    """`request` as the AdmissionRequest the real plugin builds (no object in it)."""
    resource = {"group": request.group, "version": request.version, "resource": request.resource}
    return {
        "kind": request.kind.cel(),
        "resource": resource,
        "subResource": request.subresource,
        "requestKind": request.kind.cel(),
        "requestResource": dict(resource),
        "requestSubResource": request.subresource,
        "name": request.name,
        "namespace": request.namespace,
        "operation": request.operation,
        "userInfo": {
            "username": user.username,
            "uid": user.uid,
            "groups": list(user.groups),
            "extra": {k: list(v) for k, v in user.extra.items()},
        },
        "dryRun": dry_run,
    }


def _message(validation: Mapping[str, Any], activation: Mapping[str, Any]) -> str:
    """messageExpression's string if it gives a usable one, else message, else the
    expression: the real server's order of preference."""
    if text := validation.get("messageExpression"):
        try:
            value = compile_expression(text).evaluate(activation)
        except PolicyEvaluationError:
            value = None
        if isinstance(value, str):
            message = str(value).strip()
            if message and "\n" not in message and len(message.encode()) <= MAX_MESSAGE_BYTES:
                return message
    if message := (validation.get("message") or "").strip():
        return message
    return f"failed expression: {validation.get('expression', '').strip()}"


def _denied(request: Request, policy: str, binding: str | None, decision: _Decision) -> ApiError:
    """The Status kube-apiserver answers: admission.NewForbidden's wording, the
    validation's reason and its code (no binding for a policy's configuration error)."""
    bound = "" if binding is None else f" with binding '{binding}'"
    text = f"ValidatingAdmissionPolicy '{policy}'{bound} denied request: {decision.message}"
    subject = obj if (obj := request.obj) is not None else request.old
    meta = (subject or {}).get("metadata") or {}
    name = request.name or meta.get("name") or meta.get("generateName") or "Unknown"
    qualified = f"{request.resource}.{request.group}" if request.group else request.resource
    details: dict[str, Any] = {"name": name, "kind": request.resource}
    if request.group:
        details["group"] = request.group
    details["causes"] = [{"message": text}]
    return ApiError(
        REASON_CODES.get(decision.reason, 422),
        f'{qualified} "{name}" is forbidden: {text}',
        reason=decision.reason,
        details=details,
    )
