"""The rules of HAMi's node lock (`hami.io/mutex.lock`), shared by Bind and Allocate.

The extender's Bind takes the lock before binding a pod to a node; the device
plugin's Allocate serves the pod the lock names and then releases it. Both
sides must agree on who holds the lock and when it may be taken over, so the
decisions live here, pure: the caller reads the node (and, when asked, whether
the holder still exists) and writes the result with a resourceVersion
precondition. Reference: hami-protocol.md §4 step 2, §7, §11 items 2-4.

Rules:
- no lock: free;
- the same pod's lock: held (re-entrant; also the retry after a lost patch
  response sees its own lock);
- older than the timeout: expired, taken over;
- another pod's young lock: the caller checks whether that pod still exists
  and is not terminated; if not, the lock is dangling and taken over,
  otherwise acquisition is blocked;
- a bare timestamp (HAMi's old format) names no owner: it blocks while young,
  cannot be dangling, and any pod may release it;
- an unparsable value is an error, never silently overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from api.hami_annotations import AnnotationDecodeError, NodeLock, decode_node_lock, encode_node_lock
from dra_driver.errors import DriverError

DEFAULT_LOCK_TIMEOUT = timedelta(minutes=5)
"""HAMi's `--node-lock-timeout` (env HAMI_NODELOCK_EXPIRE) default."""


class NodeLockError(DriverError):
    """The lock annotation cannot be read, or the lock is held by someone else."""

    def __init__(self, node: str, message: str) -> None:
        super().__init__(f"node {node}: {message}")
        self.node = node
        self.reason = message


class NodeLockBusyError(NodeLockError):
    """Another pod holds the lock and may not be displaced yet: waiting may help."""


class LockState(StrEnum):
    """What an acquirer finds on the node."""

    FREE = "free"
    OWN = "own"
    EXPIRED = "expired"
    CONTENDED = "contended"
    """Another pod's young lock: take it over only if that pod is gone."""
    BLOCKED = "blocked"
    """A young lock without an owner (old format): wait for it to expire."""


@dataclass(frozen=True, slots=True)
class LockView:
    """The lock on a node as an acquirer sees it."""

    state: LockState
    holder: NodeLock | None = None

    def describe(self) -> str:
        if self.holder is None:
            return "unlocked"
        stamp = encode_node_lock(NodeLock(self.holder.locked_at))
        if self.holder.pod:
            return f"locked by {self.holder.namespace}/{self.holder.pod} since {stamp}"
        return f"locked since {stamp} (no owner recorded)"


def read_lock(node: str, value: str | None) -> NodeLock | None:
    """The lock on `node`, or None when there is none; an unparsable value raises."""
    if value is None or value == "":
        return None
    try:
        return decode_node_lock(value)
    except AnnotationDecodeError as error:
        raise NodeLockError(node, f"unreadable lock {value!r}: {error.reason}") from error


def view_lock(
    node: str,
    value: str | None,
    namespace: str,
    pod: str,
    now: datetime,
    timeout: timedelta = DEFAULT_LOCK_TIMEOUT,
) -> LockView:
    """Classify the lock for pod `namespace/pod` wanting it at `now`."""
    holder = read_lock(node, value)
    if holder is None:
        return LockView(LockState.FREE)
    if holder.namespace == namespace and holder.pod == pod:
        return LockView(LockState.OWN, holder)
    if now - holder.locked_at > timeout:
        return LockView(LockState.EXPIRED, holder)
    if not holder.pod:
        return LockView(LockState.BLOCKED, holder)
    return LockView(LockState.CONTENDED, holder)


def may_acquire(view: LockView, holder_alive: bool) -> bool:
    """Whether to write our lock: free, own, expired, or a contended lock whose pod is gone."""
    if view.state is LockState.CONTENDED:
        return not holder_alive
    return view.state is not LockState.BLOCKED


def lock_value(namespace: str, pod: str, now: datetime) -> str:
    """The annotation value for pod `namespace/pod` taking the lock at `now`."""
    return encode_node_lock(NodeLock(now, namespace, pod))


def may_release(node: str, value: str | None, namespace: str, pod: str) -> bool:
    """Whether pod `namespace/pod` may remove the lock: its own, or an ownerless one.

    Another pod's lock is left alone (releasing it would let a third pod in
    while that pod is still being allocated); no lock means nothing to do.
    """
    holder = read_lock(node, value)
    if holder is None:
        return False
    return not holder.pod or (holder.namespace == namespace and holder.pod == pod)
