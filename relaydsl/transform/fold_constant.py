"""Constant folding: op calls whose arguments are all constants become constants.

Each such call is evaluated once, at compile time, with the op's NumPy reference
(the interpreter's semantics); ``shape_of`` of a statically shaped tensor is its
shape, and ``cast_like(c, x)`` of a constant is ``c`` in ``x``'s dtype. What a
program computes is unchanged; the llvm target then runs fewer kernels (a loop over the
rows of a tensor tests ``i < shape_of(data)[0]`` on every iteration: after folding,
``i < 50``).

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(50, 3), float32], %i: int32) {
...   less(%i, take(shape_of(%x), 0, axis=0))
... }'''))
>>> print(fold_constants(mod)["main"].body)
less(%i: Tensor[(), int32], 50i32)
"""
from __future__ import annotations

import numpy as np

from relaydsl.ir.expr import Call, Constant, Expr, Function, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform._util import retyped

def fold_constants(mod: IRModule) -> IRModule:
    """A copy of `mod` with constant op calls evaluated (in every user function)."""
    out = mod.copy()
    changed = False
    for gv, fn in list(out.user_functions().items()):
        folded = _Fold().visit(fn)
        assert isinstance(folded, Function)  # a function's rewrite is a function
        if folded is not fn:
            out.add(gv, folded)
            changed = True
    return retyped(out, types_kept=not changed)


class _Fold(ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not isinstance(new, Call) or not isinstance(new.op, Op):
            return new
        traits = new.op.definition.traits
        if traits.fold_from_types is not None and all(a.has_type for a in call.args):
            folded = traits.fold_from_types(new, [a.checked_type for a in call.args])
            if folded is not None:
                return folded
        constants = [a for a in new.args if isinstance(a, Constant)]
        if len(constants) != len(new.args):
            return new  # (zeros(), ones(): no arguments, constants)
        try:
            value = new.op.definition.numpy_ref(*[c.data for c in constants], **new.attrs)
        except Exception:  # left for run time, where the error is reported with its location
            return new
        if not isinstance(value, np.ndarray | np.generic):
            return new  # tuple results stay calls
        return Constant(np.asarray(value), span=call.span)
