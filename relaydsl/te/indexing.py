"""Index arithmetic the non-elementwise compute rules share (static shapes only)."""
from __future__ import annotations

import math
from typing import Callable, Sequence

from relaydsl.te.expr import PrimExpr, const
from relaydsl.te.tensor import IterVar, Tensor, compute, reduce_axis


def norm_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """An axis attribute (None: every axis; negatives count from the end), sorted, unique."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(sorted({a % ndim for a in axes}))


def ravel(index: Sequence[PrimExpr], shape: Sequence[int]) -> PrimExpr:
    """The row-major flat position of ``index`` in ``shape``."""
    flat: PrimExpr | None = None
    for i, extent in zip(index, shape):
        flat = i if flat is None else flat * extent + i
    return const(0) if flat is None else flat


def unravel(flat: PrimExpr, shape: Sequence[int]) -> tuple[PrimExpr, ...]:
    """The index in ``shape`` of the row-major flat position ``flat``."""
    out: list[PrimExpr] = []
    for d, extent in enumerate(shape):
        stride = math.prod(shape[d + 1:])
        i = flat if stride == 1 else flat // stride
        out.append(i if d == 0 else i % extent)
    return tuple(out)


def right_aligned(shape: Sequence[int], index: Sequence[PrimExpr]) -> list[PrimExpr]:
    """The index into ``shape`` broadcast to ``index`` (NumPy: right-aligned, extent 1 at 0)."""
    lead = len(index) - len(shape)
    return [const(0) if e == 1 else index[lead + d] for d, e in enumerate(shape)]


def over_axes(x: Tensor, axes: tuple[int, ...], keepdims: bool, shape: Sequence[int],
              body: Callable[[tuple[PrimExpr, ...], list[IterVar], tuple[PrimExpr, ...]], PrimExpr],
              name: str) -> Tensor:
    """A reduction of ``x`` over ``axes``: ``body(x_index, reduce_axes, out_index)``.

    ``x_index`` reads x with the output's index on the kept axes and the fresh
    reduce axes on ``axes``; with ``keepdims`` the output keeps them with size 1.
    """

    def f(*out: PrimExpr) -> PrimExpr:
        r = [reduce_axis(x.shape[a], f"r{a}") for a in axes]
        kept = iter(out)
        index: list[PrimExpr] = []
        for d in range(x.ndim):
            if d in axes:
                index.append(r[axes.index(d)])
                if keepdims:
                    next(kept)
            else:
                index.append(next(kept))
        return body(tuple(index), r, out)

    return compute(tuple(shape), f, name)
