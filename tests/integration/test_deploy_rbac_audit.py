"""RBAC audit: each component's roles in deploy/ against the API calls it actually made.

Every component sends `User-Agent: vgpu-dra-driver/<component>` and the API emulator
records its calls as RBAC sees them (sim.apiserver.audit). Run last (tests/conftest.py),
after every integration and component test, this fails on a call that the component's
ServiceAccount may not make (it would be a 403 on a real cluster) and on a rule no call
used (privilege it does not need). Roles are read from the deploy/ YAML files directly:
no kustomize patch touches RBAC, so this needs no kubectl.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import yaml
from rbac_audit_scope import missing_suite_files

from simulator.apiserver.audit import RECORDED, ApiCall

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
NAMESPACE = "vgpu-system"

COMPONENTS = {
    "kubelet-plugin": "vgpu-kubelet-plugin",
    "device-plugin": "vgpu-device-plugin",
    "controller": "vgpu-controller",
    "legacy-scheduler": "vgpu-legacy-scheduler",
    "monitor": "vgpu-monitor",
    "certs": "vgpu-certs",
}
"""User-Agent component -> its ServiceAccount in deploy/. (vgpu-kube-scheduler is
kube-scheduler itself, bound to its built-in roles: not audited here.)"""


class Permission(NamedTuple):
    verb: str
    group: str
    resource: str
    """With its subresource, as RBAC writes it: `pods/binding`."""


REQUIRED_NOT_OBSERVABLE = {
    # Kubernetes 1.36, DRAResourceClaimGranularStatusAuthorization (beta): writing
    # status.allocation through resourceclaims/status also needs the synthetic
    # subresource resourceclaims/binding (reference kubernetes-dra.md §2). It is an
    # authorization check inside the real API server; no request names it, so the
    # emulator cannot observe it. The verb matches the status write the controller makes.
    Permission("update", "resource.k8s.io", "resourceclaims/binding"): "controller",
}


def _documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        if path.name != "kustomization.yaml":
            docs += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return docs


def _expand(rules: Iterable[dict[str, Any]]) -> set[Permission]:
    return {
        Permission(verb, group, resource)
        for rule in rules
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for verb in rule.get("verbs", [])
    }


def granted_permissions() -> dict[str, set[Permission]]:
    """ServiceAccount name -> what its Roles and ClusterRoles in deploy/ grant."""
    docs = _documents()
    roles = {
        (doc["kind"], doc["metadata"]["name"]): doc.get("rules", [])
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
    }
    granted: dict[str, set[Permission]] = defaultdict(set)
    for binding in (d for d in docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        ref = binding["roleRef"]
        for subject in binding["subjects"]:
            if subject["kind"] == "ServiceAccount" and subject["namespace"] == NAMESPACE:
                granted[subject["name"]] |= _expand(roles.get((ref["kind"], ref["name"]), []))
    return granted


def _allows(granted: set[Permission], call: ApiCall) -> bool:
    return any(
        p.verb in (call.verb, "*")
        and p.group in (call.group, "*")
        and p.resource in (call.rbac_resource, "*")
        for p in granted
    )


def _used(permission: Permission, calls: set[ApiCall]) -> bool:
    return any((call.verb, call.group, call.rbac_resource) == permission for call in calls)


@pytest.fixture
def recorded(request: pytest.FixtureRequest) -> dict[str, set[ApiCall]]:
    missing = missing_suite_files(request.config)
    if missing:
        names = ", ".join(path.name for path in missing[:3])
        pytest.skip(
            f"the RBAC audit needs the whole integration and component suites in the run; "
            f"{len(missing)} test files were not run ({names}, ...)"
        )
    if request.session.testsfailed:
        pytest.skip("other tests failed: their components' calls were not all recorded")
    return {component: set(calls) for component, calls in RECORDED.items()}


def test_every_component_that_calls_the_api_has_a_service_account(recorded) -> None:
    unknown = sorted(set(recorded) - set(COMPONENTS))
    assert not unknown, f"components calling the API with no ServiceAccount in deploy/: {unknown}"
    silent = sorted(set(COMPONENTS) - set(recorded))
    assert not silent, f"components the tests never ran against the API: {silent}"


@pytest.mark.parametrize("component", sorted(COMPONENTS))
def test_component_calls_are_allowed_and_every_rule_is_used(component: str, recorded) -> None:
    account = COMPONENTS[component]
    granted = granted_permissions()[account]
    calls = recorded.get(component, set())
    denied = sorted(
        f"{c.verb} {c.group or 'core'}/{c.rbac_resource}" for c in calls if not _allows(granted, c)
    )
    assert not denied, f"{component} ({account}) would be refused (403): {denied}"
    not_observable = {p for p, owner in REQUIRED_NOT_OBSERVABLE.items() if owner == component}
    unused = sorted(
        f"{p.verb} {p.group or 'core'}/{p.resource}"
        for p in granted - not_observable
        if not _used(p, calls)
    )
    assert not unused, f"{component} ({account}) is granted what it never uses: {unused}"
    assert not_observable <= granted, f"{component} lacks {not_observable - granted}"


def test_the_audit_logic_tells_allowed_from_denied_and_used_from_unused() -> None:
    """Always runs (no recordings needed): the matching the audit relies on."""
    granted = _expand(
        [
            {"apiGroups": [""], "resources": ["pods", "pods/binding"], "verbs": ["get", "create"]},
            {"apiGroups": ["resource.k8s.io"], "resources": ["*"], "verbs": ["list"]},
        ]
    )
    assert _allows(granted, ApiCall("create", "", "pods", "binding"))
    assert _allows(granted, ApiCall("list", "resource.k8s.io", "deviceclasses", ""))
    assert not _allows(granted, ApiCall("patch", "", "pods", ""))
    assert not _allows(granted, ApiCall("create", "", "pods", "eviction"))
    assert not _allows(granted, ApiCall("list", "", "pods", ""))
    calls = {ApiCall("get", "", "pods", ""), ApiCall("create", "", "pods", "binding")}
    assert _used(Permission("create", "", "pods/binding"), calls)
    assert not _used(Permission("create", "", "pods"), calls)
    assert not _used(Permission("get", "", "pods/binding"), calls)


def test_every_audited_service_account_has_roles_in_deploy() -> None:
    granted = granted_permissions()
    assert all(granted[account] for account in COMPONENTS.values()), {
        account: len(granted[account]) for account in COMPONENTS.values()
    }
    (owner,) = set(REQUIRED_NOT_OBSERVABLE.values())
    assert set(REQUIRED_NOT_OBSERVABLE) <= granted[COMPONENTS[owner]]


def test_the_certs_job_reads_and_replaces_only_the_secrets_it_names() -> None:
    """Always runs: the Secrets `vgpu-certs` may get and update are exactly the serving
    and client Secrets its Job's flags name; only create (which RBAC cannot limit by
    name) is namespace-wide."""
    docs = _documents()
    (job,) = [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "vgpu-certs"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    flags = dict(arg.split("=", 1) for arg in container["args"] if arg.startswith("--"))
    named = {flags["--secret"], flags["--client-secret"]}
    (role,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "vgpu-certs"]
    secret_rules = [r for r in role["rules"] if "secrets" in r["resources"]]
    by_name = {
        verb: set(r.get("resourceNames", ["*"])) for r in secret_rules for verb in r["verbs"]
    }
    assert by_name == {"get": named, "update": named, "create": {"*"}}
