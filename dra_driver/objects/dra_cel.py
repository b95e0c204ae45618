"""Kubernetes DRA device selectors (CEL), compiled and evaluated with cel-python.

DeviceClasses and ResourceClaims select devices with CEL expressions over one
variable, `device`: `driver`, `attributes[domain].name`, `capacity[domain].name`
(a quantity) and `allowMultipleAllocations`. The controller's allocator, the
kube-scheduler stand-in and the API emulator's write-time check must agree on
what an expression means and on what is not an expression at all, so they all
go through this module.

cel-python has no type checker, so what cel-go refuses at compile time because
of declarations (a field `device` does not have, an undeclared variable, a
function the Kubernetes environment does not offer) is refused here by walking
the parse tree. The Kubernetes extension libraries that selectors use (semver,
quantity, the ASCII case functions) are implemented here. An expression that
fails at run time, or yields something other than a bool, raises: a selector
never matches silently by accident.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache
from typing import Any

import celpy
import lark
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

from api.quantity import INT64_MAX, QuantityError, parse_quantity
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.dra_cel_shapes import ShapeAnswer, shape_answer

DEVICE_FIELDS = frozenset({"driver", "attributes", "capacity", "allowMultipleAllocations"})
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})
_GLOBAL_MACROS = frozenset({"has"})
_TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "duration", "int", "list", "map", "string", "timestamp", "uint"}
)
_EXPRESSION_FIELD = "cel.expression"


class CelCompileError(InvalidParameterError):
    """The expression is not a valid DRA selector; the reason reads like cel-go's."""

    def __init__(self, expression: str, detail: str) -> None:
        super().__init__(_EXPRESSION_FIELD, f"compilation failed: {detail}")
        self.expression = expression


class CelEvaluationError(InvalidParameterError):
    """The expression failed on a device (missing key, wrong type, non-bool result)."""

    def __init__(self, expression: str, reason: str) -> None:
        super().__init__(_EXPRESSION_FIELD, f"evaluating {expression!r}: {reason}")
        self.expression = expression


# ---- values: semver and quantity, as the Kubernetes CEL libraries define them ----------

