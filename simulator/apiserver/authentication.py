"""Bearer tokens the emulator knows, who each request is, and its TokenReview answer.

The emulator serves every request whatever its token (it listens on loopback
only and has no RBAC), but each request is made by someone: the user of its
bearer token, or `system:anonymous` for a token nobody issued or none. That
identity is what ValidatingAdmissionPolicies see as `request.userInfo`, and a
webhook or extender that checks its callers asks the TokenReview API about it.
Tests issue tokens for a user or a ServiceAccount; a ServiceAccount token may be
bound to a node and a pod as a pod's projected token is (the
ServiceAccountTokenPodNodeInfo extras). The review answers as kube-apiserver
does: `status.authenticated` and `status.user` (username, uid, groups with
`system:authenticated`, extra), or `authenticated: false` with an error.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import bad_request

TOKEN_REVIEWS_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
API_VERSION = "authentication.k8s.io/v1"
KIND = "TokenReview"
AUTHENTICATED = "system:authenticated"
ANONYMOUS = "system:anonymous"
UNAUTHENTICATED = "system:unauthenticated"
NODE_NAME = "authentication.kubernetes.io/node-name"
NODE_UID = "authentication.kubernetes.io/node-uid"
POD_NAME = "authentication.kubernetes.io/pod-name"
POD_UID = "authentication.kubernetes.io/pod-uid"
CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"
"""The extra keys of a bound ServiceAccount token, as kube-apiserver names them."""
KUBECONFIG_TOKEN = "emulator"
"""The token in the emulator's own kubeconfig: a cluster admin, as kind's kubeconfig is."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a token authenticates, as `status.user` spells it."""

    username: str
    groups: tuple[str, ...]
    uid: str
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def status(self) -> dict[str, Any]:
        out: dict[str, Any] = {"username": self.username, "uid": self.uid}
        out["groups"] = list(self.groups)
        if self.extra:
            out["extra"] = {key: list(values) for key, values in self.extra.items()}
        return out


ANONYMOUS_USER = UserInfo(ANONYMOUS, (UNAUTHENTICATED,), "")


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None for any other."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


class Tokens:
    """Issued tokens and their users; the kubeconfig's token is an admin from the start."""

    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}
        self._add(KUBECONFIG_TOKEN, "kubernetes-admin", ("system:masters",))

    def issue(
        self,
        username: str,
        groups: tuple[str, ...] = (),
        extra: Mapping[str, tuple[str, ...]] | None = None,
    ) -> str:
        """A fresh token for `username`, member of `groups` (and system:authenticated)."""
        token = secrets.token_urlsafe(32)
        self._add(token, username, groups, extra or {})
        return token

    def issue_service_account(
        self,
        namespace: str,
        name: str,
        *,
        node_name: str | None = None,
        node_uid: str | None = None,
        pod_name: str | None = None,
        pod_uid: str | None = None,
    ) -> str:
        """A token for ServiceAccount `namespace/name`, with the groups the real server gives.

        Bound to a node and/or a pod (a pod's projected token), it carries the extras a
        real bound token does: node-name (and node-uid when given), pod-name, pod-uid,
        and a credential-id."""
        extra: dict[str, tuple[str, ...]] = {}
        for key, value in (
            (NODE_NAME, node_name),
            (NODE_UID, node_uid),
            (POD_NAME, pod_name),
            (POD_UID, pod_uid),
        ):
            if value:
                extra[key] = (value,)
        if extra:
            extra[CREDENTIAL_ID] = (f"JTI={uuid.uuid4()}",)
        return self.issue(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
            extra,
        )

    def user(self, token: str | None) -> UserInfo:
        """Who makes a request with this bearer token: anonymous for none or an unknown one."""
        found = self._users.get(token) if token else None
        return ANONYMOUS_USER if found is None else found

    def review(self, body: Any) -> dict[str, Any]:
        """The TokenReview with its `status` filled in; 400 when `spec.token` is missing."""
        spec = body.get("spec") if isinstance(body, dict) else None
        token = spec.get("token") if isinstance(spec, dict) else None
        if not isinstance(token, str) or not token:
            raise bad_request(f"{KIND}.authentication.k8s.io: spec.token: Required value")
        user = self._users.get(token)
        status: dict[str, Any] = (
            {"authenticated": True, "user": user.status()}
            if user is not None
            else {"authenticated": False, "user": {}, "error": "invalid bearer token"}
        )
        return {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }

    def _add(
        self,
        token: str,
        username: str,
        groups: tuple[str, ...],
        extra: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self._users[token] = UserInfo(
            username, (*groups, AUTHENTICATED), str(uuid.uuid4()), dict(extra or {})
        )
