"""What is known statically of a translated value: a tensor, a tuple and its fields, a list, a
function. It decides what ``t[0]`` and ``for`` mean.

A value's `Kind` is a `ValueKind`, a `TupleKind` (a tuple whose fields' kinds are known), a
model made by ``relay.create_model`` (``training.ModelValue``), or None: nothing is known here,
and where it matters type inference decides (getitem.py). It comes from annotations and
constructions: a parameter's type, an op's result, a tuple built in the function, the declared
result of a function called (`KnownKinds.note_result`).
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any as AnyValue, TypeAlias

from relaydsl.frontend.translate.getitem import GETITEM
from relaydsl.frontend.translate.literals import Number
from relaydsl.ir.expr import (
    Call,
    Constant,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    Grad,
    If,
    Let,
    Match,
    Op,
    RefCreate,
    RefRead,
    RefWrite,
    Tuple,
    TupleGetItem,
    Var,
)
from relaydsl.ir.visitor import ExprFunctorWithArgs
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall
from relaydsl.prelude import prelude_definitions

if TYPE_CHECKING:
    from relaydsl.frontend.training import ModelValue
    from relaydsl.frontend.translate.bindings import Env


class ValueKind(Enum):
    """What a value is known to be."""

    TENSOR = "tensor"
    LIST = "list"  # a relay.List
    FUNCTION = "function"
    GRAD = "grad"  # a grad function: calling it gives (value, gradients)
    TUPLE = "tuple"  # a tuple whose fields are not known


@dataclass(frozen=True)
class TupleKind:
    """A tuple whose fields' kinds are known."""

    fields: tuple[Kind, ...]


Kind: TypeAlias = "ValueKind | TupleKind | ModelValue | None"


def is_tuple(kind: Kind) -> bool:
    """Whether `kind` is a tuple's, its fields known or not."""
    return kind is ValueKind.TUPLE or isinstance(kind, TupleKind)


def kind_of_type(t: Type | None) -> Kind:
    """What a declared type says of a value: a tuple type gives the kinds of its fields."""
    if isinstance(t, TensorType):
        return ValueKind.TENSOR
    if isinstance(t, TupleType):
        return TupleKind(tuple(kind_of_type(f) for f in t.fields))
    if isinstance(t, FuncType):
        return ValueKind.FUNCTION
    if isinstance(t, TypeCall) and t.func.name == "List":
        return ValueKind.LIST
    return None


def declared_result_kind(target: AnyValue) -> Kind:
    """The kind of what a decorated function returns, when its result type is written."""
    fn = getattr(target, "function", None)
    return kind_of_type(fn.ret_type) if isinstance(fn, Function) else None


def _op_result_kind(call: Call) -> Kind:
    """The kind of an operator call's result: a tuple of tensors for an op with a tuple
    result (its ``result_arity`` trait; fields unknown when the attributes do not fix
    them), else a tensor (no trait, or an arity of 0: topk's ``ret_type="values"``)."""
    assert isinstance(call.op, Op)
    arity = call.op.definition.traits.result_arity
    if arity is None:
        return ValueKind.TENSOR
    n = arity(call.attrs)
    if n == 0:
        return ValueKind.TENSOR
    return ValueKind.TUPLE if n is None else TupleKind((ValueKind.TENSOR,) * n)


class KnownKinds(ExprFunctorWithArgs[["Env"], Kind]):
    """The kinds of one function's values: found from their constructions (`of`), or noted
    where the construction does not say (a call of a function whose result type is written, a
    special call's result)."""

    def __init__(self) -> None:
        self._noted: dict[Expr, Kind] = {}
        # what calling a function value gives, when known: a nested def with a declared
        # result type, an exported model (``relay.export_model(m)(x)[0]``), names bound to them
        self._results: dict[Expr, Kind] = {}

    def note(self, e: Expr, kind: Kind) -> None:
        """`e`'s kind is `kind`."""
        self._noted[e] = kind

    def note_result(self, f: Expr, kind: Kind) -> None:
        """Calling the function value `f` gives a value of `kind`."""
        self._results[f] = kind

    def result(self, f: Expr | Number) -> Kind:
        """The kind of what calling the function value `f` gives, when noted."""
        return self._results.get(f) if isinstance(f, Expr) else None

    def of(self, e: Expr | Number, env: Env) -> Kind:
        """What is known statically of a translated value, from annotations and constructions."""
        if not isinstance(e, Expr):
            return ValueKind.TENSOR  # a Python number
        known = self._noted.get(e)
        return known if known is not None else self.visit(e, env)

    # ---- a construction's kind, by the node's kind (unknown: None) ----
    def visit_constant(self, c: Constant, env: Env) -> Kind:
        return ValueKind.TENSOR

    def visit_var(self, var: Var, env: Env) -> Kind:
        for b in env.values():
            if b.expr is var:
                return b.kind
        return kind_of_type(var.type_annotation)

    def visit_tuple(self, t: Tuple, env: Env) -> Kind:
        return TupleKind(tuple(self.of(f, env) for f in t.fields))

    def visit_tuple_getitem(self, t: TupleGetItem, env: Env) -> Kind:
        outer = self.of(t.tuple_value, env)
        if isinstance(outer, TupleKind) and t.index < len(outer.fields):
            return outer.fields[t.index]
        return None

    def visit_let(self, let: Let, env: Env) -> Kind:
        return self.of(let.body, env)

    def visit_if(self, i: If, env: Env) -> Kind:
        then = self.of(i.true_branch, env)
        return then if then == self.of(i.false_branch, env) else None

    def visit_function(self, fn: Function, env: Env) -> Kind:
        return ValueKind.FUNCTION

    def visit_grad(self, g: Grad, env: Env) -> Kind:
        return ValueKind.GRAD

    def visit_call(self, call: Call, env: Env) -> Kind:
        callee = call.op
        if callee is GETITEM:
            return None  # a tuple's field or a tensor's row, unknown until type inference
        if isinstance(callee, Op):
            return _op_result_kind(call)
        if isinstance(callee, Constructor):
            return ValueKind.LIST if callee.belong_to.name == "List" else None
        if isinstance(callee, GlobalVar):
            prelude = prelude_definitions()[1].get(callee)  # relay.map, relay.zip, ...
            return kind_of_type(prelude.ret_type) if prelude is not None else None
        if isinstance(callee, Grad) or self.of(callee, env) is ValueKind.GRAD:
            return TupleKind((ValueKind.TENSOR, ValueKind.TUPLE))  # (f(args), (d/darg0, ...))
        return None

    def visit_global_var(self, gv: GlobalVar, env: Env) -> Kind:
        return None

    def visit_op(self, op: Op, env: Env) -> Kind:
        return None

    def visit_constructor(self, c: Constructor, env: Env) -> Kind:
        return None

    def visit_match(self, m: Match, env: Env) -> Kind:
        return None

    def visit_ref_create(self, r: RefCreate, env: Env) -> Kind:
        return None

    def visit_ref_read(self, r: RefRead, env: Env) -> Kind:
        return None

    def visit_ref_write(self, r: RefWrite, env: Env) -> Kind:
        return None