_SEMVER = re.compile(
    r"(?P<major>0|[1-9][0-9]*)\.(?P<minor>0|[1-9][0-9]*)\.(?P<patch>0|[1-9][0-9]*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)
_LOOSE_CORE = re.compile(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?(.*)", re.DOTALL)


@dataclass(frozen=True, eq=False, slots=True)
class Semver:
    """A semantic version (semver.org 2.0); equality and order ignore build metadata."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    build: str = ""

    @classmethod
    def parse(cls, text: str, normalize: bool = False) -> Semver:
        """Strict semver; with `normalize`, "v1.2" and "01.2.3" are read as 1.2.0 and 1.2.3."""
        if normalize and (loose := _LOOSE_CORE.fullmatch(text)):
            parts = [str(int(p)) if p else "0" for p in loose.groups()[:3]]
            text = ".".join(parts) + loose.group(4)
        match = _SEMVER.fullmatch(text)
        if match is None:
            raise ValueError(f"{text!r} is not a semantic version (MAJOR.MINOR.PATCH)")
        pre = tuple(match.group("pre").split(".")) if match.group("pre") else ()
        if any(p.isdigit() and len(p) > 1 and p.startswith("0") for p in pre):
            raise ValueError(f"{text!r}: numeric prerelease identifiers have no leading zeros")
        return cls(
            int(match.group("major")),
            int(match.group("minor")),
            int(match.group("patch")),
            pre,
            match.group("build") or "",
        )

    def compare(self, other: Semver) -> int:
        """-1, 0 or 1 by semver precedence (a prerelease sorts before its release)."""
        core, other_core = (
            (self.major, self.minor, self.patch),
            (
                other.major,
                other.minor,
                other.patch,
            ),
        )
        if core != other_core:
            return -1 if core < other_core else 1
        if self.prerelease == other.prerelease:
            return 0
        if not self.prerelease or not other.prerelease:
            return -1 if self.prerelease else 1
        for mine, theirs in zip(self.prerelease, other.prerelease, strict=False):
            if mine == theirs:
                continue
            if mine.isdigit() and theirs.isdigit():
                return -1 if int(mine) < int(theirs) else 1
            if mine.isdigit() != theirs.isdigit():
                return -1 if mine.isdigit() else 1
            return -1 if mine < theirs else 1
        return -1 if len(self.prerelease) < len(other.prerelease) else 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.prerelease))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            text += "-" + ".".join(self.prerelease)
        return text + (f"+{self.build}" if self.build else "")


@dataclass(frozen=True, slots=True)
class Quantity:
    """A resource quantity; equal when the values are (1Gi == 1024Mi)."""

    value: Decimal

    @classmethod
    def parse(cls, text: str) -> Quantity:
        return Quantity(parse_quantity(text))


# ---- the functions selectors may call ------------------------------------------------


def _no_overload(name: str, *args: Any) -> CELEvalError:
    kinds = ", ".join(type(a).__name__ for a in args)
    return CELEvalError(f"found no matching overload for '{name}' applied to ({kinds})")


def _semver(text: Any, normalize: Any = False) -> Any:
    if not isinstance(text, str) or not isinstance(normalize, (bool, celtypes.BoolType)):
        return _no_overload("semver", text, normalize)
    try:
        return Semver.parse(str(text), bool(normalize))
    except ValueError as error:
        return CELEvalError(f"semver(): {error}")


def _is_semver(text: Any, normalize: Any = False) -> Any:
    if not isinstance(text, str) or not isinstance(normalize, (bool, celtypes.BoolType)):
        return _no_overload("isSemver", text, normalize)
    try:
        Semver.parse(str(text), bool(normalize))
    except ValueError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _quantity(text: Any) -> Any:
    if not isinstance(text, str):
        return _no_overload("quantity", text)
    try:
        return Quantity.parse(str(text))
    except QuantityError as error:
        return CELEvalError(f"quantity(): {error}")


def _is_quantity(text: Any) -> Any:
    if not isinstance(text, str):
        return _no_overload("isQuantity", text)
    try:
        parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _ordering(name: str, left: Any, right: Any) -> int | CELEvalError:
    if isinstance(left, Semver) and isinstance(right, Semver):
        return left.compare(right)
    if isinstance(left, Quantity) and isinstance(right, Quantity):
        return (left.value > right.value) - (left.value < right.value)
    return _no_overload(name, left, right)


def _compare_to(left: Any, right: Any) -> Any:
    order = _ordering("compareTo", left, right)
    return order if isinstance(order, CELEvalError) else celtypes.IntType(order)


def _is_greater_than(left: Any, right: Any) -> Any:
    order = _ordering("isGreaterThan", left, right)
    return order if isinstance(order, CELEvalError) else celtypes.BoolType(order > 0)


def _is_less_than(left: Any, right: Any) -> Any:
    order = _ordering("isLessThan", left, right)
    return order if isinstance(order, CELEvalError) else celtypes.BoolType(order < 0)


def _semver_part(name: str) -> Callable[[Any], Any]:
    def part(version: Any) -> Any:
        if not isinstance(version, Semver):
            return _no_overload(name, version)
        return celtypes.IntType(getattr(version, name))

    return part


def _quantity_method(name: str, compute: Callable[[Decimal], Any]) -> Callable[[Any], Any]:
    def method(quantity: Any) -> Any:
        if not isinstance(quantity, Quantity):
            return _no_overload(name, quantity)
        return compute(quantity.value)

    return method


def _as_integer(value: Decimal) -> Any:
    if value != value.to_integral_value() or not -INT64_MAX - 1 <= value <= INT64_MAX:
        return CELEvalError(f"cannot convert value to integer: {value} is not an int64")
    return celtypes.IntType(int(value))


def _arithmetic(name: str, sign: int) -> Callable[[Any, Any], Any]:
    def method(quantity: Any, other: Any) -> Any:
        if not isinstance(quantity, Quantity):
            return _no_overload(name, quantity, other)
        if isinstance(other, Quantity):
            return Quantity(quantity.value + sign * other.value)
        if isinstance(other, int) and not isinstance(other, (bool, celtypes.BoolType)):
            return Quantity(quantity.value + sign * int(other))
        return _no_overload(name, quantity, other)

    return method


def ascii_case(name: str, upper: bool) -> Callable[[Any], Any]:
    def method(text: Any) -> Any:
        if not isinstance(text, str):
            return _no_overload(name, text)
        table = _ASCII_UPPER if upper else _ASCII_LOWER
        return celtypes.StringType(str(text).translate(table))

    return method


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "semver": _semver,
    "isSemver": _is_semver,
    "major": _semver_part("major"),
    "minor": _semver_part("minor"),
    "patch": _semver_part("patch"),
    "quantity": _quantity,
    "isQuantity": _is_quantity,
    "compareTo": _compare_to,
    "isGreaterThan": _is_greater_than,
    "isLessThan": _is_less_than,
    "isInteger": _quantity_method(
        "isInteger", lambda v: celtypes.BoolType(v == v.to_integral_value())
    ),
    "asInteger": _quantity_method("asInteger", _as_integer),
    "asApproximateFloat": _quantity_method(
        "asApproximateFloat", lambda v: celtypes.DoubleType(float(v))
    ),
    "sign": _quantity_method("sign", lambda v: celtypes.IntType((v > 0) - (v < 0))),
    "add": _arithmetic("add", 1),
    "sub": _arithmetic("sub", -1),
    "lowerAscii": ascii_case("lowerAscii", upper=False),
    "upperAscii": ascii_case("upperAscii", upper=True),
}
_BUILTIN_FUNCTIONS = frozenset(
    {"size", "contains", "startsWith", "endsWith", "matches", "int", "uint", "double"}
    | {"string", "bool", "bytes", "type", "duration", "timestamp", "dyn"}
)
KNOWN_FUNCTIONS = frozenset(_FUNCTIONS) | _BUILTIN_FUNCTIONS


# ---- the device variable ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CelDevice:
    """What a selector sees of one device; names are split into domain -> name."""

    driver: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Quantity]]
    allow_multiple_allocations: bool


@lru_cache(maxsize=4096)
def _split_name(name: str, driver: str) -> tuple[str, str]:
    """`dom/name` splits; a bare name belongs to the driver's domain, as in Kubernetes."""
    domain, slash, rest = name.rpartition("/")
    return (domain, rest) if slash else (driver, name)


def _attribute_value(driver: str, device_name: str, name: str, value: Mapping[str, Any]) -> Any:
    where = f"device {device_name!r} attributes[{name!r}]"
    if "bool" in value:
        return bool(value["bool"])
    if "int" in value:
        return int(value["int"])
    if "string" in value:
        return str(value["string"])
    if "version" in value:
        try:
            return Semver.parse(str(value["version"]))
        except ValueError as error:
            raise InvalidParameterError(f"{where}.version", str(error)) from error
    raise InvalidParameterError(where, f"expected one of bool, int, string, version in {driver}")


def cel_device_from_slice(driver: str, device: Mapping[str, Any]) -> CelDevice:
    """The CEL view of one ResourceSlice v1 device (a JSON dict)."""
    device_name = str(device.get("name", ""))
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.get("attributes") or {}).items():
        domain, short = _split_name(name, driver)
        attributes.setdefault(domain, {})[short] = _attribute_value(
            driver, device_name, name, value
        )
    capacity: dict[str, dict[str, Quantity]] = {}
    for name, entry in (device.get("capacity") or {}).items():
        domain, short = _split_name(name, driver)
        try:
            capacity.setdefault(domain, {})[short] = Quantity.parse(str(entry["value"]))
        except QuantityError as error:
            raise InvalidParameterError(
                f"device {device_name!r} capacity[{name!r}].value", error.reason
            ) from error
    return CelDevice(
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(device.get("allowMultipleAllocations")),
    )


class _Domains(celtypes.MapType):
    """domain -> names; an absent domain is an empty map, so `has()` can test names in it."""

    def __getitem__(self, key: Any) -> Any:
        if key in self:
            return super().__getitem__(key)
        return celtypes.MapType()


def _cel_value(value: Any) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    return value


def _activation(device: CelDevice) -> dict[str, Any]:
    def domains(values: Mapping[str, Mapping[str, Any]]) -> _Domains:
        return _Domains(
            {
                celtypes.StringType(domain): celtypes.MapType(
                    {celtypes.StringType(n): _cel_value(v) for n, v in names.items()}
                )
                for domain, names in values.items()
            }
        )

    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("attributes"): domains(device.attributes),
                celtypes.StringType("capacity"): domains(device.capacity),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(
                    device.allow_multiple_allocations
                ),
            }
        )
    }


