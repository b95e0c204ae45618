"""What this process remembers per pod about where it sent the pod's claims.

kube-scheduler tells whether a pod can go to the node its claims were put on
only through the pod's PodScheduled condition, and a condition written before
our allocation landed is no verdict on it. So per pod uid: the node chosen and
the condition as of our completed write (only a later one counts), the nodes
a pod could not go to (avoided for a while), and the pod's move backoff.
When kube-scheduler's PostFilter took a pod's allocation back, the verdict of
that same cycle (written just after the clearing) may reach us only after the
pod's next allocation: the first condition after the one seen at the takeback
is that verdict, never one on the new node.

Pure bookkeeping; the sweeper decides moves from it, the node filter's caller
reads the avoided nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.object_state import ConditionSignature


@dataclass(slots=True)
class Placement:
    """Where this process sent a pod, and its PodScheduled condition at that moment."""

    node: str
    condition: ConditionSignature | None


class PodPlacements:
    """Per pod uid: the placement, the nodes to avoid (until when), the last move delay."""

    def __init__(self) -> None:
        self._placed: dict[str, Placement] = {}
        self._avoid: dict[str, dict[str, float]] = {}
        self._move_delays: dict[str, float] = {}
        self._taken_back: dict[str, ConditionSignature | None] = {}
        """Pods whose allocation PostFilter cleared -> their condition at that moment."""

    def sent(self, uid: str, node: str, condition: ConditionSignature | None) -> None:
        """The pod's claims are being written for `node`; `condition` is the one seen now."""
        self._placed[uid] = Placement(node, condition)
        self._verdict_seen(uid, condition)

    def written(self, uid: str, condition: ConditionSignature | None) -> None:
        """Our writes completed; only a condition after `condition` is about that node."""
        placed = self._placed.get(uid)
        if placed is not None and condition is not None:
            placed.condition = condition
        self._verdict_seen(uid, condition)

    def taken_back(self, uid: str, condition: ConditionSignature | None) -> None:
        """kube-scheduler cleared the pod's allocation (PostFilter); `condition` is the
        pod's condition now, before the verdict of that scheduling cycle."""
        self._taken_back[uid] = condition

    def takeback_verdict(self, uid: str, condition: ConditionSignature | None) -> bool:
        """True if `condition` is the verdict of the cycle that took the allocation back
        (the first one after it), not one on the node chosen since; it is then the
        baseline of the pod's placement."""
        if uid not in self._taken_back:
            return False
        if condition == self._taken_back[uid]:
            return True
        del self._taken_back[uid]
        placed = self._placed.get(uid)
        if placed is not None:
            placed.condition = condition
        return True

    def _verdict_seen(self, uid: str, condition: ConditionSignature | None) -> None:
        """A condition other than the one at the takeback was seen before or during our
        write: that was the takeback's verdict, so later ones are about our node."""
        if uid in self._taken_back and condition != self._taken_back[uid]:
            del self._taken_back[uid]

    def placed(self, uid: str) -> Placement | None:
        return self._placed.get(uid)

    def avoided(self, uid: str, now: float) -> set[str]:
        """The nodes the pod could not go to, still to be avoided at `now`."""
        return {node for node, until in self._avoid.get(uid, {}).items() if until > now}

    def moved(
        self,
        uid: str,
        node: str | None,
        avoid_until: float,
        initial_delay: float,
        max_delay: float,
    ) -> float:
        """The pod's claims leave `node`: avoid it until `avoid_until` (None: a claim
        another pod holds keeps the pod there), and the delay before allocating again
        (doubling from `initial_delay` per move, up to `max_delay`)."""
        delay = min(self._move_delays.get(uid, initial_delay / 2) * 2, max_delay)
        self._move_delays[uid] = delay
        if node is not None:
            self._avoid.setdefault(uid, {})[node] = avoid_until
        self._placed.pop(uid, None)
        return delay

    def forget(self, uid: str) -> None:
        """The pod finished or is gone."""
        for table in (self._placed, self._avoid, self._move_delays, self._taken_back):
            table.pop(uid, None)
