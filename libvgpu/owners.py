"""Who a cache file belongs to: namespace, pod, container and claim, for metric labels.

DRA cache dirs are named by claim UID, so a claim index (fed by claim
add/update/delete events, as plain dicts the way the API returns them) maps
them to the claim and the pods in `status.reservedFor`. Legacy dirs are named
`<podUID>_<container>`, so a pod index maps them to the pod. Both indexes are
pure and can be fed straight from watch events; each update replaces a whole
entry, so readers in another thread never see half an object.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from dra_driver.objects.pod_claims import reserving_pods
from libvgpu.cache_paths import CacheFileKey, CacheOwnerKind

WATCH_ADDED = "ADDED"
WATCH_MODIFIED = "MODIFIED"
WATCH_DELETED = "DELETED"


@dataclass(frozen=True)
class Owner:
    namespace: str
    pod: str
    container: str
    claim_uid: str = ""


@dataclass(frozen=True)
class PodRef:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str
    consumers: tuple[PodRef, ...]


class OwnerResolver(Protocol):
    def owners_of(self, key: CacheFileKey) -> Sequence[Owner]:
        """Owners to label the file's metrics with; empty when the owner is unknown."""
        ...


def _metadata(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    metadata = obj.get("metadata") or {}
    uid = metadata.get("uid")
    if not isinstance(uid, str) or not uid:
        return None
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), uid


class _Ref(Protocol):
    @property
    def uid(self) -> str: ...


RefT = TypeVar("RefT", bound=_Ref)


class _Index(ABC, Generic[RefT]):
    """Objects by UID, updated by informer-style callbacks or raw watch events."""

    def __init__(self) -> None:
        self._by_uid: dict[str, RefT] = {}

    @abstractmethod
    def _convert(self, obj: Mapping[str, Any]) -> RefT | None: ...

    def get(self, uid: str) -> RefT | None:
        return self._by_uid.get(uid)

    def on_add(self, obj: Mapping[str, Any]) -> None:
        converted = self._convert(obj)
        if converted is not None:
            self._by_uid[converted.uid] = converted

    def on_update(self, old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> None:
        self.on_add(new)

    def on_delete(self, obj: Mapping[str, Any]) -> None:
        identity = _metadata(obj)
        if identity is not None:
            self._by_uid.pop(identity[2], None)

    def apply_event(self, event_type: str, obj: Mapping[str, Any]) -> None:
        """Apply one watch event (`ADDED`, `MODIFIED`, `DELETED`); others are ignored."""
        if event_type in (WATCH_ADDED, WATCH_MODIFIED):
            self.on_add(obj)
        elif event_type == WATCH_DELETED:
            self.on_delete(obj)

    def __len__(self) -> int:
        return len(self._by_uid)


class PodIndex(_Index[PodRef]):
    def _convert(self, obj: Mapping[str, Any]) -> PodRef | None:
        identity = _metadata(obj)
        return None if identity is None else PodRef(*identity)


class ClaimIndex(_Index[ClaimRef]):
    def _convert(self, obj: Mapping[str, Any]) -> ClaimRef | None:
        identity = _metadata(obj)
        if identity is None:
            return None
        namespace, name, uid = identity
        consumers = tuple(PodRef(namespace, pod.name, pod.uid) for pod in reserving_pods(obj))
        return ClaimRef(namespace, name, uid, consumers)


class LegacyPodResolver:
    """`<podUID>_<container>` dirs: the pod from the index, the container from the dir name."""

    def __init__(self, pods: PodIndex) -> None:
        self._pods = pods

    def owners_of(self, key: CacheFileKey) -> Sequence[Owner]:
        if key.kind is not CacheOwnerKind.CONTAINER:
            return ()
        pod = self._pods.get(key.uid)
        if pod is None:
            return ()
        return (Owner(pod.namespace, pod.name, key.container),)


class ClaimResolver:
    """Claim dirs: one owner per pod reserving the claim (they share its devices).

    A prepared claim nobody reserves any more still reports, with an empty pod,
    until its directory goes.
    """

    def __init__(self, claims: ClaimIndex) -> None:
        self._claims = claims

    def owners_of(self, key: CacheFileKey) -> Sequence[Owner]:
        if key.kind is not CacheOwnerKind.CLAIM:
            return ()
        claim = self._claims.get(key.uid)
        if claim is None:
            return ()
        if not claim.consumers:
            return (Owner(claim.namespace, "", "", claim.uid),)
        return tuple(Owner(pod.namespace, pod.name, "", claim.uid) for pod in claim.consumers)


class CombinedResolver:
    """Asks each resolver in turn; the first with an answer wins."""

    def __init__(self, *resolvers: OwnerResolver) -> None:
        self._resolvers = resolvers

    def owners_of(self, key: CacheFileKey) -> Sequence[Owner]:
        for resolver in self._resolvers:
            owners = resolver.owners_of(key)
            if owners:
                return owners
        return ()
