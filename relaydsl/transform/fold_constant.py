"""Constant folding, as TVM's FoldConstant: what is known at compile time becomes a constant.

- an op call whose arguments are constants, or tuples of constants (``concatenate``,
  ``stack``), is evaluated once with the op's NumPy reference (the interpreter's semantics);
  an op with a tuple result (``split``) becomes a tuple of constants;
- an op may know its result from its arguments' types (``Traits.fold_from_types``):
  ``shape_of`` of a statically shaped tensor is its shape, ``cast_like(c, x)`` of a constant
  is ``c`` in ``x``'s dtype;
- a let binding a constant, or a tuple of constants, is dropped and the constant used in
  its place (``let %t = 1f; add(%t, %t)`` is ``add(1f, 1f)``, then ``2f``);
- a projection of a tuple literal is the field (``(%x, 1f).1`` is ``1f``), also through a
  variable bound to a tuple of variables and constants (``let %t = (%a, %b); %t.1`` is
  ``%b``: then ``%t``, and ``%a`` if nothing else reads it, are dead code, as the loss
  beside a gradient's tuple when only the gradients are used);
- ``if`` on a constant condition is the branch it takes.

Effects stay: nothing that would drop the evaluation of a reference operation or of a call
of a function or closure is folded (``shape_of(@f(%x))`` stays, ``(@f(%x), 1f).1`` too).
Every op but a collective (psum, whose value depends on the other ranks) is a pure function
of its arguments (dropout's mask of its key), so any other op call on constants folds,
except one whose evaluation fails: that is left for run time, where
the error is reported with its location.

What a program computes is unchanged; the llvm target then runs fewer kernels (a loop over
the rows of a tensor tests ``i < shape_of(data)[0]`` on every iteration: after folding,
``i < 50``).

Before and after:

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(50, 3), float32], %i: int32) {
...   less(%i, take(shape_of(%x), 0, axis=0))
... }'''))
>>> print(fold_constants(mod)["main"].body)
less(%i: Tensor[(), int32], 50i32)
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(2), float32]) {
...   let %c = split(ones(shape=[4], dtype="float32"), indices_or_sections=2);
...   if (greater(sum(%c.0), 1f)) { add(%x, sum(%c.1)) } else { %x }
... }'''))
>>> print(fold_constants(mod)["main"].body)
add(%x: Tensor[(2,), float32], 2f)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any as AnyValue, cast

import numpy as np

from relaydsl.ir.attrs import is_tuple
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, If, Let, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform._util import ascribes, communicates, is_pure, rewrite_functions
from relaydsl.transform.pass_infra import Pass


# Expressions whose evaluation is no computation: a projection may be replaced by one.
_ATOMS = (Var, Constant, GlobalVar, Op)


@dataclass(frozen=True)
class FoldConstant(Pass, opt_level=2,
                   description="evaluate what is known at compile time: constant op calls, "
                               "lets, projections, ifs"):
    """Every user function with what is known at compile time folded (see the module doc)."""

    def transform(self, mod: IRModule) -> IRModule:
        return rewrite_functions(mod, fold_function)


def fold_constants(mod: IRModule) -> IRModule:
    """``FoldConstant()(mod)``: a copy of `mod` with what is known at compile time folded."""
    return FoldConstant()(mod)


def fold_function(fn: Function) -> Function:
    """`fn`, typed, with what is known at compile time folded (a folded value takes its
    call's type, so the calls to fold must be typed)."""
    out = _Fold().visit(fn)
    assert isinstance(out, Function)
    return out


def is_constant(e: Expr) -> bool:
    """A constant, or a tuple of constants (TVM's "simple constant")."""
    if isinstance(e, Tuple):
        return all(is_constant(f) for f in e.fields)
    return isinstance(e, Constant)


def _value(e: Expr) -> AnyValue:
    """The NumPy value of a constant or tuple of constants, as the NumPy references take it."""
    if isinstance(e, Tuple):
        return tuple(_value(f) for f in e.fields)
    assert isinstance(e, Constant)
    return e.data


def _literal(value: AnyValue, t: Type, call: Call) -> Expr | None:
    """`value` as a constant (or tuple of constants) of type `t`, or None when it does not
    have that type: the call is then left for run time rather than retyped."""
    if isinstance(t, TupleType):
        if not is_tuple(value) or len(value) != len(t.fields):
            return None
        fields = [_literal(v, ft, call) for v, ft in zip(value, t.fields)]
        if any(f is None for f in fields):
            return None
        return Tuple(tuple(f for f in fields if f is not None), span=call.span)
    if not isinstance(t, TensorType) or not isinstance(value, np.ndarray | np.generic):
        return None
    # (isinstance leaves the dtype unknown)
    array = np.asarray(cast("np.ndarray | np.generic", value))
    if array.shape != t.shape or array.dtype.name != t.dtype:
        return None
    return Constant(array, span=call.span)


class _Fold(ExprMutator):
    def __init__(self) -> None:
        super().__init__()
        # let-bound tuple literals of atoms: a projection of the variable is the field
        self.tuples: dict[Var, Tuple] = {}

    def visit_let(self, let: Let) -> Expr:
        # Walks the chain iteratively (as the base class): a binding of a constant is dropped
        # and its variable maps to the constant in the memo, so its uses become the constant.
        kept: list[tuple[Let, Expr]] = []
        node: Expr = let
        while isinstance(node, Let):
            value = self.visit(node.value)
            if is_constant(value) and not ascribes(node.var, value):
                self.memo[node.var] = value
            else:
                kept.append((node, value))
                if isinstance(value, Tuple) and all(isinstance(f, _ATOMS) for f in value.fields):
                    self.tuples[node.var] = value
            node = node.body
        body = self.visit(node)
        for link, value in reversed(kept):
            if value is not link.value or body is not link.body:
                body = Let(link.var, value, body, span=link.span)
            else:
                body = link
        return body

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        new = super().visit_tuple_getitem(t)
        assert isinstance(new, TupleGetItem)
        return self._field(new.tuple_value, new.index) or new

    def _field(self, value: Expr, index: int) -> Expr | None:
        """Field `index` of `value` where the tuple need not be built, else None: of a
        tuple literal whose other fields have no effects, also at the end of a let chain
        (``(let %v = e; (%a, %b)).1`` is ``let %v = e; %b``, what a grad's result projected
        to its gradients is) or bound to a variable (the field an atom: moving it moves
        no computation)."""
        chain: list[Let] = []
        while isinstance(value, Let):
            chain.append(value)
            value = value.body
        if isinstance(value, Var) and value in self.tuples:
            value = self.tuples[value]
        if not isinstance(value, Tuple) or not all(
                is_pure(f) for i, f in enumerate(value.fields) if i != index):
            return None
        field = value.fields[index]
        for link in reversed(chain):
            field = Let(link.var, link.value, field, span=link.span)
        return field

    def visit_if(self, i: If) -> Expr:
        cond = self.visit(i.cond)
        if isinstance(cond, Constant) and cond.data.shape == ():
            return self.visit(i.true_branch if cond.data.item() else i.false_branch)
        a, b = self.visit(i.true_branch), self.visit(i.false_branch)
        if cond is i.cond and a is i.true_branch and b is i.false_branch:
            return i
        return If(cond, a, b, span=i.span)

    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not isinstance(new, Call) or not isinstance(new.op, Op):
            return new
        traits = new.op.definition.traits
        if traits.fold_from_types is not None and all(a.has_type for a in call.args) \
                and all(is_pure(a) for a in new.args):  # the arguments' evaluation may go
            folded = traits.fold_from_types(new, [a.checked_type for a in call.args])
            if folded is not None:
                return folded
        if not all(is_constant(a) for a in new.args) or not call.has_type:
            return new
        return evaluate_call(new, [_value(a) for a in new.args], call.checked_type) or new


def evaluate_call(call: Call, args: Sequence[AnyValue], t: Type) -> Expr | None:
    """The value of the op call `call` on the NumPy values `args` (arrays, or tuples of them
    for tuple-taking ops), as a literal of type `t`; None to leave the call for run time."""
    assert isinstance(call.op, Op)
    if communicates(call):  # a sum over the ranks is known only when they run
        return None
    try:
        value = call.op.definition.numpy_ref(*args, **call.attrs)
    except Exception:  # left for run time, where the error is reported with its location
        return None
    return _literal(value, t, call)
