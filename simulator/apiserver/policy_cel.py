"""The CEL of ValidatingAdmissionPolicies, compiled once and evaluated with cel-python.

A policy's expressions see `object`, `oldObject`, `request`, `params`,
`namespaceObject` and `variables` (admission_policies.py builds them); this module
turns an expression into a program, runs it, and words its failures as
kube-apiserver does: a compile error as `compilation error: ...`, a runtime one as
`expression '<expr>' resulted in error: <reason>`, a failing variable as
`composited variable "<name>" fails to evaluate: <reason>`. Variables are lazy and
evaluated at most once per request, as the real composition library does, so a
variable that fails only fails the expressions that use it.

What it can: the standard CEL operators, macros (`has`, `all`, `exists`,
`exists_one`, `map`, `filter`), `in`, `size`, `startsWith`, `endsWith`,
`contains`, `matches`, the conversions, and the Kubernetes string functions
`lowerAscii`, `upperAscii`, `trim`, `split` and `join`.

What it cannot: cel-python parses no optional syntax (`obj.?field`, `m[?key]`,
`optional.of`, `.orValue()`, `.hasValue()`), and the emulator has no
`authorizer`. An expression that uses either is a compile error that says so
(policy writes are refused with it), never a silent mismatch: rewrite it with
`has()`, `in` and the conditional operator, which a real server accepts too.
There is no type checker and no cost budget.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, Evaluator

from dra_driver.objects.dra_cel import ascii_case, eval_reason

_STRING_LITERAL = re.compile(
    r"'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"", re.DOTALL
)
_OPTIONAL_SYNTAX = re.compile(r"\.\s*\?|\[\s*\?")
_OPTIONAL_METHODS = frozenset({"orValue", "hasValue", "optMap", "optFlatMap"})
_UNSUPPORTED_IDENTIFIERS = {
    "optional": "optional values",
    "authorizer": "the authorizer variable (authorization checks)",
}
UNSUPPORTED_OPTIONAL = (
    "the API emulator does not support CEL optional syntax (`.?field`, `[?key]`, "
    "`.orValue()`, `optional.*`): cel-python cannot parse it; write it with has(), "
    "`in` and the conditional operator"
)
MAX_MESSAGE_BYTES = 5 * 1024
"""kube-apiserver's MaxEvaluatedMessageExpressionSizeBytes: a longer message is dropped."""


