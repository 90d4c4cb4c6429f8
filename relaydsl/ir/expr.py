"""Relay expressions (Figure 1 of the 2019 paper).

Nodes are small immutable dataclasses with identity equality (alpha-equality
lives in structural.py). Each carries an optional source ``span`` and, once
type inference has run, a ``checked_type``. Constructors validate what can be
validated locally: arity and attributes of operator calls, tuple indices,
constant dtypes.
"""
from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any as AnyValue, Iterable, Protocol, final

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.node import Immutable, conforms
from relaydsl.ir.span import Span
from relaydsl.ir.types import DTYPES, GlobalTypeVar, Type, TypeVar, type_to_str

if TYPE_CHECKING:
    from relaydsl.ir.module import IRModule
    from relaydsl.op.registry import OpDef


@dataclass(frozen=True, slots=True, eq=False)
class Expr(Immutable):
    """Base of all expressions."""

    span: Span | None = field(default=None, kw_only=True, repr=False)
    _checked_type: Type | None = field(default=None, init=False, repr=False)

    @property
    def checked_type(self) -> Type:
        """The type inference gave this node; raises if inference has not run on it."""
        if self._checked_type is None:
            raise IRError(f"{type(self).__name__} has no checked_type yet: "
                          "run relaydsl.typing.infer_types first")
        return self._checked_type

    @property
    def has_type(self) -> bool:
        return self._checked_type is not None

    def set_checked_type(self, t: Type) -> None:
        """Written by type inference only."""
        object.__setattr__(self, "_checked_type", t)

    def __repr__(self) -> str:
        text = installed_printer()(self)
        return text.partition("\n")[2]  # without its first line, the version header (for files)

    def __str__(self) -> str:
        return self.__repr__()


def _check_expr(value: object, what: str) -> None:
    if not isinstance(value, Expr):
        raise IRError(f"{what} must be a relay Expr, got {type(value).__name__}: {value!r:.80}")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Var(Expr):
    """A local variable. Its name is only a hint: identity is the object."""

    name_hint: str
    type_annotation: Type | None = None

    def __post_init__(self) -> None:
        if not conforms(self.name_hint, str) or not self.name_hint:
            raise IRError(f"Var name must be a non-empty string, got {self.name_hint!r}")
        if self.type_annotation is not None and not conforms(self.type_annotation, Type):
            raise IRError(f"Var {self.name_hint}: type_annotation must be a Type, "
                          f"got {self.type_annotation!r}")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class GlobalVar(Expr):
    """The name of a global function of an IRModule (``@main``)."""

    name_hint: str


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constant(Expr):
    """A tensor literal. The array is copied and made read-only."""

    data: np.ndarray

    def __post_init__(self) -> None:
        if not conforms(self.data, np.ndarray):
            raise IRError("Constant takes a numpy array (use relay.const for Python values), "
                          f"got {self.data!r:.80}")
        if self.data.dtype.name not in DTYPES:
            raise IRError(f"constant of unsupported dtype {self.data.dtype}; "
                          f"expected one of {', '.join(DTYPES)}")
        arr = np.array(self.data)  # a private copy, so nobody can mutate the program's constants
        arr.flags.writeable = False
        object.__setattr__(self, "data", arr)