# ---- compiling ------------------------------------------------------------------------

_ENVIRONMENT = celpy.Environment()


def _location(token: lark.Token, detail: str, shift: int = 0) -> str:
    """cel-go's `ERROR: <input>:line:column: detail`; `shift` moves onto a selecting `.`."""
    return f"ERROR: <input>:{token.line}:{(token.column or 1) + shift}: {detail}"


def _syntax_error(expression: str, error: CELParseError) -> CelCompileError:
    """cel-go's wording where lark says the same thing: mismatched input, unknown token."""
    cause = error.__context__
    if isinstance(cause, lark.exceptions.UnexpectedToken):
        token = "<EOF>" if cause.token.type == "$END" else str(cause.token)
        reason = f"mismatched input '{token}' expecting {{{', '.join(sorted(cause.expected))}}}"
    elif isinstance(cause, lark.exceptions.UnexpectedCharacters):
        reason = f"token recognition error at: '{cause.char}'"
    else:
        reason = str(error.args[0]).splitlines()[0] if error.args else "invalid expression"
    line, column = error.line or 1, error.column or 1
    source = expression.splitlines()[line - 1] if expression else ""
    return CelCompileError(
        expression,
        f"ERROR: <input>:{line}:{column}: Syntax error: {reason}\n"
        f" | {source}\n | {'.' * (column - 1)}^",
    )


