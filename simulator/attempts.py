"""Tamper attempts in a scenario: what a tenant tries, as whom, and how it came out.

A scenario's Kubernetes objects are what the administrator applies; a
`TamperAttempt` document (simulator-only, never sent to the API server) is
something a tenant does after the cluster has settled, to lift or forge a
share: create objects, patch one (a subresource too), or call the legacy
scheduler's /bind or /filter with wrong credentials. Each attempt runs as the
identity it names, so the admission policies and the webhook judge it as they
would a real tenant's request; the simulation then says whether it was
refused, neutralised (it went through but the limits hold), or ALLOWED (the
bypass worked: a bug, and the run exits 1).

    apiVersion: simulate.vgpu.hami.io/v1alpha1
    kind: TamperAttempt
    metadata: {name: <name>}
    spec:
      description: <what the tenant tries>
      as: {user: alice} | {serviceAccount: <namespace>/<name>, node: <node>}
      create: <object> | [<object>, ...]
      # or patch: {kind: Pod|Node|ResourceClaim|..., name, namespace, subresource, body}
      # or call: {path: /bind|/filter, credentials: none|untrusted-certificate|other-identity,
      #           pod: <name>, node: <node>}

Pure: parsing only; `tamper.py` runs the attempts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from dra_driver.errors import InvalidParameterError

API_VERSION = "simulate.vgpu.hami.io/v1alpha1"
KIND = "TamperAttempt"
MODES_ANNOTATION = "simulate.vgpu.hami.io/modes"
"""On any scenario document: the comma-separated modes it applies to (absent: all)."""
ACTIONS = ("create", "patch", "call")
CALL_PATHS = ("/bind", "/filter")


class Credentials(StrEnum):
    """What a `call` attempt presents to the legacy scheduler."""

    NONE = "none"
    """No client certificate, no bearer token."""
    UNTRUSTED_CERTIFICATE = "untrusted-certificate"
    """A client certificate with kube-scheduler's name from a CA the server does not trust."""
    OTHER_IDENTITY = "other-identity"
    """A bearer token the API server vouches for, of the attempt's `as` identity."""


class Outcome(StrEnum):
    REFUSED = "refused"
    """An API error, a policy or webhook denial, an HTTP 401/403, a refusal at prepare."""
    NEUTRALISED = "neutralised"
    """It went through, but the limits hold: a pinned variable, a dropped opt-out."""
    ALLOWED = "ALLOWED"
    """The bypass worked: a bug."""


@dataclass(frozen=True, slots=True)
class Identity:
    """Who an attempt runs as: a user, or a ServiceAccount (bound to a node and a pod when
    given)."""

    user: str = ""
    service_account: tuple[str, str] | None = None
    """(namespace, name)."""
    node: str = ""
    """The node a ServiceAccount token is bound to (its `node-name` extra)."""
    pod: str = ""
    """The pod a ServiceAccount token is bound to (its `pod-name` and `pod-uid` extras), as
    the projected token kubelet mounts in a pod is."""
    groups: tuple[str, ...] = ()
    """A user's groups besides `system:authenticated` (a ServiceAccount gets its own)."""

    @property
    def username(self) -> str:
        if self.service_account is not None:
            namespace, name = self.service_account
            return f"system:serviceaccount:{namespace}:{name}"
        return self.user


@dataclass(frozen=True, slots=True)
class Patch:
    kind: str
    name: str
    namespace: str | None
    subresource: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Call:
    path: str
    credentials: Credentials
    pod: str = ""
    """For /bind and /filter: the pod named in the arguments (its uid is looked up)."""
    node: str = ""
    """For /bind: the node to bind to."""


@dataclass(frozen=True, slots=True)
class TamperAttempt:
    source: str
    """`file.yaml#<document index>`, for messages."""
    name: str
    description: str
    identity: Identity | None
    create: tuple[dict[str, Any], ...] = ()
    patch: Patch | None = None
    call: Call | None = None

    @property
    def action(self) -> str:
        """What the attempt does, in a few words, for the report."""
        if self.patch is not None:
            target = f"{self.patch.kind} {self.patch.name}"
            return f"patch {target}" + (
                f"/{self.patch.subresource}" if self.patch.subresource else ""
            )
        if self.call is not None:
            return f"POST {self.call.path} ({self.call.credentials.value})"
        shown = [
            f"{o.get('kind')} {(o.get('metadata') or {}).get('name', '')}" for o in self.create
        ]
        return "create " + ", ".join(shown)


@dataclass
class AttemptReport:
    """How one attempt came out, and why (the message that refused it, what was pinned)."""

    name: str
    description: str
    identity: str
    action: str
    outcome: Outcome
    reason: str
    details: list[str] = field(default_factory=list)
    """For a neutralised pod: `NAME: pod value -> pinned value` per variable."""