def const(value: AnyValue, dtype: str | None = None, *, span: Span | None = None) -> Constant:
    """A Constant from a Python number or array, optionally cast to `dtype`."""
    arr = np.asarray(value)
    if dtype is not None:
        arr = arr.astype(dtype)
    elif not isinstance(value, np.ndarray):
        if arr.dtype == np.float64:
            arr = arr.astype(np.float32)
        elif arr.dtype == np.int64:
            arr = arr.astype(np.int32)
    return Constant(arr, span=span)


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Op(Expr):
    """A primitive operator. Its definition (relaydsl/op) declares it with ``declare_op``;
    ``Op.get(name)`` is that one node, ``op.definition`` the definition."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in _OP_DEFINITIONS:
            raise IRError(f"unknown operator {self.name!r}.{suggest(self.name, _OP_DEFINITIONS)}")

    @staticmethod
    def get(name: str) -> "Op":
        node = _OP_NODES.get(name)
        if node is None:
            raise IRError(f"unknown operator {name!r}.{suggest(name, _OP_DEFINITIONS)}")
        return node

    @property
    def definition(self) -> "OpDef":
        return _OP_DEFINITIONS[self.name]


# The ops' definitions by name, filled by relaydsl.op.registry.register (the IR knows ops only
# through this table, so it imports nothing of relaydsl.op).
_OP_DEFINITIONS: dict[str, AnyValue] = {}
_OP_NODES: dict[str, Op] = {}


def declare_op(name: str, definition: AnyValue) -> Op:
    """The IR node of a newly defined op (called once per op, by the op registry)."""
    if name in _OP_DEFINITIONS:
        raise IRError(f"op {name} is declared twice")
    _OP_DEFINITIONS[name] = definition
    node = _OP_NODES[name] = Op(name)
    return node


def op_names() -> list[str]:
    """The names of every declared op."""
    return list(_OP_DEFINITIONS)


def op_call(name: str, *args: Expr, **attrs: AnyValue) -> "Call":
    """``Call(Op.get(name), args, attrs)``: a call of an op named at run time (a user's
    ``relay.<name>``, the text format); code that knows its op calls the OpDef instead."""
    return Call(Op.get(name), args, Attrs(attrs))


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Constructor(Expr):
    """A constructor of an ADT (relaydsl/ir/adt.py); called like a function: ``Cons(x, xs)``.

    `inputs` may mention the ADT's type variables and the ADT itself.
    `belong_to` and `tag` are filled when the TypeData is built.
    """

    name: str
    inputs: tuple[Type, ...]
    belong_to: GlobalTypeVar
    tag: int = -1

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        for t in self.inputs:
            if not conforms(t, Type):
                raise IRError(f"constructor {self.name}: input types must be Types, got {t!r}")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Call(Expr):
    """``op(args, attrs)``. For an Op, arity and attributes are checked against the registry."""

    op: Expr
    args: tuple[Expr, ...] = ()
    attrs: Attrs = field(default_factory=Attrs)
    type_args: tuple[Type, ...] = ()

    def __post_init__(self) -> None:
        _check_expr(self.op, "the callee of a Call")
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "type_args", tuple(self.type_args))
        for i, a in enumerate(self.args):
            _check_expr(a, f"argument {i} of a call")
        attrs = self.attrs if conforms(self.attrs, Attrs) else Attrs(self.attrs)
        if isinstance(self.op, Op):
            attrs = self.op.definition.check_call(self.args, attrs, self.span)
        elif len(attrs):
            raise IRError(f"only operator calls take attributes, got {dict(attrs)}", self.span)
        object.__setattr__(self, "attrs", attrs)
        if isinstance(self.op, Constructor) and len(self.args) != len(self.op.inputs):
            raise IRError(
                f"constructor {self.op.name} takes {len(self.op.inputs)} arguments, "
                f"got {len(self.args)}",
                self.span,
            )


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Let(Expr):
    """``let var = value; body``."""

    var: Var
    value: Expr
    body: Expr

    def __post_init__(self) -> None:
        if not conforms(self.var, Var):
            raise IRError(f"a let binds a Var, got {self.var!r:.80}", self.span)
        _check_expr(self.value, "a let's value")
        _check_expr(self.body, "a let's body")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Function(Expr):
    """``fn<type_params>(params) -> ret_type { body }``, a closure when it has free variables."""

    params: tuple[Var, ...]
    body: Expr
    ret_type: Type | None = None
    type_params: tuple[TypeVar, ...] = ()
    attrs: Attrs = field(default_factory=Attrs)

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        object.__setattr__(self, "type_params", tuple(self.type_params))
        if not conforms(self.attrs, Attrs):
            object.__setattr__(self, "attrs", Attrs(self.attrs))
        for p in self.params:
            if not conforms(p, Var):
                raise IRError(f"function parameters must be Vars, got {p!r:.80}", self.span)
        if len(set(self.params)) != len(self.params):
            raise IRError("a function lists the same parameter Var twice", self.span)
        _check_expr(self.body, "a function body")
        if self.ret_type is not None and not conforms(self.ret_type, Type):
            raise IRError(f"ret_type must be a Type, got {self.ret_type!r}", self.span)
        for tp in self.type_params:
            if not conforms(tp, TypeVar):
                raise IRError(f"type parameters must be TypeVars, got {tp!r}", self.span)


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Tuple(Expr):
    fields: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        for i, f in enumerate(self.fields):
            _check_expr(f, f"tuple field {i}")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class TupleGetItem(Expr):
    tuple_value: Expr
    index: int

    def __post_init__(self) -> None:
        _check_expr(self.tuple_value, "the tuple of a TupleGetItem")
        if isinstance(self.index, bool) or not conforms(self.index, int) or self.index < 0:
            raise IRError(f"tuple index must be a non-negative int, got {self.index!r}", self.span)


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class If(Expr):
    cond: Expr
    true_branch: Expr
    false_branch: Expr

    def __post_init__(self) -> None:
        _check_expr(self.cond, "an if's condition")
        _check_expr(self.true_branch, "an if's true branch")
        _check_expr(self.false_branch, "an if's false branch")


class Pattern(Immutable):
    """Base of match patterns (relaydsl/ir/adt.py)."""

    __slots__ = ()


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Clause(Immutable):
    """``pattern => rhs`` in a Match."""

    lhs: Pattern
    rhs: Expr

    def __post_init__(self) -> None:
        if not conforms(self.lhs, Pattern):
            raise IRError(f"a clause's left-hand side must be a Pattern, got {self.lhs!r:.80}")
        _check_expr(self.rhs, "a clause's right-hand side")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Match(Expr):
    """``match (data) { clauses }``; `complete` asks the checker for exhaustiveness."""

    data: Expr
    clauses: tuple[Clause, ...]
    complete: bool = True

    def __post_init__(self) -> None:
        _check_expr(self.data, "the scrutinee of a match")
        object.__setattr__(self, "clauses", tuple(self.clauses))
        if not self.clauses:
            raise IRError("a match needs at least one clause", self.span)
        for c in self.clauses:
            if not conforms(c, Clause):
                raise IRError(f"match clauses must be Clauses, got {c!r:.80}", self.span)


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefCreate(Expr):
    """``ref(value)``: a new mutable cell."""

    value: Expr

    def __post_init__(self) -> None:
        _check_expr(self.value, "the value of ref()")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefRead(Expr):
    """``!ref``."""

    ref: Expr

    def __post_init__(self) -> None:
        _check_expr(self.ref, "the reference of a read")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class RefWrite(Expr):
    """``ref := value``; evaluates to the empty tuple."""

    ref: Expr
    value: Expr

    def __post_init__(self) -> None:
        _check_expr(self.ref, "the reference of a write")
        _check_expr(self.value, "the value of a write")


@final
@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Grad(Expr):
    """The paper's gradient node: for ``fn: fn(t0..tn) -> r``, ``grad(fn)`` is
    ``fn(t0..tn) -> (r, (t0..tn))``, the value and the gradient with respect to each argument.

    relaydsl/transform/gradient.py replaces it by ordinary Relay before a program runs.
    """

    fn: Expr

    def __post_init__(self) -> None:
        _check_expr(self.fn, "the function of grad()")


class Printer(Protocol):
    """What prints nodes in the Relay text format: relaydsl/ir/printer.py's ``astext``."""

    def __call__(self, node: Expr | IRModule, *, include_prelude: bool = False) -> str: ...


