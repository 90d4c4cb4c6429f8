"""Compute rules of the reductions (relaydsl/op/reduce.py).

sum, prod, max and min fold their te reducer over the reduced axes in the
input dtype (bool max/min, NumPy's any/all, fold int8 0/1 values); mean divides
the sum by the count (float16 through float32, as NumPy does). argmax/argmin
take two passes: the extreme value, then the least flat position (over the
reduced axes, row-major) holding it, or holding a NaN, as NumPy's first NaN.
collapse_sum_like (the adjoint of broadcasting) sums over the axes broadcasting
added or expanded.
"""
from __future__ import annotations

import math

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.te import tensor as T
from relaydsl.te.compute_rules.elementwise import ComputeRule
from relaydsl.te.indexing import norm_axes, over_axes, ravel
from relaydsl.te.expr import PrimExpr, cast, const, equal, not_equal, select
from relaydsl.te.tensor import Reducer, Tensor, compute, reduce_axis


def _copy(x: Tensor, shape: tuple[int, ...], name: str) -> Tensor:
    """NumPy's reduction over no axis: x itself (reshaped to the output shape)."""
    return compute(shape, lambda *o: x[tuple(o[-x.ndim:]) if x.ndim else ()], name)


def _fold(reducer: Reducer):
    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (x,) = inputs
        axes, shape = norm_axes(attrs.axis, x.ndim), out_type.concrete_shape()
        name = f"T_{reducer.name}"
        if not axes:
            return _copy(x, shape, name)
        if x.dtype == "bool":  # max is any, min is all
            return over_axes(x, axes, attrs.keepdims, shape, lambda idx, r, o: not_equal(
                reducer(cast("int8", x[idx]), r), 0), name)
        return over_axes(x, axes, attrs.keepdims, shape, lambda idx, r, o: reducer(x[idx], r),
                         name)

    return rule


def _mean(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    axes, shape = norm_axes(attrs.axis, x.ndim), out_type.concrete_shape()
    if not axes:
        return _copy(x, shape, "T_mean")
    count = math.prod(x.shape[a] for a in axes)
    acc = "float32" if x.dtype == "float16" else x.dtype

    def body(idx: tuple, r: list, o: tuple) -> PrimExpr:
        v = x[idx] if acc == x.dtype else cast(acc, x[idx])
        m = T.sum(v, r) / float(count)
        return m if acc == x.dtype else cast(x.dtype, m)

    return over_axes(x, axes, attrs.keepdims, shape, body, "T_mean")


def _arg(op: str, extreme: Reducer):
    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (x,) = inputs
        shape = out_type.concrete_shape()
        axes = norm_axes(attrs.axis, x.ndim)
        if not axes:  # a scalar input
            return compute(shape, lambda *o: const(0), f"T_{op}")

        def value(idx: tuple) -> PrimExpr:
            return cast("int8", x[idx]) if x.dtype == "bool" else x[idx]

        best = over_axes(x, axes, attrs.keepdims, shape,
                         lambda idx, r, o: extreme(value(idx), r), f"T_{op}_value")
        extents = [x.shape[a] for a in axes]
        past_end = math.prod(extents)

        def first(idx: tuple, r: list, o: tuple) -> PrimExpr:
            v = value(idx)
            hit = equal(v, best[o]) | not_equal(v, v)  # v != v: a NaN, which NumPy picks first
            return T.min(select(hit, ravel(r, extents), past_end), r)

        return over_axes(x, axes, attrs.keepdims, shape, first, f"T_{op}")

    return rule


def _collapse_sum_like(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """data summed over the axes broadcasting like's shape to data's adds (the leading ones)
    or expands (like has 1, data more), in data's dtype; like gives only the shape."""
    data, like = inputs
    target, lead = like.shape, data.ndim - like.ndim
    axes = tuple(range(lead)) + tuple(lead + i for i, t in enumerate(target)
                                      if t == 1 and data.shape[lead + i] != 1)
    if not axes:  # like has data's shape
        return _copy(data, target, "T_collapse_sum_like")
    if math.prod(data.shape[a] for a in axes) == 0:  # an empty sum
        return compute(target, lambda *o: const(0, data.dtype), "T_collapse_sum_like")

    def f(*o: PrimExpr) -> PrimExpr:
        r = [reduce_axis(data.shape[a], f"r{a}") for a in axes]
        index = [r[axes.index(d)] if d in axes else o[d - lead] for d in range(data.ndim)]
        return T.sum(data[tuple(index)], r)

    return compute(target, f, "T_collapse_sum_like")


RULES: dict[str, ComputeRule] = {
    "sum": _fold(T.sum), "prod": _fold(T.prod), "max": _fold(T.max), "min": _fold(T.min),
    "mean": _mean, "argmax": _arg("argmax", T.max), "argmin": _arg("argmin", T.min),
    "collapse_sum_like": _collapse_sum_like,
}
