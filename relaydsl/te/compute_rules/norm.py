"""Compute rules of the normalisations (relaydsl/op/nn.py): batch_norm, layer_norm.

Both are ``(x - mean) / sqrt(var + epsilon)``, times gamma if ``scale``, plus
beta if ``center``, gamma and beta running along ``axis``. The statistics are
written as the references compute them: the mean (NumPy's: a sum divided by
the count, float16 summed in float32), then the variance as the mean of the
squared deviations from it. layer_norm takes them over ``axis``; batch_norm
over every other axis in training, and otherwise reads the moving statistics.

batch_norm's result is a tuple, so its rule returns three tensors:
``(out, new moving_mean, new moving_var)``; in training the moving statistics
become ``(1 - momentum) * moving + momentum * batch``, otherwise they pass
through.
"""
from __future__ import annotations

import math
from typing import Callable

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType, TupleType
from relaydsl.te import tensor as T
from relaydsl.te.rules import ComputeRule
from relaydsl.te.expr import PrimExpr, cast, sqrt
from relaydsl.te.tensor import Tensor, compute, reduce_axis

Index = tuple[PrimExpr, ...]


def _moments(x: Tensor, axes: tuple[int, ...],
             name: str) -> tuple[Tensor, Tensor, Callable[[Index], Index]]:
    """(mean, variance) of x over ``axes``, shaped as x's other axes, and the map from an
    index of x to theirs."""
    kept = tuple(d for d in range(x.ndim) if d not in axes)
    count = math.prod(x.shape[a] for a in axes)
    acc = "float32" if x.dtype == "float16" else x.dtype  # as numpy.mean

    def over(k: Index, term: Callable[[Index], PrimExpr]) -> PrimExpr:
        """The sum of term(index of x) over ``axes``, the kept axes at ``k``."""
        r = [reduce_axis(x.shape[a], f"r{a}") for a in axes]
        index: list[PrimExpr] = [r[axes.index(d)] if d in axes else k[kept.index(d)]
                                 for d in range(x.ndim)]
        v = term(tuple(index))
        return T.sum(v, r) if r else v  # no reduced axis: the value itself

    def mean_at(*k: PrimExpr) -> PrimExpr:
        m = over(k, lambda i: x[i] if acc == x.dtype else cast(acc, x[i])) / float(count)
        return m if acc == x.dtype else cast(x.dtype, m)

    shape = tuple(x.shape[d] for d in kept)
    mean = compute(shape, mean_at, f"T_{name}_mean")

    def var_at(*k: PrimExpr) -> PrimExpr:
        def square(i: Index) -> PrimExpr:
            dev = x[i] - mean[k]
            return dev * dev

        return over(k, square) / float(count)

    var = compute(shape, var_at, f"T_{name}_var")
    return mean, var, lambda o: tuple(o[d] for d in kept)


def _normalize(x: Tensor, stat: Callable[[Index], tuple[PrimExpr, PrimExpr]], gamma: Tensor,
               beta: Tensor, axis: int, attrs: Attrs, name: str) -> Tensor:
    """(x - mean) / sqrt(var + epsilon) [* gamma] [+ beta]; ``stat(o)`` is (mean, var) at o."""

    def f(*o: PrimExpr) -> PrimExpr:
        mean, var = stat(o)
        out = (x[o] - mean) / sqrt(var + attrs.epsilon)
        if attrs.scale:
            out = out * gamma[o[axis]]
        if attrs.center:
            out = out + beta[o[axis]]
        return out

    return compute(x.shape, f, name)


def _batch_norm(attrs: Attrs, inputs: list[Tensor],
                out_type: TupleType) -> tuple[Tensor, Tensor, Tensor]:
    x, gamma, beta, moving_mean, moving_var = inputs
    axis = attrs.axis % x.ndim
    if not attrs.training:
        out = _normalize(x, lambda o: (moving_mean[o[axis]], moving_var[o[axis]]), gamma, beta,
                         axis, attrs, "T_batch_norm")
        return (out, compute(moving_mean.shape, lambda c: moving_mean[c], "T_batch_norm_mean"),
                compute(moving_var.shape, lambda c: moving_var[c], "T_batch_norm_var"))
    others = tuple(d for d in range(x.ndim) if d != axis)
    mean, var, _ = _moments(x, others, "batch_norm")
    out = _normalize(x, lambda o: (mean[o[axis]], var[o[axis]]), gamma, beta, axis, attrs,
                     "T_batch_norm")
    keep, new = 1 - attrs.momentum, attrs.momentum

    def update(moving: Tensor, batch: Tensor, name: str) -> Tensor:
        return compute(moving.shape, lambda c: keep * moving[c] + new * batch[c], name)

    return (out, update(moving_mean, mean, "T_batch_norm_moving_mean"),
            update(moving_var, var, "T_batch_norm_moving_var"))


def _layer_norm(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, gamma, beta = inputs
    axis = attrs.axis % x.ndim
    mean, var, rest = _moments(x, (axis,), "layer_norm")
    return _normalize(x, lambda o: (mean[rest(o)], var[rest(o)]), gamma, beta, axis, attrs,
                      "T_layer_norm")


RULES: dict[str, ComputeRule] = {"batch_norm": _batch_norm, "layer_norm": _layer_norm}