def _bound_variables(tree: lark.Tree) -> set[str]:
    """Names the comprehension macros bind (`x` in `list.exists(x, p)`)."""
    names = set()
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg" and len(node.children) == 3:
            method, arguments = node.children[1], node.children[2]
            if isinstance(method, lark.Token) and method.value in _MACROS:
                first = arguments.children[0] if isinstance(arguments, lark.Tree) else None
                tokens = list(first.scan_values(lambda v: isinstance(v, lark.Token)))
                if tokens:
                    names.add(str(tokens[0]))
    return names


def _is_device(member: Any) -> bool:
    if not (isinstance(member, lark.Tree) and member.data == "member"):
        return False
    primary = member.children[0]
    if not (isinstance(primary, lark.Tree) and primary.data == "primary"):
        return False
    ident = primary.children[0]
    return isinstance(ident, lark.Tree) and ident.data == "ident" and ident.children[0] == "device"


def _check_declarations(expression: str, tree: lark.Tree) -> None:
    """What cel-go's checker refuses given the DRA declarations, cel-python does not check."""
    bound = _bound_variables(tree) | {"device"} | _TYPE_NAMES
    for node in tree.iter_subtrees_topdown():
        if node.data == "member_dot" and _is_device(node.children[0]):
            field = node.children[1]
            if isinstance(field, lark.Token) and field.value not in DEVICE_FIELDS:
                raise CelCompileError(
                    expression,
                    _location(field, f"undefined field '{field.value}'", shift=-1),
                )
        elif node.data == "ident":
            name = node.children[0]
            if isinstance(name, lark.Token) and name.value not in bound:
                raise CelCompileError(
                    expression,
                    _location(name, f"undeclared reference to {name.value!r} (in container '')"),
                )
        elif node.data in ("ident_arg", "member_dot_arg", "dot_ident_arg"):
            name = next(c for c in node.children if isinstance(c, lark.Token))
            allowed = KNOWN_FUNCTIONS | (_MACROS if node.data == "member_dot_arg" else set())
            if node.data == "ident_arg":
                allowed = allowed | _GLOBAL_MACROS
            if name.value not in allowed:
                raise CelCompileError(
                    expression,
                    _location(name, f"undeclared reference to {name.value!r} (in container '')"),
                )


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    """A checked expression, ready to evaluate against devices; `shape` answers the
    common selector shapes without cel-python (dra_cel_shapes.py)."""

    expression: str
    program: Any
    shape: ShapeAnswer | None = None

    def matches(self, device: CelDevice) -> bool:
        """Whether the device is selected; CelEvaluationError when the expression fails."""
        if self.shape is not None:
            known = self.shape(device.driver, device.attributes)
            if known is not None:
                return known
        return self.cel_matches(device)

    def cel_matches(self, device: CelDevice) -> bool:
        """`matches`, always through cel-python."""
        try:
            result = self.program.evaluate(_activation(device))
        except CELEvalError as error:
            raise CelEvaluationError(self.expression, eval_reason(error)) from error
        if isinstance(result, CELEvalError):
            raise CelEvaluationError(self.expression, eval_reason(result))
        if not isinstance(result, celtypes.BoolType):
            raise CelEvaluationError(
                self.expression, f"the result is {type(result).__name__}, not a bool"
            )
        return bool(result)


def eval_reason(error: CELEvalError) -> str:
    message = str(error.args[0]) if error.args else "evaluation failed"
    if message == "no such key" and len(error.args) > 2:
        return f"no such key: {error.args[2]}"
    return message.split(" (in activation")[0]


@lru_cache(maxsize=4096)
def compile_selector(expression: str) -> CompiledSelector:
    """Parse and check a selector (cached by text); CelCompileError says what is wrong."""
    try:
        tree = _ENVIRONMENT.compile(expression)
    except CELParseError as error:
        raise _syntax_error(expression, error) from error
    _check_declarations(expression, tree)
    program = _ENVIRONMENT.program(tree, functions=_FUNCTIONS)
    return CompiledSelector(expression, program, shape_answer(expression))


__all__ = [
    "CelCompileError",
    "CelDevice",
    "CelEvaluationError",
    "CompiledSelector",
    "Quantity",
    "Semver",
    "cel_device_from_slice",
    "compile_selector",
]