# The text format prints expressions (their repr) and modules, and is built on them (printer.py
# walks them with the visitor), so they reach it through this slot, which relaydsl/ir/__init__.py
# fills, as the op registry fills _OP_DEFINITIONS.
_printer: Printer | None = None


def install_printer(printer: Printer) -> None:
    """Make `printer` the one ``repr(expr)`` and ``IRModule.astext`` use."""
    global _printer
    _printer = printer


def installed_printer() -> Printer:
    """The printer of the text format (installed when relaydsl.ir is imported)."""
    if _printer is None:
        raise IRError("no printer is installed: import relaydsl.ir")
    return _printer


def suggest(name: str, candidates: Iterable[str]) -> str:
    """' Did you mean x, y?' for near misses among `candidates` (names or a mapping), or ''."""
    close = difflib.get_close_matches(name, list(candidates), n=3, cutoff=0.6)
    return f" Did you mean {', '.join(close)}?" if close else ""


__all__ = [
    "Expr", "Var", "GlobalVar", "Constant", "const", "Op", "Constructor", "Call", "Let",
    "Function", "Tuple", "TupleGetItem", "If", "Pattern", "Clause", "Match", "RefCreate", "RefRead",
    "RefWrite", "Grad", "suggest", "op_call", "op_names", "declare_op", "Printer",
    "install_printer", "installed_printer",
    "type_to_str",
]
