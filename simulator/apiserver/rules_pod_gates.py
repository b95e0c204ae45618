"""The scheduling gate rules of a pod update (ValidatePodUpdate, reference §10).

Gates may only be removed. While the stored pod still has a gate, its placement may
narrow as a queueing system (Kueue) pins a flavour before releasing it: keys added to
`spec.nodeSelector`, and required node affinity set where there was none or
extended by requirements appended to each existing term; any other change to either
is refused with the real field paths and messages. The preferred node affinity of a
gated pod may change freely, as the real munging of the whole nodeAffinity allows.
Pure; called by rules.py.
"""

from __future__ import annotations

from typing import Any

from .errors import FieldError, forbidden, invalid

NODE_AFFINITY = "spec.affinity.nodeAffinity"
REQUIRED_TERMS = f"{NODE_AFFINITY}.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"


def only_deleted_gates(new: Any, old: Any) -> list[FieldError]:
    """validateOnlyDeletedSchedulingGates: each gate not there before, by name."""
    before = {g.get("name") for g in old or [] if isinstance(g, dict)}
    return [
        forbidden(
            f"spec.schedulingGates[{index}].name",
            f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'",
        )
        for index, gate in enumerate(new or [])
        if isinstance(gate, dict) and gate.get("name") not in before
    ]


def gated_placement_changes(spec: dict[str, Any], before: dict[str, Any]) -> list[FieldError]:
    """The refusals for a gated pod's node selector and node affinity; `spec` is left
    with the stored values of both, so what remains to compare is everything else."""
    errors: list[FieldError] = []
    selector, old_selector = spec.get("nodeSelector") or {}, before.get("nodeSelector") or {}
    if selector != old_selector:
        if any(selector.get(key) != value for key, value in old_selector.items()):
            detail = "only additions to spec.nodeSelector are allowed (no mutations or deletions)"
            errors.append(invalid("spec.nodeSelector", selector, detail))
        _restore(spec, before, "nodeSelector")
    old_affinity = before.get("affinity")
    old_node = (old_affinity or {}).get("nodeAffinity")
    affinity = spec.get("affinity")
    node = (affinity or {}).get("nodeAffinity")
    if node == old_node:
        return errors
    errors += _node_affinity_changes(node, old_node)
    if affinity is None:
        if old_node is not None:
            spec["affinity"] = {"nodeAffinity": old_node}
    elif old_affinity is None and set(affinity) <= {"nodeAffinity"}:
        spec.pop("affinity")
    else:
        spec["affinity"] = dict(affinity)
        _restore(spec["affinity"], old_affinity or {}, "nodeAffinity")
    return errors


def _restore(target: dict[str, Any], source: dict[str, Any], key: str) -> None:
    if key in source:
        target[key] = source[key]
    else:
        target.pop(key, None)


def _terms(node_affinity: Any) -> list[dict[str, Any]] | None:
    required = (node_affinity or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if required is None else list(required.get("nodeSelectorTerms") or [])


def _node_affinity_changes(new: Any, old: Any) -> list[FieldError]:
    """validateNodeAffinityMutation: existing required terms keep their number, and each
    keeps its requirements as a prefix."""
    old_terms = _terms(old)
    if not old_terms:
        return []
    new_terms = _terms(new) or []
    if len(new_terms) != len(old_terms):
        detail = "no additions/deletions to non-empty NodeSelectorTerms list are allowed"
        return [invalid(REQUIRED_TERMS, new_terms, detail)]
    return [
        invalid(
            f"{REQUIRED_TERMS}[{index}]",
            term,
            "only additions are allowed (no mutations or deletions)",
        )
        for index, (term, earlier) in enumerate(zip(new_terms, old_terms, strict=True))
        if not _only_additions(term, earlier)
    ]


def _only_additions(term: dict[str, Any], earlier: dict[str, Any]) -> bool:
    keys = ("matchExpressions", "matchFields")
    if not any(earlier.get(k) for k in keys) and any(term.get(k) for k in keys):
        return False
    for key in keys:
        before = earlier.get(key) or []
        if before and (term.get(key) or [])[: len(before)] != before:
            return False
    return True
