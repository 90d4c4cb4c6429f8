"""Interval analysis of te integer expressions: the bounds an index can take over loop ranges.

The code generator reads a buffer at an index only after checking, here, that the index
is provably in range; where it is not (a data-dependent index, a read in a padding
region that ``select`` still evaluates) it clamps the index. Intervals are closed,
``(lo, hi)``; None means unknown (a float, or an expression this analysis does not
bound). An expression whose bounds could leave its dtype's range may wrap: its interval
is then the whole range.

>>> from relaydsl.te.expr import IntImm, IterVar
>>> i = IterVar("i", 8)
>>> interval(i * IntImm(2, "int32") + IntImm(1, "int32"), Scope({i: (0, 7)}))
(1, 15)
"""
from __future__ import annotations

import numpy as np

from relaydsl.te.expr import (
    Add, Cast, Div, FloorDiv, FloorMod, IntImm, IterVar, Max, Min, Mul, PrimExpr, Reduce,
    Select, Sub, TensorRead, Var,
)
from relaydsl.te.tensor import Tensor

Interval = tuple[int, int] | None


class Scope:
    """The ranges of the axes and variables in scope, and the intervals found in it; nested
    (a reduction's axes, an inlined tensor's body) through `parent`."""

    def __init__(self, ranges: dict[PrimExpr, Interval], parent: "Scope | None" = None):
        self.ranges, self.parent = ranges, parent
        self.intervals: dict[PrimExpr, Interval] = {}


def interval(e: PrimExpr, scope: Scope, inlined: frozenset[Tensor] | set[Tensor] = frozenset()
             ) -> Interval:
    """Bounds of integer expression `e` over `scope`'s ranges (None for floats). A read of
    a tensor in `inlined` is bounded by its body's bounds."""
    if is_float(e.dtype):
        return None
    s: Scope | None = scope
    while s is not None:
        if e in s.intervals:
            return s.intervals[e]
        s = s.parent
    r = _interval(e, scope, inlined)
    full = dtype_range(e.dtype)
    if r is None or r[0] < full[0] or r[1] > full[1]:
        r = full  # could wrap: anything
    scope.intervals[e] = r
    return r


def _interval(e: PrimExpr, scope: Scope, inlined) -> Interval:
    match e:
        case IntImm(value=v):
            return (v, v)
        case IterVar() | Var():
            return scope.ranges.get(e)
        case Add(a=a, b=x) | Sub(a=a, b=x) | Mul(a=a, b=x) | Min(a=a, b=x) | Max(a=a, b=x):
            p, q = interval(a, scope, inlined), interval(x, scope, inlined)
            if p is None or q is None:
                return None
            if isinstance(e, Add):
                return (p[0] + q[0], p[1] + q[1])
            if isinstance(e, Sub):
                return (p[0] - q[1], p[1] - q[0])
            if isinstance(e, Min):
                return (min(p[0], q[0]), min(p[1], q[1]))
            if isinstance(e, Max):
                return (max(p[0], q[0]), max(p[1], q[1]))
            prods = [x1 * x2 for x1 in p for x2 in q]
            return (min(prods), max(prods))
        case FloorDiv(a=a, b=x) | Div(a=a, b=x) | FloorMod(a=a, b=x):
            p, q = interval(a, scope, inlined), interval(x, scope, inlined)
            if p is None or q is None or q[0] <= 0:
                return None
            if isinstance(e, FloorMod):
                return p if p[0] >= 0 and p[1] < q[0] else (0, q[1] - 1)
            return (min(p[0] // q[0], p[0] // q[1]), max(p[1] // q[0], p[1] // q[1]))
        case Select(true_value=tv, false_value=fv):
            p, q = interval(tv, scope, inlined), interval(fv, scope, inlined)
            if p is None or q is None:
                return None
            return (min(p[0], q[0]), max(p[1], q[1]))
        case Cast(value=v):
            if is_float(v.dtype):
                return None
            return interval(v, scope, inlined)
        case TensorRead(tensor=t, indices=idx) if t in inlined:
            assert t.body is not None
            ranges = {a: clamped(interval(i, scope, inlined), a.extent)
                      for a, i in zip(t.axes, idx)}
            return interval(t.body, Scope(ranges), inlined)
        case Reduce(init=init, source=src, combined=comb, axes=axes):
            if isinstance(comb, (Min, Max)):
                inner = Scope({**scope.ranges, **{a: (0, a.extent - 1) for a in axes}}, scope)
                p, q = interval(init, scope, inlined), interval(src, inner, inlined)
                if p is None or q is None:
                    return None
                return (min(p[0], q[0]), max(p[1], q[1]))
            return None
    return None


def clamped(r: Interval, extent: int) -> tuple[int, int]:
    """`r` within ``[0, extent)``: the indices a read clamped to an axis of `extent` takes."""
    if r is None:
        return (0, extent - 1)
    return (min(max(r[0], 0), extent - 1), max(min(r[1], extent - 1), 0))


def is_float(dtype: str) -> bool:
    return dtype.startswith("float")


def dtype_range(dtype: str) -> tuple[int, int]:
    if dtype == "bool":
        return (0, 1)
    info = np.iinfo(dtype)
    return (int(info.min), int(info.max))
