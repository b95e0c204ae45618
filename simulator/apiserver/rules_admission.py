"""admissionregistration.k8s.io/v1 write rules: ValidatingAdmissionPolicy and its binding.

What the real server refuses in these objects and the policy plugin
(admission_policies.py) relies on: the enumerated fields (failurePolicy,
validationActions, a validation's reason, operations), required expressions
and names, and CEL that compiles, a policy's `paramKind` (apiVersion and kind as the real
validateParamKind words them) and a binding's `paramRef` (a name or a selector,
never both; parameterNotFoundAction Allow or Deny). One refusal is the
emulator's own, because it cannot honour what a real server would: an
expression in CEL optional syntax or using `authorizer` (see policy_cel.py). A
refusal is a 422 naming the field, so a test finds out at once instead of
seeing a policy that never denies. Pure; it may call the emulator's errors,
validation and policy_cel.
"""

from __future__ import annotations

import re
from typing import Any

from .errors import FieldError, forbidden, invalid, not_supported, required
from .policy_cel import compile_expression
from .validation import dns_subdomain

FAILURE_POLICIES = ["Fail", "Ignore"]
VALIDATION_ACTIONS = ["Deny", "Warn", "Audit"]
REASONS = ["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"]
OPERATIONS = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"]
PARAMETER_NOT_FOUND_ACTIONS = ["Deny", "Allow"]
_DNS_1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
DNS_1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)
_EXCLUSIVE = "name and selector are mutually exclusive"


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


def _dns_1035_label(value: str) -> list[str]:
    """IsDNS1035Label's messages for `value` (none when it is one)."""
    messages = []
    if len(value) > 63:
        messages.append("must be no more than 63 characters")
    if not _DNS_1035_LABEL.fullmatch(value):
        messages.append(DNS_1035_MESSAGE)
    return messages


def _param_kind_errors(path: str, param_kind: Any) -> list[FieldError]:
    """validateParamKind: `group/version` (or a core `version`) and a kind."""
    param_kind = param_kind if isinstance(param_kind, dict) else {}
    errors: list[FieldError] = []
    api_version = str(param_kind.get("apiVersion") or "")
    if not api_version:
        errors.append(required(f"{path}.apiVersion"))
    elif api_version.count("/") > 1:
        reason = f"unexpected GroupVersion string: {api_version}"
        errors.append(invalid(f"{path}.apiVersion", api_version, reason))
    else:
        group, _, version = api_version.rpartition("/")
        if group and (found := dns_subdomain(f"{path}.apiVersion", group)):
            reason = ",".join(error.detail for error in found)
            errors.append(invalid(f"{path}.apiVersion", group, reason))
        if not version:
            reason = "version must be specified"
            errors.append(invalid(f"{path}.apiVersion", api_version, reason))
        elif messages := _dns_1035_label(version):
            errors.append(invalid(f"{path}.apiVersion", version, ",".join(messages)))
    kind = str(param_kind.get("kind") or "")
    if not kind:
        errors.append(required(f"{path}.kind"))
    elif messages := _dns_1035_label(kind.lower()):
        reason = "may have mixed case, but should otherwise match: " + ",".join(messages)
        errors.append(invalid(f"{path}.kind", kind, reason))
    return errors


def _path_segment_errors(path: str, name: str) -> list[FieldError]:
    """ValidatePathSegmentName: a name that can be one segment of a URL path."""
    if name in (".", ".."):
        return [invalid(path, name, f"may not be '{name}'")]
    return [invalid(path, name, f"may not contain '{c}'") for c in ("/", "%") if c in name]


def _selector_errors(path: str, selector: Any) -> list[FieldError]:
    """ValidateLabelSelector's checks on the operators and their values."""
    errors: list[FieldError] = []
    expressions = (selector or {}).get("matchExpressions") if isinstance(selector, dict) else []
    for index, requirement in enumerate(expressions or []):
        where = f"{path}.matchExpressions[{index}]"
        operator, values = (requirement or {}).get("operator"), (requirement or {}).get("values")
        if operator in ("In", "NotIn") and not values:
            detail = "must be specified when `operator` is 'In' or 'NotIn'"
            errors.append(required(f"{where}.values", detail))
        elif operator in ("Exists", "DoesNotExist") and values:
            detail = "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
            errors.append(forbidden(f"{where}.values", detail))
        elif operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            errors.append(invalid(f"{where}.operator", operator, "not a valid selector operator"))
    return errors


def _param_ref_errors(path: str, param_ref: Any) -> list[FieldError]:
    """validateParamRef: a name or a selector, and what to do when nothing is found."""
    param_ref = param_ref if isinstance(param_ref, dict) else {}
    errors: list[FieldError] = []
    name, selector = param_ref.get("name") or "", param_ref.get("selector")
    if name:
        errors += _path_segment_errors(f"{path}.name", str(name))
        if selector is not None:
            errors.append(forbidden(f"{path}.name", _EXCLUSIVE))
    if selector is not None:
        errors += _selector_errors(f"{path}.selector", selector)
        if name:
            errors.append(forbidden(f"{path}.selector", _EXCLUSIVE))
    if not name and selector is None:
        errors.append(required(path, "one of name or selector must be specified"))
    action = param_ref.get("parameterNotFoundAction")
    if not action:
        errors.append(required(f"{path}.parameterNotFoundAction"))
    elif action not in PARAMETER_NOT_FOUND_ACTIONS:
        path_action = f"{path}.parameterNotFoundAction"
        errors.append(not_supported(path_action, action, PARAMETER_NOT_FOUND_ACTIONS))
    return errors


def validate_policy(obj: dict[str, Any], old: dict[str, Any] | None) -> list[FieldError]:
    """A ValidatingAdmissionPolicy the plugin can evaluate as a real server would."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    if spec.get("paramKind") is not None:
        errors += _param_kind_errors("spec.paramKind", spec["paramKind"])
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
    """A ValidatingAdmissionPolicyBinding: a policy name, known actions, a usable paramRef."""
    spec = obj.get("spec") or {}
    errors: list[FieldError] = []
    if not spec.get("policyName"):
        errors.append(required("spec.policyName"))
    if spec.get("paramRef") is not None:
        errors += _param_ref_errors("spec.paramRef", spec["paramRef"])
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
