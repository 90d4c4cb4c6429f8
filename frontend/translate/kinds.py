"""What is known statically of a translated value: a tensor, a tuple and its fields, a list, a
function. It decides what ``t[0]`` and ``for`` mean."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any as AnyValue

from relaydsl.frontend.translate.base import TranslatorBase
from relaydsl.frontend.translate.getitem import GETITEM
from relaydsl.frontend.translate.literals import _Literal
from relaydsl.ir.adt import Constructor
from relaydsl.ir.expr import (
    Call,
    Constant,
    Expr,
    Function,
    GlobalVar,
    Grad,
    If,
    Let,
    Op,
    Tuple,
    TupleGetItem,
    Var,
)
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall
from relaydsl.prelude import prelude_definitions

if TYPE_CHECKING:
    from relaydsl.frontend.translate.bindings import Env

# "tensor", "list", "func", "grad" (a grad function: its calls give (value, gradients)),
# "tuple" (fields unknown), a tuple of kinds, or None
Kind = AnyValue


def _is_tuple_kind(kind: Kind) -> bool:
    return kind == "tuple" or isinstance(kind, tuple)


def _kind_of_type(t: Type | None) -> Kind:
    """What a declared type says of a value: a tuple type gives the kinds of its fields."""
    if isinstance(t, TensorType):
        return "tensor"
    if isinstance(t, TupleType):
        return tuple(_kind_of_type(f) for f in t.fields)
    if isinstance(t, FuncType):
        return "func"
    if isinstance(t, TypeCall) and t.func.name == "List":
        return "list"
    return None


def _op_result_kind(call: Call) -> Kind:
    """The kind of an operator call's result: a tuple of tensors for an op with a tuple
    result (its ``result_arity`` trait; fields unknown when the attributes do not fix
    them), else a tensor."""
    assert isinstance(call.op, Op)
    arity = call.op.definition.traits.result_arity
    if arity is None:
        return "tensor"
    n = arity(call.attrs)
    return "tuple" if n is None else ("tensor",) * n


def _declared_result_kind(target: AnyValue) -> Kind:
    """The kind of what a decorated function returns, when its result type is written."""
    fn = getattr(target, "function", None)
    return _kind_of_type(fn.ret_type) if isinstance(fn, Function) else None


class ValueKinds(TranslatorBase):
    """`kind_of`, for the translator."""

    def kind_of(self, e: Expr | _Literal, env: Env) -> Kind:
        """What is known statically of a translated value, from annotations and constructions:
        "tensor", "list", "func", "grad", "tuple" (fields unknown), a tuple of kinds, or None."""
        if isinstance(e, (_Literal, Constant)):
            return "tensor"
        known = self._kinds.get(e)
        if known is not None:
            return known
        if isinstance(e, Var):
            for b in env.values():
                if b.expr is e:
                    return b.kind
            return _kind_of_type(e.type_annotation)
        if isinstance(e, Tuple):
            return tuple(self.kind_of(f, env) for f in e.fields)
        if isinstance(e, TupleGetItem):
            outer = self.kind_of(e.tuple_value, env)
            return outer[e.index] if isinstance(outer, tuple) and e.index < len(outer) else None
        if isinstance(e, Let):
            return self.kind_of(e.body, env)
        if isinstance(e, If):
            then = self.kind_of(e.true_branch, env)
            return then if then == self.kind_of(e.false_branch, env) else None
        if isinstance(e, Call) and e.op is GETITEM:
            return None  # a tuple's field or a tensor's row, unknown until type inference
        if isinstance(e, Call) and isinstance(e.op, Op):
            return _op_result_kind(e)
        if isinstance(e, Call) and isinstance(e.op, Constructor) and e.op.belong_to.name == "List":
            return "list"
        if isinstance(e, Call) and isinstance(e.op, GlobalVar):
            prelude = prelude_definitions()[1].get(e.op)  # relay.map, relay.zip, ...
            return _kind_of_type(prelude.ret_type) if prelude is not None else None
        if isinstance(e, Function):
            return "func"
        if isinstance(e, Grad):
            return "grad"
        if isinstance(e, Call) and (isinstance(e.op, Grad) or self.kind_of(e.op, env) == "grad"):
            return ("tensor", "tuple")  # (f(args), (d/darg0, ...))
        return None
