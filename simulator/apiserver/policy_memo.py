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
where it stops being plain, which only makes the key bigger, never wrong;
`has(chain)` and `size(chain)` read only the field's presence and the size; a
comprehension variable that shadows a root name reads values its range's chain
already covers. `projection` takes those values out of a request (a missing field
is recorded as missing, a value that is not a map as a whole), and `DecisionMemo`
keys decisions on (policy uid, resourceVersion, projection). `params` is a root
like the others, taken from the param object each evaluation is bound to, so an
edited param (a Lease with a new holder) is a new key, never a stale answer.

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
Path = tuple[str, ...]
"""A root chain (`("object", "spec")`), or a probe of one (`("has()", "object", "spec")`)."""
_PROBES = frozenset({"has", "size"})
_PASS_THROUGH = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary"}
)
MEMO_SIZE = 4096


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


def _only_chain(node: Any) -> list[str] | None:
    """The plain chain an expression is and nothing more (`object.spec.x` alone)."""
    while (
        isinstance(node, lark.Tree)
        and node.data in _PASS_THROUGH
        and len(node.children) == 1
        and isinstance(node.children[0], lark.Tree)
    ):
        node = node.children[0]
    return _chain(node)


def _probe(node: lark.Tree) -> Path | None:
    """`has(chain)` or `size(chain)`: what it reads is the field's presence or the size."""
    if node.data != "primary" or len(node.children) != 1:
        return None
    call = node.children[0]
    if not (isinstance(call, lark.Tree) and call.data == "ident_arg" and len(call.children) == 2):
        return None
    name, arguments = call.children
    if not isinstance(name, lark.Token) or str(name) not in _PROBES:
        return None
    if not isinstance(arguments, lark.Tree) or len(arguments.children) != 1:
        return None
    chain = _only_chain(arguments.children[0])
    if chain is None or (str(name) == "has" and len(chain) < 2):
        return None
    return (f"{name}()", *chain)


def _paths_in(node: Any, found: set[Path]) -> None:
    if not isinstance(node, lark.Tree):
        return
    probe = _probe(node)
    if probe is not None:
        found.add(probe)
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


def read_paths(expressions: Iterable[str]) -> tuple[Path, ...] | None:
    """The root member chains the expressions read, sorted; None when one does not
    compile (its error is then the decision, evaluated each time as before)."""
    found: set[Path] = set()
    for text in expressions:
        compiled = compile_expression(text)
        if compiled.error is not None:
            return None
        _paths_in(compiled.program.ast, found)
    return tuple(sorted(found))


def _value(roots: Mapping[str, Any], chain: Sequence[str]) -> tuple[str, Any]:
    """("v", value) at the end of the chain; ("m<i>", None) when field i is missing;
    ("x<i>", value) when the value before field i is no map (selecting it fails)."""
    current = roots.get(chain[0])
    for index, name in enumerate(chain[1:], 1):
        if not isinstance(current, dict):
            return f"x{index}", current
        if name not in current:
            return f"m{index}", None
        current = current[name]
    return "v", current


def projection(roots: Mapping[str, Any], paths: Sequence[Path]) -> str:
    """What `paths` read in `roots`, as one JSON text (the memo key's body): per path,
    how far its chain got (_value), and then for `has()` whether its last field is in
    the map before it ("h"), for `size()` the size ("s"), else the value itself."""
    values: list[tuple[str, Any]] = []
    for path in paths:
        probe = path[0] if path[0] in ("has()", "size()") else ""
        chain = path[1:-1] if probe == "has()" else path[1:] if probe else path
        state, value = _value(roots, chain)
        if state == "v" and probe == "has()" and isinstance(value, dict):
            values.append(("h", path[-1] in value))
        elif state == "v" and probe == "size()" and isinstance(value, (list, dict, str)):
            values.append(("s", len(value)))
        else:
            values.append((state, value))
    return json.dumps(values, sort_keys=True, separators=(",", ":"), default=str)


class DecisionMemo:
    """Bounded LRU of a policy's decisions by its read paths' values."""

    def __init__(self, size: int = MEMO_SIZE) -> None:
        self._size = size
        self._paths: dict[tuple[str, str], tuple[Path, ...] | None] = {}
        self._decisions: OrderedDict[tuple[str, str, str], Any] = OrderedDict()

    def paths(self, policy: Mapping[str, Any]) -> tuple[Path, ...] | None:
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
