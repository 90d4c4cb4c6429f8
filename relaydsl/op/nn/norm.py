"""Normalisation: batch_norm, layer_norm.

Both are ``(x - mean) / sqrt(var + epsilon)``, times gamma if ``scale``, plus beta if
``center``, gamma and beta running along ``axis``. layer_norm takes the statistics over
``axis``; batch_norm over every other axis in training, and otherwise reads the moving
statistics. batch_norm returns ``(out, mean, var)`` (``Traits.result_arity`` 3): in inference
the moving statistics unchanged, in training the updated moving statistics
``(1 - momentum) * moving + momentum * batch``, PyTorch's convention: the output is normalised
with the biased batch variance, the moving variance blends in the unbiased one
(``var * n / (n - 1)``, n the number of values per channel; for n = 1 the biased one, 0).

The compute rules write the statistics as the references compute them: the mean (NumPy's: a
sum divided by the count, float16 summed in float32), then the variance as the mean of the
squared deviations from it.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, TupleGetItem
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.common import Array, ArrayModule, along, axis_attr, in_range, per_channel_inputs
from relaydsl.op.registry import Attr, OpDef, OpPattern, Traits, ops, register
from relaydsl.te import tensor as T
from relaydsl.te.expr import PrimExpr, cast, sqrt
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import RelationContext

Index = tuple[PrimExpr, ...]

_EPSILON = Attr("epsilon", "float", 1e-5, in_range(0.0, math.inf), "added to the variance")
_CENTER = Attr("center", "bool", True, doc="add beta")
_SCALE = Attr("scale", "bool", True, doc="multiply by gamma")


def _normalize(xp: ArrayModule, data: Array, mean: Array, var: Array, gamma: Array, beta: Array,
               axis: int, epsilon: float, center: bool, scale: bool) -> Array:
    """(data - mean) / sqrt(var + epsilon), times gamma if scale, plus beta if center."""
    out = (data - mean) / xp.sqrt(var + epsilon)
    if scale:
        out = out * along(xp, gamma, axis, data.ndim)
    if center:
        out = out + along(xp, beta, axis, data.ndim)
    return out


def _standardized_grad(dy: Expr, xhat: Expr, rstd: Expr, axes: tuple[int, ...]) -> Expr:
    """d of xhat = (x - mean(x)) * rstd: rstd * (dy - mean(dy) - xhat * mean(dy * xhat))."""
    centred = gu.sub(dy, gu.mean_(dy, axes))
    return gu.mul(rstd, gu.sub(centred, gu.mul(xhat, gu.mean_(gu.mul(dy, xhat), axes))))


def _affine_grads(call: Call, g: Expr, xhat: Expr, others: tuple[int, ...]) -> list[Expr]:
    """The adjoints of gamma and beta in xhat * gamma + beta (zero if scale/center is off)."""
    _, gamma, beta = call.args[:3]
    d_gamma = gu.sum_(gu.mul(g, xhat), others) if call.attrs.scale else gu.zeros_for(gamma)
    d_beta = gu.sum_(g, others) if call.attrs.center else gu.zeros_for(beta)
    return [d_gamma, d_beta]


def _moments(x: Tensor, axes: tuple[int, ...],
             name: str) -> tuple[Tensor, Tensor, Callable[[Index], Index]]:
    """(mean, variance) of x over ``axes`` in te, shaped as x's other axes, and the map from
    an index of x to theirs."""
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


def _copy(t: Tensor, name: str) -> Tensor:
    """A 1-D tensor's copy (an inference batch_norm's statistics pass through)."""

    def at(c: PrimExpr) -> PrimExpr:
        return t[c]

    return compute(t.shape, at, name)


def _normalize_te(x: Tensor, stat: Callable[[Index], tuple[PrimExpr, PrimExpr]], gamma: Tensor,
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


# ---- batch_norm ---------------------------------------------------------------------------------

_BATCH_NORM_PARAMS = ("gamma", "beta", "moving_mean", "moving_var")


def _batch_norm_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c, data, axis = per_channel_inputs("batch_norm", _BATCH_NORM_PARAMS, args, attrs, ctx)
    stats = c.tensor((data[axis],))
    return TupleType((c.tensor(data), stats, stats))


def _unbiased(n: int) -> float:
    """The factor turning a biased variance of n values into the unbiased one (1 for n <= 1)."""
    return n / max(n - 1, 1)


def _batch_norm(xp: ArrayModule, data: Array, gamma: Array, beta: Array, moving_mean: Array,
                moving_var: Array, *, axis: int, epsilon: float, center: bool, scale: bool,
                training: bool, momentum: float) -> tuple[Array, Array, Array]:
    if training:
        others = tuple(i for i in range(data.ndim) if i != axis % data.ndim)
        mean, var = xp.mean(data, axis=others), xp.var(data, axis=others)
        moving_mean = (1 - momentum) * moving_mean + momentum * mean
        moving_var = (1 - momentum) * moving_var + momentum * (var * _unbiased(
            math.prod(data.shape[i] for i in others)))
    else:
        mean, var = moving_mean, moving_var
    out = _normalize(xp, data, along(xp, mean, axis, data.ndim), along(xp, var, axis, data.ndim),
                     gamma, beta, axis, epsilon, center, scale)
    return out, moving_mean, moving_var


def _batch_norm_np(*args: Array, **attrs: float) -> tuple[Array, Array, Array]:
    return _batch_norm(np, *args, **attrs)


def _batch_norm_jax(*args: Array, **attrs: float) -> tuple[Array, Array, Array]:
    return _batch_norm(jnp, *args, **attrs)


def _batch_norm_grad(call: Call, g: Expr) -> list[Expr]:
    """d batch_norm: g.0 through (x - mean) * rstd * gamma + beta; g.1, g.2 via the statistics."""
    x, gamma, _, moving_mean, moving_var = call.args
    a = call.attrs
    ndim = gu.tensor_type(x).ndim
    axis, others = a.axis % ndim, gu.other_axes(a.axis, ndim)
    g_out, g_mean, g_var = (TupleGetItem(g, i) for i in range(3))

    def spread(v: Expr) -> Expr:
        return gu.along(v, axis, ndim)

    mean = ops.mean(x, axis=others) if a.training else moving_mean
    centred = gu.sub(x, spread(mean))
    var = ops.mean(gu.mul(centred, centred), axis=others) if a.training else moving_var
    rstd = spread(ops.rsqrt(gu.add(var, gu.scalar(a.epsilon, x))))
    xhat = gu.mul(centred, rstd)
    dy = gu.mul(g_out, spread(gamma)) if a.scale else g_out
    if a.training:  # the batch statistics depend on x; the moving ones blend them in
        m, n = gu.scalar(a.momentum, x), gu.count(x, others)
        one = gu.scalar(1, x)
        unbiased = gu.div(n, ops.maximum(gu.sub(n, one), one))  # the moving var's n / (n - 1)
        two_c = gu.mul(gu.scalar(2, x), unbiased)
        via_stats = gu.add(spread(g_mean), gu.mul(gu.mul(spread(g_var), two_c), centred))
        dx = gu.add(_standardized_grad(dy, xhat, rstd, others), gu.div(gu.mul(m, via_stats), n))
        keep = gu.scalar(1 - a.momentum, x)
        d_moving = [gu.mul(keep, g_mean), gu.mul(keep, g_var)]
    else:
        dx = gu.mul(dy, rstd)
        d_mean = gu.sub(g_mean, gu.sum_(gu.mul(dy, rstd), others))
        rstd3 = gu.mul(gu.mul(rstd, rstd), rstd)
        d_var = gu.sub(g_var, gu.sum_(gu.mul(gu.mul(dy, centred),
                                             gu.mul(rstd3, gu.scalar(0.5, x))), others))
        d_moving = [d_mean, d_var]
    return [dx, *_affine_grads(call, g_out, xhat, others), *d_moving]


def _batch_norm_compute(attrs: Attrs, inputs: list[Tensor],
                        out_type: TupleType) -> tuple[Tensor, Tensor, Tensor]:
    x, gamma, beta, moving_mean, moving_var = inputs
    axis = attrs.axis % x.ndim
    if not attrs.training:
        out = _normalize_te(x, lambda o: (moving_mean[o[axis]], moving_var[o[axis]]), gamma,
                            beta, axis, attrs, "T_batch_norm")
        return (out, _copy(moving_mean, "T_batch_norm_mean"), _copy(moving_var, "T_batch_norm_var"))
    others = tuple(d for d in range(x.ndim) if d != axis)
    mean, var, _ = _moments(x, others, "batch_norm")
    out = _normalize_te(x, lambda o: (mean[o[axis]], var[o[axis]]), gamma, beta, axis, attrs,
                        "T_batch_norm")
    keep, new = 1 - attrs.momentum, attrs.momentum
    unbiased = _unbiased(math.prod(x.shape[d] for d in others))

    def update(moving: Tensor, batch: Tensor, factor: float, name: str) -> Tensor:
        def at(c: PrimExpr) -> PrimExpr:
            return keep * moving[c] + new * factor * batch[c]

        return compute(moving.shape, at, name)

    return (out, update(moving_mean, mean, 1.0, "T_batch_norm_moving_mean"),
            update(moving_var, var, unbiased, "T_batch_norm_moving_var"))


batch_norm = register(OpDef(
    "batch_norm", ("data", *_BATCH_NORM_PARAMS), _batch_norm_rel, OpPattern.OPAQUE,
    numpy_ref=_batch_norm_np, jax_lower=_batch_norm_jax, compute=_batch_norm_compute,
    gradient=_batch_norm_grad,
    attrs=(axis_attr(1, "the channel axis"), _EPSILON, _CENTER, _SCALE,
           Attr("training", "bool", False, doc="use and fold in the batch statistics"),
           Attr("momentum", "float", 0.1, in_range(0.0, 1.0), "weight of the batch statistics")),
    doc="(out, mean, var): normalise per channel `axis` with the moving (inference) or batch "
        "(training) statistics; training also updates the moving statistics",
    traits=Traits(result_arity=lambda attrs: 3, infers_inputs=(1, 2, 3, 4)),
))

# ---- layer_norm ---------------------------------------------------------------------------------


def _layer_norm_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c, data, _ = per_channel_inputs("layer_norm", ("gamma", "beta"), args, attrs, ctx)
    return c.tensor(data)


def _layer_norm(xp: ArrayModule, data: Array, gamma: Array, beta: Array, *, axis: int,
                epsilon: float, center: bool, scale: bool) -> Array:
    mean = xp.mean(data, axis=axis, keepdims=True)
    var = xp.var(data, axis=axis, keepdims=True)
    return _normalize(xp, data, mean, var, gamma, beta, axis, epsilon, center, scale)


def _layer_norm_np(*args: Array, **attrs: float) -> Array:
    return _layer_norm(np, *args, **attrs)


def _layer_norm_jax(*args: Array, **attrs: float) -> Array:
    return _layer_norm(jnp, *args, **attrs)


def _layer_norm_grad(call: Call, g: Expr) -> list[Expr]:
    """d layer_norm(x) = rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), dy = g * gamma."""
    x, gamma, _ = call.args
    a = call.attrs
    ndim = gu.tensor_type(x).ndim
    axis = (a.axis % ndim,)
    centred = gu.sub(x, gu.mean_(x, axis))
    rstd = ops.rsqrt(gu.add(gu.mean_(gu.mul(centred, centred), axis), gu.scalar(a.epsilon, x)))
    xhat = gu.mul(centred, rstd)
    dy = gu.mul(g, gu.along(gamma, a.axis, ndim)) if a.scale else g
    dx = _standardized_grad(dy, xhat, rstd, axis)
    return [dx, *_affine_grads(call, g, xhat, gu.other_axes(a.axis, ndim))]


def _layer_norm_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, gamma, beta = inputs
    axis = attrs.axis % x.ndim
    mean, var, rest = _moments(x, (axis,), "layer_norm")
    return _normalize_te(x, lambda o: (mean[rest(o)], var[rest(o)]), gamma, beta, axis, attrs,
                         "T_layer_norm")


layer_norm = register(OpDef(
    "layer_norm", ("data", "gamma", "beta"), _layer_norm_rel, OpPattern.OPAQUE,
    numpy_ref=_layer_norm_np, jax_lower=_layer_norm_jax, compute=_layer_norm_compute,
    gradient=_layer_norm_grad,
    attrs=(axis_attr(-1, "the normalised axis"), _EPSILON, _CENTER, _SCALE),
    doc="(x - mean) / sqrt(var + epsilon) * gamma + beta over `axis`",
    traits=Traits(infers_inputs=(1, 2)),
))