def document_modes(document: Mapping[str, Any], source: str, known: tuple[str, ...]) -> set[str]:
    """The modes a scenario document applies to (every mode when it does not say)."""
    annotations = (document.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(MODES_ANNOTATION)
    if raw is None:
        return set(known)
    modes = {part.strip() for part in str(raw).split(",") if part.strip()}
    unknown = sorted(modes - set(known))
    if unknown or not modes:
        raise InvalidParameterError(
            f"{source}: metadata.annotations[{MODES_ANNOTATION}]",
            f"{raw!r} must be a comma-separated list of {', '.join(known)}",
        )
    return modes


def parse_attempt(document: Mapping[str, Any], source: str) -> TamperAttempt:
    """A TamperAttempt document checked field by field; errors name the document and field."""
    if document.get("apiVersion") != API_VERSION:
        raise InvalidParameterError(
            f"{source}: apiVersion", f"{KIND} needs apiVersion {API_VERSION}"
        )
    name = (document.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise InvalidParameterError(f"{source}: metadata.name", "a TamperAttempt needs a name")
    where = f"{source} ({KIND} {name})"
    spec = document.get("spec")
    if not isinstance(spec, dict):
        raise InvalidParameterError(f"{where}: spec", "must be a mapping")
    chosen = [action for action in ACTIONS if action in spec]
    if len(chosen) != 1:
        raise InvalidParameterError(
            f"{where}: spec", f"needs exactly one of {', '.join(ACTIONS)}, has {chosen or 'none'}"
        )
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise InvalidParameterError(f"{where}: spec.description", "must be a string")
    identity = _identity(spec.get("as"), where) if "as" in spec else None
    action = chosen[0]
    if action == "call":
        call = _call(spec["call"], where)
        if call.credentials is Credentials.OTHER_IDENTITY and identity is None:
            raise InvalidParameterError(
                f"{where}: spec.as", "credentials other-identity presents the token of `as`"
            )
        return TamperAttempt(source, name, description, identity, call=call)
    if identity is None:
        raise InvalidParameterError(f"{where}: spec.as", f"{action} needs the identity it runs as")
    if action == "patch":
        return TamperAttempt(
            source, name, description, identity, patch=_patch(spec["patch"], where)
        )
    return TamperAttempt(
        source, name, description, identity, create=_objects(spec["create"], where)
    )


def _identity(raw: Any, where: str) -> Identity:
    if not isinstance(raw, dict) or ("user" in raw) == ("serviceAccount" in raw):
        raise InvalidParameterError(
            f"{where}: spec.as", "must be {user: <name>} or {serviceAccount: <namespace>/<name>}"
        )
    node = raw.get("node", "")
    if not isinstance(node, str):
        raise InvalidParameterError(f"{where}: spec.as.node", "must be a node name")
    unknown = sorted(set(raw) - {"user", "serviceAccount", "node"})
    if unknown:
        raise InvalidParameterError(f"{where}: spec.as.{unknown[0]}", "is not a field of as")
    if "user" in raw:
        if not isinstance(raw["user"], str) or not raw["user"]:
            raise InvalidParameterError(f"{where}: spec.as.user", "must be a user name")
        if node:
            raise InvalidParameterError(f"{where}: spec.as.node", "only a ServiceAccount is bound")
        return Identity(user=raw["user"])
    namespace, _, account = str(raw["serviceAccount"]).partition("/")
    if not namespace or not account or "/" in account:
        raise InvalidParameterError(
            f"{where}: spec.as.serviceAccount",
            f"{raw['serviceAccount']!r} is not <namespace>/<name>",
        )
    return Identity(service_account=(namespace, account), node=node)


def _objects(raw: Any, where: str) -> tuple[dict[str, Any], ...]:
    objects = raw if isinstance(raw, list) else [raw]
    for index, obj in enumerate(objects):
        field_path = f"spec.create[{index}]" if isinstance(raw, list) else "spec.create"
        if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
            raise InvalidParameterError(f"{where}: {field_path}", "must be a Kubernetes object")
        if not (obj.get("metadata") or {}).get("name"):
            raise InvalidParameterError(f"{where}: {field_path}.metadata.name", "is required")
    if not objects:
        raise InvalidParameterError(f"{where}: spec.create", "names no object")
    return tuple(objects)


def _patch(raw: Any, where: str) -> Patch:
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"{where}: spec.patch", "must be a mapping")
    for key in ("kind", "name"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise InvalidParameterError(f"{where}: spec.patch.{key}", "is required")
    if not isinstance(raw.get("body"), dict):
        raise InvalidParameterError(f"{where}: spec.patch.body", "must be a merge patch (mapping)")
    namespace = raw.get("namespace")
    subresource = raw.get("subresource", "")
    if not isinstance(subresource, str):
        raise InvalidParameterError(f"{where}: spec.patch.subresource", "must be a string")
    return Patch(raw["kind"], raw["name"], namespace, subresource, raw["body"])


def _call(raw: Any, where: str) -> Call:
    if not isinstance(raw, dict):
        raise InvalidParameterError(f"{where}: spec.call", "must be a mapping")
    if raw.get("path") not in CALL_PATHS:
        raise InvalidParameterError(
            f"{where}: spec.call.path", f"{raw.get('path')!r} is not one of {', '.join(CALL_PATHS)}"
        )
    try:
        credentials = Credentials(raw.get("credentials"))
    except ValueError:
        raise InvalidParameterError(
            f"{where}: spec.call.credentials",
            f"{raw.get('credentials')!r} is not one of {', '.join(c.value for c in Credentials)}",
        ) from None
    pod, node = raw.get("pod", ""), raw.get("node", "")
    if not isinstance(pod, str) or not isinstance(node, str):
        raise InvalidParameterError(f"{where}: spec.call", "pod and node are names")
    if not pod:
        raise InvalidParameterError(f"{where}: spec.call.pod", "names the pod the call is about")
    if raw["path"] == "/bind" and not node:
        raise InvalidParameterError(f"{where}: spec.call.node", "/bind needs the node to bind to")
    return Call(raw["path"], credentials, pod, node)
