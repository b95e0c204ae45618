"""admissionregistration.k8s.io/v1 write rules: ValidatingAdmissionPolicy and its binding.

What the real server refuses in these objects and the policy plugin
(admission_policies.py) relies on: the enumerated fields (failurePolicy,
validationActions, a validation's reason, operations), required expressions
and names, and CEL that compiles. Two refusals are the emulator's own, because
it cannot honour what a real server would: a policy with `paramKind` or a
binding with `paramRef` (it does not evaluate parameterised policies), and an
expression in CEL optional syntax or using `authorizer` (see policy_cel.py). A
refusal is a 422 naming the field, so a test finds out at once instead of
seeing a policy that never denies. Pure; it may call the emulator's errors and
policy_cel.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, forbidden, invalid, not_supported, required
from .policy_cel import compile_expression

FAILURE_POLICIES = ["Fail", "Ignore"]
VALIDATION_ACTIONS = ["Deny", "Warn", "Audit"]
REASONS = ["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"]
OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
PARAMETERISED = "the API emulator does not evaluate parameterised policies"


def _expression_errors(path: str, expression: Any) -> list[FieldError]:
    if not isinstance(expression, str) or not expression.strip():
        return [required(path)]
    compiled = compile_expression(expression)
    if compiled.error is not None:
        return [invalid(path, expression, f"compilation failed: {compiled.error}")]
    return []


def _named_expressions(path: str, items: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, item in enumerate(items if isinstance(items, list) else []):
        where = f"{path}[{index}]"
        if not (item or {}).get("name"):
            errors.append(required(f"{where}.name"))
        errors += _expression_errors(f"{where}.expression", (item or {}).get("expression"))
    return errors


def _rules_errors(path: str, rules: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        where = f"{path}[{index}]"
        for key in ("apiGroups", "apiVersions", "operations", "resources"):
            if not (rule or {}).get(key):
                errors.append(required(f"{where}.{key}"))
        for op_index, operation in enumerate((rule or {}).get("operations") or []):
            if operation not in OPERATIONS:
                errors.append(
                    not_supported(f"{where}.operations[{op_index}]", operation, OPERATIONS)
                )
    return errors


def _match_errors(path: str, match: Any) -> list[FieldError]:
    match = match or {}
    return _rules_errors(f"{path}.resourceRules", match.get("resourceRules")) + _rules_errors(
        f"{path}.excludeResourceRules", match.get("excludeResourceRules")
    )


def validate_policy(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """A ValidatingAdmissionPolicy the plugin can evaluate as a real server would."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    if spec.get("paramKind") is not None:
        errors.append(forbidden("spec.paramKind", PARAMETERISED))
    policy = spec.get("failurePolicy")
    if policy is not None and policy not in FAILURE_POLICIES:
        errors.append(not_supported("spec.failurePolicy", policy, FAILURE_POLICIES))
    constraints = spec.get("matchConstraints")
    if not (constraints or {}).get("resourceRules"):
        errors.append(required("spec.matchConstraints.resourceRules"))
    errors += _match_errors("spec.matchConstraints", constraints)
    errors += _named_expressions("spec.matchConditions", spec.get("matchConditions"))
    errors += _named_expressions("spec.variables", spec.get("variables"))
    validations = spec.get("validations") or []
    if not validations and not spec.get("auditAnnotations"):
        errors.append(
            required(
                "spec.validations", "validations or auditAnnotations must contain at least one item"
            )
        )
    for index, validation in enumerate(validations):
        where = f"spec.validations[{index}]"
        errors += _expression_errors(f"{where}.expression", (validation or {}).get("expression"))
        if message_expression := (validation or {}).get("messageExpression"):
            errors += _expression_errors(f"{where}.messageExpression", message_expression)
        reason = (validation or {}).get("reason")
        if reason is not None and reason not in REASONS:
            errors.append(not_supported(f"{where}.reason", reason, REASONS))
    for index, annotation in enumerate(spec.get("auditAnnotations") or []):
        path = f"spec.auditAnnotations[{index}].valueExpression"
        errors += _expression_errors(path, (annotation or {}).get("valueExpression"))
    return errors


def validate_binding(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """A ValidatingAdmissionPolicyBinding: a policy name, known actions, no parameters."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    if not spec.get("policyName"):
        errors.append(required("spec.policyName"))
    if spec.get("paramRef") is not None:
        errors.append(forbidden("spec.paramRef", PARAMETERISED))
    actions = spec.get("validationActions")
    if not actions:
        errors.append(required("spec.validationActions"))
    for index, action in enumerate(actions or []):
        if action not in VALIDATION_ACTIONS:
            path = f"spec.validationActions[{index}]"
            errors.append(not_supported(path, action, VALIDATION_ACTIONS))
    if actions and "Deny" in actions and "Warn" in actions:
        errors.append(
            invalid(
                "spec.validationActions",
                actions,
                "must not contain both Deny and Warn (repeating the same validation failure "
                "information in the API response and headers serves no purpose)",
            )
        )
    errors += _match_errors("spec.matchResources", spec.get("matchResources"))
    return errors
