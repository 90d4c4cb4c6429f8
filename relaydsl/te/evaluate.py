"""The reference evaluator of the tensor-expression language, over NumPy.

``evaluate(C, {A: a, B: b})`` returns the NumPy array of the computed tensor
``C`` given arrays for the placeholders it (transitively) reads. It is the
executable definition of te: compute rules are tested here against their
ops' NumPy references before any backend lowers them.

Rather than looping over elements, a compute body is evaluated once over an
index *grid*: the axis ``d`` of an ``n``-D output is ``arange(extent)`` shaped
to broadcast along dimension ``d`` of ``n``, so every node evaluates to an
array broadcastable to the output shape. A reduction appends its reduce axes
as trailing grid dimensions, evaluates its source there, and folds those
dimensions with its combiner, starting from its init, in row-major order.

Both branches of a ``select`` are evaluated; a read out of bounds is an error
only where the enclosing selects choose it (so padding is written
``select(in_bounds, A[i - 1], 0)``), and masked-out lanes read index 0.

>>> import numpy as np
>>> from relaydsl import te
>>> A = te.placeholder((2, 3), "float32", "A")
>>> k = te.reduce_axis(3, "k")
>>> S = te.compute((2,), lambda i: te.sum(A[i, k] * 2.0, axis=[k]), "S")
>>> evaluate(S, {A: np.arange(6, dtype="float32").reshape(2, 3)})
array([ 6., 24.], dtype=float32)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable, Mapping

import numpy as np

from relaydsl.errors import IRError
from relaydsl.te.expr import (
    EQ, GE, GT, INT_DTYPES, LE, LT, NE, Add, And, BinaryOp, Call, Cast, Div, FloatImm, FloorDiv,
    FloorMod, IntImm, IterVar, Max, Min, Mul, Not, Or, PrimExpr, Reduce, Select, Sub, TensorRead,
    Var,
)
from relaydsl.te.tensor import Tensor

Array = np.ndarray


def _divide(a: Array, b: Array) -> Array:
    return np.floor_divide(a, b) if a.dtype.name in INT_DTYPES else np.true_divide(a, b)


BINARY: dict[type, Callable[[Array, Array], AnyValue]] = {
    Add: np.add, Sub: np.subtract, Mul: np.multiply, Div: _divide,
    FloorDiv: np.floor_divide, FloorMod: np.mod, Min: np.minimum, Max: np.maximum,
    EQ: np.equal, NE: np.not_equal, LT: np.less, LE: np.less_equal,
    GT: np.greater, GE: np.greater_equal, And: np.logical_and, Or: np.logical_or,
}


def evaluate(tensor: Tensor, inputs: Mapping[Tensor, AnyValue],
             bindings: Mapping[Var, AnyValue] | None = None) -> Array:
    """The value of ``tensor``; ``inputs`` gives every placeholder, ``bindings`` every free Var."""
    with np.errstate(all="ignore"):  # masked-out lanes may divide by zero or overflow
        return _Evaluator(inputs, dict(bindings or {})).tensor(tensor)


@dataclass
class _Context:
    """Where an expression is evaluated: index arrays of ``rank`` dims, the live-lane mask."""

    env: dict[PrimExpr, Array]
    rank: int
    mask: Array | None
    memo: dict[PrimExpr, Array] = field(default_factory=dict[PrimExpr, Array])


class _Evaluator:
    def __init__(self, inputs: Mapping[Tensor, AnyValue], bindings: dict[Var, AnyValue]):
        self.inputs = inputs
        self.bindings = bindings
        self.done: dict[Tensor, Array] = {}

    def tensor(self, t: Tensor) -> Array:
        if t in self.done:
            return self.done[t]
        if t.body is None:
            value = self._placeholder(t)
        else:
            rank = t.ndim
            env: dict[PrimExpr, Array] = {
                ax: np.arange(ax.extent, dtype=ax.dtype).reshape(_along(d, rank))
                for d, ax in enumerate(t.axes)
            }
            for var, v in self.bindings.items():
                env[var] = np.asarray(v, dtype=var.dtype)
            body = self.expr(t.body, _Context(env, rank, None))
            value = np.array(np.broadcast_to(body, t.shape), order="C")  # keeps 0-d shapes
        self.done[t] = value
        return value

    def _placeholder(self, t: Tensor) -> Array:
        if t not in self.inputs:
            raise IRError(f"evaluate: no array given for placeholder {t.name}")
        value = np.asarray(self.inputs[t])
        if value.shape != t.shape or value.dtype.name != t.dtype:
            raise IRError(f"evaluate: placeholder {t.name} is {t.dtype}{list(t.shape)}, "
                          f"given an array of {value.dtype.name}{list(value.shape)}")
        return value

    def expr(self, e: PrimExpr, ctx: _Context) -> Array:
        key = e
        if key not in ctx.memo:
            value = np.asarray(self._compute(e, ctx))
            if value.dtype.name != e.dtype:
                raise IRError(f"evaluate: {e} gave {value.dtype.name}, expected {e.dtype}")
            ctx.memo[key] = value
        return ctx.memo[key]

    def _compute(self, e: PrimExpr, ctx: _Context) -> AnyValue:
        match e:
            case IntImm(value=v, dtype=d) | FloatImm(value=v, dtype=d):
                return np.asarray(v, dtype=d)
            case Var() | IterVar():
                if e not in ctx.env:
                    what = "reduce axis" if isinstance(e, IterVar) else "variable"
                    raise IRError(f"evaluate: {what} {e} is used outside its scope or unbound")
                return ctx.env[e]
            case BinaryOp(a=a, b=b):
                return BINARY[type(e)](self.expr(a, ctx), self.expr(b, ctx))
            case Not(a=a):
                return np.logical_not(self.expr(a, ctx))
            case Cast(dtype=d, value=v):
                return self.expr(v, ctx).astype(d)
            case Call(intrinsic=intrinsic, args=args):
                return intrinsic.numpy(*(self.expr(a, ctx) for a in args))
            case Select(condition=c, true_value=t, false_value=f):
                cond = self.expr(c, ctx)
                live = cond if ctx.mask is None else ctx.mask & cond
                dead = ~cond if ctx.mask is None else ctx.mask & ~cond
                then = self.expr(t, _Context(ctx.env, ctx.rank, live))
                other = self.expr(f, _Context(ctx.env, ctx.rank, dead))
                return np.where(cond, then, other)
            case TensorRead(tensor=t, indices=indices):
                return self._read(t, [self.expr(i, ctx) for i in indices], ctx.mask)
            case Reduce():
                return self._reduce(e, ctx)
            case _:
                raise IRError(f"evaluate: not a te expression: {e!r}")

    def _read(self, t: Tensor, indices: list[Array], mask: Array | None) -> Array:
        array = self.tensor(t)
        safe: list[Array] = []
        for d, (idx, extent) in enumerate(zip(indices, t.shape)):
            outside = (idx < 0) | (idx >= extent)
            if mask is not None:
                outside = outside & mask
            if np.any(outside):
                bad = np.broadcast_to(idx, outside.shape)[outside].ravel()[0]
                raise IRError(f"evaluate: {t.name} read out of bounds: index {bad} in "
                              f"dimension {d} of extent {extent} (guard it with te.select)")
            safe.append(np.where((idx < 0) | (idx >= extent), 0, idx))
        return array[tuple(safe)]

    def _reduce(self, r: Reduce, ctx: _Context) -> Array:
        k, rank = len(r.axes), ctx.rank
        extents = tuple(ax.extent for ax in r.axes)

        def widen(a: Array) -> Array:
            return a.reshape(a.shape + (1,) * k) if a.ndim == rank else a

        env = {var: widen(v) for var, v in ctx.env.items()}
        for j, ax in enumerate(r.axes):
            if ax in env:
                raise IRError(f"evaluate: reduce axis {ax} is reduced twice")
            env[ax] = np.arange(ax.extent, dtype=ax.dtype).reshape(_along(rank + j, rank + k))
        mask = None if ctx.mask is None else widen(ctx.mask)
        source = self.expr(r.source, _Context(env, rank + k, mask))
        source = source.reshape((1,) * (rank + k - source.ndim) + source.shape)
        source = np.broadcast_to(source, source.shape[:rank] + extents)
        flat = source.reshape((*source.shape[:rank], math.prod(extents)))  # -1 fails if empty
        acc = self.expr(r.init, ctx)
        for n in range(flat.shape[-1]):
            step = {**ctx.env, r.lhs: acc, r.rhs: flat[..., n]}
            acc = self.expr(r.combined, _Context(step, rank, None))
        return acc


def _along(d: int, rank: int) -> tuple[int, ...]:
    """The shape of an index array varying along grid dimension ``d`` of ``rank``."""
    return tuple(-1 if j == d else 1 for j in range(rank))
