"""Which API calls each client made: RBAC's view per driver component, and write counts.

Two records, both fed from every request the server routes:

- `RECORDED` (process-wide, for the RBAC audit test): every request whose User-Agent
  is `vgpu-dra-driver/<component>` (KubeClient.for_component) is recorded as (verb,
  apiGroup, resource, subresource) under that component, with RBAC's verb names: a
  watch is `watch`, a list `list`, `pods/binding` a `create`. Process-wide, so calls
  from every emulator a test session starts add up; a set insert per request.
- `WriteAudit` (one per APIServer, `server.audit`): how many writes (create, update,
  patch, delete, deletecollection, subresources included) each client sent, by
  resource and subresource, and how many of them the server refused. Benches read it
  in-process to tell whose writes a scenario cost. A client is named by its
  User-Agent's first token without the version (`kube-scheduler`,
  `kube-controller-manager`), the driver's components keep their component
  (`vgpu-dra-driver/controller`). Two dictionary increments per write, cheap enough to
  stay on at 100k writes. Writes the emulator's own controllers make (claim
  deallocation, garbage collection, node lifecycle) send no request and are not counted.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import NamedTuple

from aiohttp import web

from dra_driver.kube.rest import USER_AGENT_PRODUCT

_PREFIX = f"{USER_AGENT_PRODUCT}/"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_WRITE_KEY = web.RequestKey("audit.write", tuple[str, str])
"""Where a write request remembers its count key, so a refusal can be counted too."""


class ApiCall(NamedTuple):
    verb: str
    group: str
    resource: str
    subresource: str

    @property
    def rbac_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


RECORDED: defaultdict[str, set[ApiCall]] = defaultdict(set)
"""component -> the calls it made."""


def record(user_agent: str, verb: str, group: str, resource: str, subresource: str = "") -> None:
    if user_agent.startswith(_PREFIX):
        RECORDED[user_agent[len(_PREFIX) :]].add(ApiCall(verb, group, resource, subresource))


def client_name(user_agent: str) -> str:
    """`vgpu-dra-driver/<component>` kept whole; any other agent's product without version
    (`kube-scheduler/v1.36.2 (linux/amd64) simulator` -> `kube-scheduler`)."""
    product = user_agent.split(" ", 1)[0]
    if product.startswith(_PREFIX):
        return product
    return product.split("/", 1)[0] or "unknown"


class WriteAudit:
    """Per-server write counts: {client: {"resource[/subresource]": n}}."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        """User-Agent -> client name, so each agent string is split once."""
        self._sent: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._refused: defaultdict[str, Counter[str]] = defaultdict(Counter)

    def request(
        self, request: web.Request, verb: str, group: str, resource: str, subresource: str = ""
    ) -> None:
        """Record one routed request (RBAC view always; a count when it writes)."""
        user_agent = request.headers.get("User-Agent", "")
        record(user_agent, verb, group, resource, subresource)
        if verb not in WRITE_VERBS:
            return
        name = self._names.get(user_agent)
        if name is None:
            name = self._names[user_agent] = client_name(user_agent)
        key = f"{resource}/{subresource}" if subresource else resource
        self._sent[name][key] += 1
        request[_WRITE_KEY] = (name, key)

    def refused(self, request: web.Request) -> None:
        """The request was answered with an error; counted if it was a write."""
        counted = request.get(_WRITE_KEY)
        if counted is not None:
            self._refused[counted[0]][counted[1]] += 1

    def write_counts(self) -> dict[str, dict[str, int]]:
        """Writes sent (accepted or refused) per client and resource[/subresource]."""
        return {name: dict(counts) for name, counts in self._sent.items()}

    def refused_counts(self) -> dict[str, dict[str, int]]:
        """Of those, the writes the server answered with an error (conflicts included)."""
        return {name: dict(counts) for name, counts in self._refused.items()}

    def reset(self) -> None:
        self._sent.clear()
        self._refused.clear()