class PolicyEvaluationError(Exception):
    """An expression failed on this request; `reason` reads like cel-go's error."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


# ---- the Kubernetes string library, as far as policies here use it ------------------


def _no_overload(name: str) -> CELEvalError:
    return CELEvalError(f"no such overload: {name}")


def _trim(text: Any) -> Any:
    if not isinstance(text, str):
        return _no_overload("trim")
    return celtypes.StringType(str(text).strip())


def _split(text: Any, separator: Any, limit: Any = None) -> Any:
    if not isinstance(text, str) or not isinstance(separator, str):
        return _no_overload("split")
    count = -1 if limit is None else int(limit)
    if count == 0:
        return celtypes.ListType()
    parts = str(text).split(str(separator), count - 1 if count > 0 else -1)
    return celtypes.ListType([celtypes.StringType(p) for p in parts])


def _join(items: Any, separator: Any = "") -> Any:
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        return _no_overload("join")
    return celtypes.StringType(str(separator).join(str(i) for i in items))


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "lowerAscii": ascii_case("lowerAscii", upper=False),
    "upperAscii": ascii_case("upperAscii", upper=True),
    "trim": _trim,
    "split": _split,
    "join": _join,
}


# ---- compiling ------------------------------------------------------------------------


class _Runner(celpy.InterpretedRunner):
    """cel-python's interpreter with the base activation (the environment's type names and
    the functions) built once per program instead of once per evaluation, which was most
    of the cost of a small expression. `Evaluator` clones it before it binds a request's
    values, so it is never changed."""

    def __init__(self, environment: Any, ast: Any, functions: Any = None) -> None:
        super().__init__(environment, ast, functions)
        self._base = self.new_activation()

    def evaluate(self, context: Any) -> Any:
        return Evaluator(ast=self.ast, activation=self._base).evaluate(context)


_ENVIRONMENT = celpy.Environment(runner_class=_Runner)


def _without_strings(expression: str) -> str:
    return _STRING_LITERAL.sub("''", expression)


def _unsupported(tree: lark.Tree) -> str | None:
    """What the parsed expression uses that the emulator cannot evaluate, if anything."""
    for node in tree.iter_subtrees():
        if node.data == "ident":
            name = str(node.children[0])
            if name in _UNSUPPORTED_IDENTIFIERS:
                what = _UNSUPPORTED_IDENTIFIERS[name]
                return f"the API emulator does not support {what} (`{name}`)"
        elif node.data == "member_dot_arg":
            method = node.children[1]
            if isinstance(method, lark.Token) and method.value in _OPTIONAL_METHODS:
                return UNSUPPORTED_OPTIONAL
    return None


def _syntax_error(error: CELParseError) -> str:
    cause = error.__context__
    if isinstance(cause, lark.exceptions.UnexpectedToken):
        token = "<EOF>" if cause.token.type == "$END" else str(cause.token)
        reason = f"mismatched input '{token}'"
    elif isinstance(cause, lark.exceptions.UnexpectedCharacters):
        reason = f"token recognition error at: '{cause.char}'"
    else:
        reason = str(error.args[0]).splitlines()[0] if error.args else "invalid expression"
    return f"ERROR: <input>:{error.line or 1}:{error.column or 1}: Syntax error: {reason}"


@dataclass(frozen=True, slots=True)
class CompiledExpression:
    """An expression and its program, or why it has none (`error`, cel-go's wording)."""

    expression: str
    program: Any = None
    error: str | None = None

    def evaluate(self, activation: Mapping[str, Any]) -> Any:
        """The CEL value; PolicyEvaluationError with the reason the real server gives."""
        if self.error is not None:
            raise PolicyEvaluationError(f"compilation error: {self.error}")
        try:
            result = self.program.evaluate(dict(activation))
        except CELEvalError as error:
            raise PolicyEvaluationError(self._failed(error)) from error
        if isinstance(result, CELEvalError):
            raise PolicyEvaluationError(self._failed(result))
        return result

    def _failed(self, error: CELEvalError) -> str:
        return f"expression '{self.expression}' resulted in error: {evaluation_reason(error)}"


def evaluation_reason(error: CELEvalError) -> str:
    """cel-python's error text in cel-go's words where they say the same thing."""
    message = str(error.args[0]) if error.args else "evaluation failed"
    if isinstance(error, _VariableError):
        return message
    if match := re.fullmatch(r"no such member in mapping: '(.*)'", message):
        return f"no such key: {match.group(1)}"
    if "does not support field selection" in message:
        return "no such key: selecting a field of null"
    if message.startswith("found no matching overload"):
        return "no such overload"
    if message == "modulus or divide by zero":
        return "division by zero"
    return eval_reason(error)


@lru_cache(maxsize=4096)
def compile_expression(expression: str) -> CompiledExpression:
    """Compile once per text (cached, failures too): what the policy plugin runs."""
    try:
        tree = _ENVIRONMENT.compile(expression)
    except CELParseError as error:
        if _OPTIONAL_SYNTAX.search(_without_strings(expression)):
            return CompiledExpression(expression, error=UNSUPPORTED_OPTIONAL)
        return CompiledExpression(expression, error=_syntax_error(error))
    unsupported = _unsupported(tree)
    if unsupported is not None:
        return CompiledExpression(expression, error=unsupported)
    return CompiledExpression(expression, _ENVIRONMENT.program(tree, functions=_FUNCTIONS))


# ---- values ---------------------------------------------------------------------------


def to_cel(value: Any) -> Any:
    """A JSON value (an object as stored, camelCase) as CEL sees it; None stays null."""
    return None if value is None else celpy.json_to_cel(value)


class LazyVariables(celtypes.MapType):
    """`variables`: each one evaluated on first use against the same activation, then kept.

    A variable's failure is kept too and fails each expression that reads it, with the
    composition library's wording; one that reads itself (directly or not) fails."""

    def __init__(self, compiled: Mapping[str, CompiledExpression]) -> None:
        super().__init__({celtypes.StringType(name): None for name in compiled})
        self._compiled = dict(compiled)
        self._values: dict[str, Any] = {}
        self._evaluating: set[str] = set()
        self.activation: dict[str, Any] = {}

    def __getitem__(self, key: Any) -> Any:
        name = str(key)
        if name not in self._compiled:
            raise KeyError(key)
        if name not in self._values:
            self._values[name] = self._evaluate(name)
        value = self._values[name]
        if isinstance(value, CELEvalError):
            raise value
        return value

    def _evaluate(self, name: str) -> Any:
        compiled = self._compiled[name]
        if compiled.error is not None:
            return _composited(f'composited variable "{name}" fails to compile: {compiled.error}')
        if name in self._evaluating:
            return _composited(f'composited variable "{name}" fails to evaluate: it reads itself')
        self._evaluating.add(name)
        try:
            result = compiled.program.evaluate(self.activation)
        except CELEvalError as error:
            result = error
        finally:
            self._evaluating.discard(name)
        if isinstance(result, CELEvalError):
            reason = evaluation_reason(result)
            return _composited(f'composited variable "{name}" fails to evaluate: {reason}')
        return result


class _VariableError(CELEvalError):
    """A variable's failure, already worded: the expression that reads it says it as is."""


def _composited(message: str) -> CELEvalError:
    return _VariableError(message)


__all__ = [
    "MAX_MESSAGE_BYTES",
    "UNSUPPORTED_OPTIONAL",
    "CompiledExpression",
    "LazyVariables",
    "PolicyEvaluationError",
    "compile_expression",
    "evaluation_reason",
    "to_cel",
]
