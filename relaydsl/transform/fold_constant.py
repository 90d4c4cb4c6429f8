"""Constant folding: op calls whose arguments are all constants become constants.

Each such call is evaluated once, at compile time, with the op's NumPy reference
(the interpreter's semantics); ``shape_of`` of a statically shaped tensor is its
shape, and ``cast_like(c, x)`` of a constant is ``c`` in ``x``'s dtype. What a
program computes is unchanged; the llvm target then runs fewer kernels (a loop over the rows of a tensor tests ``i < shape_of(data)[0]`` on every
iteration: after folding, ``i < 50``).

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

from relaydsl.ir.expr import Call, Constant, Expr, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType
from relaydsl.ir.visitor import ExprMutator
from relaydsl.transform._util import retyped

# Ops whose result is not a function of their arguments' values alone.
_NOT_FOLDED = {"dropout"}


def fold_constants(mod: IRModule) -> IRModule:
    """A copy of `mod` with constant op calls evaluated (in every user function)."""
    out = mod.copy()
    changed = False
    for gv, fn in list(out.user_functions().items()):
        folded = _Fold().visit(fn)
        if folded is not fn:
            out.add(gv, folded)
            changed = True
    return retyped(out, types_kept=not changed)


class _Fold(ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        new = super().visit_call(call)
        if not isinstance(new, Call) or not isinstance(new.op, Op) or new.op.name in _NOT_FOLDED:
            return new
        if new.op.name == "shape_of":
            t = call.args[0].checked_type if call.args else None
            if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
                return Constant(np.array(t.shape, np.int32), span=call.span)
            return new
        if new.op.name == "cast_like" and isinstance(new.args[0], Constant):
            # a Python literal meeting a tensor (``x + 1.0``): only the tensor's dtype matters,
            # and left as a call it would read the tensor, keeping `+` out of x's group
            t = call.args[1].checked_type
            if isinstance(t, TensorType) and isinstance(t.dtype, str):
                return Constant(np.asarray(new.args[0].data).astype(t.dtype), span=call.span)
            return new
        if not all(isinstance(a, Constant) for a in new.args):  # zeros(), ones(): constants
            return new
        try:
            value = new.op.definition.numpy_ref(*[a.data for a in new.args], **new.attrs)
        except Exception:  # left for run time, where the error is reported with its location
            return new
        if not isinstance(value, np.ndarray | np.generic):
            return new  # tuple results stay calls
        return Constant(np.asarray(value), span=call.span)
