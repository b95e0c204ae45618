"""Admission decisions remembered by the part of the request a policy's CEL reads.

cel-python interprets a policy's expressions by walking their parse trees, some
milliseconds per write; at 10,000 pods that was most of the emulator's CPU. CEL
has no side effects, clock or randomness, so a policy's decisions are a function
of the values its expressions read. `read_paths` finds those statically: every
maximal member chain that starts at a root variable (`object.spec.containers`,
`request.userInfo.username`, `oldObject`), over every expression of the policy
(matchConditions, variables, validations, messageExpressions); `variables.*` needs
no chain of its own because every variable's expression is in the set. Anything
not a plain chain (an index, a whole root passed to a function) stops the chain
where it stops being plain, which only makes the key bigger, never wrong; a
comprehension variable that shadows a root name reads values its range's chain
already covers. `projection` takes those values out of a request (a missing field
is recorded as missing, a value that is not a map as a whole), and `DecisionMemo`
keys decisions on (policy uid, resourceVersion, projection).

So ten thousand pods with the same containers cost one evaluation; a claim whose
allocation differs from every other's costs one each, as before.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import lark

from .policy_cel import compile_expression

ROOTS = frozenset({"object", "oldObject", "request", "namespaceObject", "params"})
MEMO_SIZE = 4096
_MISSING = {"$missing": True}


def _chain(node: Any) -> list[str] | None:
    """The names of a plain member chain from a root (`object.spec.x`), else None."""
    if not isinstance(node, lark.Tree):
        return None
    if node.data == "member" and len(node.children) == 1:
        return _chain(node.children[0])
    if node.data == "member_dot" and len(node.children) == 2:
        base = _chain(node.children[0])
        name = node.children[1]
        return None if base is None or not isinstance(name, lark.Token) else [*base, str(name)]
    if node.data == "primary" and len(node.children) == 1:
        ident = node.children[0]
        if isinstance(ident, lark.Tree) and ident.data == "ident" and ident.children:
            value = str(ident.children[0])
            return [value] if value in ROOTS else None
    return None


def _paths_in(node: Any, found: set[tuple[str, ...]]) -> None:
    if not isinstance(node, lark.Tree):
        return
    if node.data in ("member", "member_dot", "primary"):
        chain = _chain(node)
        if chain is not None:
            found.add(tuple(chain))
            return
    for child in node.children:
        _paths_in(child, found)


def policy_expressions(spec: Mapping[str, Any]) -> list[str]:
    """Every CEL text of a policy's spec that evaluation may run."""
    texts = [c.get("expression", "") for c in spec.get("matchConditions") or []]
    texts += [v.get("expression", "") for v in spec.get("variables") or []]
    for validation in spec.get("validations") or []:
        texts += [validation.get("expression", ""), validation.get("messageExpression", "")]
    return [text for text in texts if text]


def read_paths(expressions: Iterable[str]) -> tuple[tuple[str, ...], ...] | None:
    """The root member chains the expressions read, sorted; None when one does not
    compile (its error is then the decision, evaluated each time as before)."""
    found: set[tuple[str, ...]] = set()
    for text in expressions:
        compiled = compile_expression(text)
        if compiled.error is not None:
            return None
        _paths_in(compiled.program.ast, found)
    return tuple(sorted(found))


def projection(roots: Mapping[str, Any], paths: Sequence[tuple[str, ...]]) -> str:
    """The values at `paths` in `roots`, as one JSON text (the memo key's body)."""
    values = []
    for path in paths:
        current = roots.get(path[0])
        for name in path[1:]:
            if not isinstance(current, dict):
                break
            if name not in current:
                current = _MISSING
                break
            current = current[name]
        values.append(current)
    return json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)


class DecisionMemo:
    """Bounded LRU of a policy's decisions by its read paths' values."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self._size = size
        self._paths: dict[tuple[str, str], tuple[tuple[str, ...], ...] | None] = {}
        self._decisions: OrderedDict[tuple[str, str, str], Any] = OrderedDict()

    def paths(self, policy: Mapping[str, Any]) -> tuple[tuple[str, ...], ...] | None:
        """The policy's read paths (found once per policy version); None: do not memoize."""
        version = _version(policy)
        if version not in self._paths:
            self._paths[version] = read_paths(policy_expressions(policy.get("spec") or {}))
        return self._paths[version]

    def get(self, policy: Mapping[str, Any], key: str) -> Any:
        found = self._decisions.get((*_version(policy), key))
        if found is not None:
            self._decisions.move_to_end((*_version(policy), key))
        return found

    def put(self, policy: Mapping[str, Any], key: str, decisions: Any) -> None:
        self._decisions[(*_version(policy), key)] = decisions
        if len(self._decisions) > self._size:
            self._decisions.popitem(last=False)


def _version(policy: Mapping[str, Any]) -> tuple[str, str]:
    metadata = policy.get("metadata") or {}
    return (str(metadata.get("uid", metadata.get("name"))), str(metadata.get("resourceVersion")))
