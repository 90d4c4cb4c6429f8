"""Compute rules of the reductions (relaydsl/op/reduce.py).

sum, prod, max and min fold their te reducer over the reduced axes in the
input dtype (bool max/min, NumPy's any/all, fold int8 0/1 values); mean divides
the sum by the count (float16 through float32, as NumPy does). argmax/argmin
take two passes: the extreme value, then the least flat position (over the
reduced axes, row-major) holding it, or holding a NaN, as NumPy's first NaN.
"""
from __future__ import annotations

import math

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.te import tensor as T
from relaydsl.te.compute_rules.elementwise import ComputeRule
from relaydsl.te.compute_rules.indexing import norm_axes, over_axes, ravel
from relaydsl.te.expr import PrimExpr, cast, const, equal, not_equal, select
from relaydsl.te.tensor import Reducer, Tensor, compute


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


RULES: dict[str, ComputeRule] = {
    "sum": _fold(T.sum), "prod": _fold(T.prod), "max": _fold(T.max), "min": _fold(T.min),
    "mean": _mean, "argmax": _arg("argmax", T.max), "argmin": _arg("argmin", T.min),
}
