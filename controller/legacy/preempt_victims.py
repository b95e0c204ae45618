"""Which share holders on one node the legacy preempt verb adds as victims. Pure.

A share is what one legacy pod's annotations or one DRA claim's allocation
(mixed mode) hold on the node, with the pods that hold it: a legacy pod holds
its own, a claim is held by every entry of its `status.reservedFor`. A share
frees only when every one of its holders is removed, so a claim shared with a
pod that stays, or reserved for anything the cache does not know (which can
never be a victim), frees nothing; nor does a claim reserved for nobody, whose
allocation no pod deletion ends.

kube-scheduler's reprieve (`SelectVictimsOnNode`) over those holders: every
removable one removed beside the victims already chosen; no fit then, and the
node is no candidate; else each is returned most important first and kept when
the pod still fits with the shares it frees back. The others are the added
victims: the fewest, of the lowest priority. A holder whose return frees no
share changes nothing and is kept without asking the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from controller.preemption_shares import Share

Fits = Callable[[Sequence[Share]], bool]
"""Whether the preemptor fits on the node with these shares given back."""


def freed_by(shares: Iterable[Share], removed: Collection[str]) -> tuple[Share, ...]:
    """The shares every one of whose holders is in `removed` (and that have a holder)."""
    return tuple(share for share in shares if share.holders and share.holders <= removed)


def added_victims(
    shares: Sequence[Share],
    kept: Collection[str],
    candidates: Sequence[str],
    fits: Fits,
    always_freed: Sequence[Share] = (),
) -> list[str] | None:
    """The candidates (uids, most important first) to remove beside `kept`, or None when
    even all of them gone leaves no room. `always_freed` is given back in every trial
    (the preemptor's own stale share)."""
    removed = {*kept, *candidates}
    freed = freed_by(shares, removed)
    if not fits([*always_freed, *freed]):
        return None
    added = []
    for uid in candidates:
        trial = removed - {uid}
        trial_freed = freed_by(shares, trial)
        if len(trial_freed) == len(freed) or fits([*always_freed, *trial_freed]):
            removed, freed = trial, trial_freed
        else:
            added.append(uid)
    return added
