"""Bearer tokens the emulator knows and its TokenReview answer (`authentication.k8s.io/v1`).

The emulator serves every request whatever its token (it listens on loopback
only), but a webhook or extender that checks its callers asks the API server
who a token belongs to. Tests issue tokens for a user or a ServiceAccount and
the review answers as kube-apiserver does: `status.authenticated` and
`status.user` (username, uid, groups with `system:authenticated`), or
`authenticated: false` with an error for a token nobody issued.
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass
from typing import Any

from .errors import bad_request

TOKEN_REVIEWS_PATH = "/apis/authentication.k8s.io/v1/tokenreviews"
API_VERSION = "authentication.k8s.io/v1"
KIND = "TokenReview"
AUTHENTICATED = "system:authenticated"
KUBECONFIG_TOKEN = "emulator"
"""The token in the emulator's own kubeconfig: a cluster admin, as kind's kubeconfig is."""


@dataclass(frozen=True, slots=True)
class UserInfo:
    """Who a token authenticates, as `status.user` spells it."""

    username: str
    groups: tuple[str, ...]
    uid: str

    def status(self) -> dict[str, Any]:
        return {"username": self.username, "uid": self.uid, "groups": list(self.groups)}


class Tokens:
    """Issued tokens and their users; the kubeconfig's token is an admin from the start."""

    def __init__(self) -> None:
        self._users: dict[str, UserInfo] = {}
        self._add(KUBECONFIG_TOKEN, "kubernetes-admin", ("system:masters",))

    def issue(self, username: str, groups: tuple[str, ...] = ()) -> str:
        """A fresh token for `username`, member of `groups` (and system:authenticated)."""
        token = secrets.token_urlsafe(32)
        self._add(token, username, groups)
        return token

    def issue_service_account(self, namespace: str, name: str) -> str:
        """A token for ServiceAccount `namespace/name`, with the groups the real server gives."""
        return self.issue(
            f"system:serviceaccount:{namespace}:{name}",
            ("system:serviceaccounts", f"system:serviceaccounts:{namespace}"),
        )

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

    def _add(self, token: str, username: str, groups: tuple[str, ...]) -> None:
        self._users[token] = UserInfo(username, (*groups, AUTHENTICATED), str(uuid.uuid4()))
