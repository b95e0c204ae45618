"""The param objects a ValidatingAdmissionPolicyBinding hands its policy, as kube-apiserver
v1.36's CollectParams finds them.

A policy's `paramKind` names a served kind; a binding's `paramRef` names one object of
it (`name`) or selects several (`selector`), in `paramRef.namespace` or else in the
request's namespace when the kind is namespaced. Each param found is one evaluation of
the policy with `params` bound to it (with the paramKind's apiVersion and kind, as the
real server's wrappedParam adds them); none found is no evaluation under
`parameterNotFoundAction: Allow` and an error under `Deny`. A policy without
paramKind, or a binding without paramRef, is evaluated once with `params` null.

The real server reads params from an informer, so a param written a moment ago may
not be seen yet (a direct GET covers a name its cache misses); the emulator reads its
store, so every write sees the param as last written. Errors are worded as the real
ones; the dispatcher prefixes them (`failed to configure policy: ` / `binding: `) and
applies the policy's failurePolicy. Pure over the store.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conversion import PRESENTERS
from .policy_matching import requirements
from .registry import Registry, ResourceType
from .selectors import labels_match
from .store import Storage

NOT_FOUND = "no params found for policy binding with `Deny` parameterNotFoundAction"


class ParamError(Exception):
    """Why a policy or a binding cannot be evaluated: the real server's words."""


def _group_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


class ParamSource:
    """Finds a paramKind's resource type and a binding's param objects in the store."""

    def __init__(self, storage: Storage, registry: Registry) -> None:
        self._storage = storage
        self._by_kind = {(r.group, r.version, r.kind): r for r in registry.resources}

    def resource(self, param_kind: Mapping[str, Any] | None) -> ResourceType | None:
        """The resource type of the policy's paramKind (None without paramKind);
        ParamError when the kind is not served: a configuration error of the policy."""
        if param_kind is None:
            return None
        group, version = _group_version(str(param_kind.get("apiVersion") or ""))
        kind = str(param_kind.get("kind") or "")
        found = self._by_kind.get((group, version, kind))
        if found is None:
            raise ParamError(
                f"failed to find resource referenced by paramKind: '{group}/{version}, Kind={kind}'"
            )
        return found

    def collect(
        self,
        param_kind: Mapping[str, Any] | None,
        param_ref: Mapping[str, Any] | None,
        namespace: str,
    ) -> list[dict[str, Any] | None]:
        """The params to evaluate the policy with for one binding and a request in
        `namespace`: [None] without paramKind or paramRef; ParamError as the real
        CollectParams errs."""
        resource = self.resource(param_kind)
        if resource is None or param_ref is None or param_kind is None:
            return [None]
        ref_namespace = str(param_ref.get("namespace") or "")
        if resource.namespaced:
            ref_namespace = ref_namespace or namespace
            if not ref_namespace:
                raise ParamError(
                    "cannot use namespaced paramRef in policy binding that matches "
                    "cluster-scoped resources"
                )
        elif ref_namespace:
            raise ParamError(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
            )
        objects = self._storage.bucket(resource).objects
        if name := param_ref.get("name"):
            found = objects.get((ref_namespace, str(name)))
            params = [] if found is None else [found]
        else:
            wanted = requirements(param_ref.get("selector") or {})
            params = [
                obj
                for (space, _), obj in sorted(objects.items())
                if space == ref_namespace and labels_match(wanted, obj)
            ]
        if not params and param_ref.get("parameterNotFoundAction") == "Deny":
            raise ParamError(NOT_FOUND)
        return [_typed(resource, param_kind, obj) for obj in params]


def _typed(
    resource: ResourceType, param_kind: Mapping[str, Any], obj: dict[str, Any]
) -> dict[str, Any]:
    """The param as CEL sees it: in its resource's form, typed as the paramKind says."""
    presenter = PRESENTERS.get(resource.key)
    shown = obj if presenter is None else presenter(obj)
    return {**shown, "apiVersion": param_kind["apiVersion"], "kind": param_kind["kind"]}
