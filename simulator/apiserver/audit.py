"""Which API calls each driver component made, as RBAC sees them, for the RBAC audit test.

Every request whose User-Agent is `vgpu-dra-driver/<component>` (KubeClient.for_component)
is recorded as (verb, apiGroup, resource, subresource) under that component, with
RBAC's verb names: a watch is `watch`, a list `list`, `pods/binding` a `create`.
Process-wide, so calls from every emulator a test session starts add up; a set
insert per request, cheap enough to stay on.
"""

from __future__ import annotations

from collections import defaultdict
from typing import NamedTuple

from dra_driver.kube.rest import USER_AGENT_PRODUCT

_PREFIX = f"{USER_AGENT_PRODUCT}/"


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
