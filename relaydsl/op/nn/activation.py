"""Activations: leaky_relu, prelu; normalised exponentials along an axis: softmax, log_softmax.

``leaky_relu`` and ``prelu`` keep a positive x and scale a negative one by alpha (an attribute,
or a learned 1-D tensor along ``axis``); their gradients take the x >= 0 branch at 0, as
``jax.nn.leaky_relu`` does. softmax and log_softmax subtract the maximum along the axis
before exponentiating (so large inputs do not overflow), in the references and the compute
rules alike: the maximum, the shifted exponentials and their sum.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.common import (
    Array, ArrayModule, Inputs, along, axis_attr, per_channel_inputs,
)
from relaydsl.op.registry import Attr, OpDef, OpPattern, Relation, Traits, ops, register
from relaydsl.te import tensor as T
from relaydsl.te.expr import PrimExpr, const, exp, log, select
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import RelationContext

_AXIS = axis_attr(-1, "the normalised axis")

# ---- leaky_relu ---------------------------------------------------------------------------------


def _leaky_relu_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "leaky_relu", args, ("data",))
    return c.tensor(c.shape(0))


def _leaky_relu(xp: ArrayModule, data: Array, alpha: float) -> Array:
    return xp.where(data > 0, data, data * xp.asarray(alpha, data.dtype))


def _leaky_relu_np(data: Array, *, alpha: float) -> Array:
    return _leaky_relu(np, data, alpha)


def _leaky_relu_jax(data: Array, *, alpha: float) -> Array:
    return _leaky_relu(jnp, data, alpha)


def _leaky_relu_grad(call: Call, g: Expr) -> list[Expr]:
    """d leaky_relu(x) = g where x >= 0, else alpha * g."""
    x = call.args[0]
    negative = gu.mul(g, gu.scalar(call.attrs.alpha, x))
    return [gu.where(ops.greater_equal(x, gu.scalar(0, x)), g, negative)]


def _leaky_relu_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    alpha = const(attrs.alpha, x.dtype)
    return compute(x.shape, lambda *o: select(x[o] > 0, x[o], x[o] * alpha), "T_leaky_relu")


leaky_relu = register(OpDef(
    "leaky_relu", ("data",), _leaky_relu_rel, OpPattern.ELEMWISE,
    numpy_ref=_leaky_relu_np, jax_lower=_leaky_relu_jax, compute=_leaky_relu_compute,
    gradient=_leaky_relu_grad,
    attrs=(Attr("alpha", "float", 0.25, doc="the slope for x < 0"),),
    doc="x where x > 0, else alpha * x",
))

# ---- prelu --------------------------------------------------------------------------------------


def _prelu_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c, data, _ = per_channel_inputs("prelu", ("alpha",), args, attrs, ctx)
    return c.tensor(data)


def _prelu(xp: ArrayModule, data: Array, alpha: Array, axis: int) -> Array:
    return xp.where(data > 0, data, data * along(xp, alpha, axis, data.ndim))


def _prelu_np(data: Array, alpha: Array, *, axis: int) -> Array:
    return _prelu(np, data, alpha, axis)


def _prelu_jax(data: Array, alpha: Array, *, axis: int) -> Array:
    return _prelu(jnp, data, alpha, axis)


def _prelu_grad(call: Call, g: Expr) -> list[Expr]:
    """d prelu(x, a) = (g where x >= 0 else a * g, sum of x * g where x < 0 over all but axis)."""
    (x, alpha), axis = call.args, call.attrs.axis
    ndim = gu.tensor_type(x).ndim
    zero = gu.scalar(0, x)
    positive = ops.greater_equal(x, zero)
    dx = gu.where(positive, g, gu.mul(g, gu.along(alpha, axis, ndim)))
    dalpha = gu.sum_(gu.where(positive, zero, gu.mul(g, x)), gu.other_axes(axis, ndim))
    return [dx, dalpha]


def _prelu_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, alpha = inputs
    axis = attrs.axis % x.ndim
    return compute(x.shape, lambda *o: select(x[o] > 0, x[o], x[o] * alpha[o[axis]]),
                   "T_prelu")


prelu = register(OpDef(
    "prelu", ("data", "alpha"), _prelu_rel, OpPattern.BROADCAST,
    numpy_ref=_prelu_np, jax_lower=_prelu_jax, compute=_prelu_compute, gradient=_prelu_grad,
    attrs=(axis_attr(1, "the channel axis alpha runs along"),),
    doc="x where x > 0, else alpha * x, the 1-D alpha (one slope per channel) along axis",
    traits=Traits(infers_inputs=(1,)),
))


def _softmax_rel(op: str) -> Relation:
    """softmax, log_softmax: the input type, rank >= 1, `axis` in range."""

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = Inputs(ctx, op, args, ("data",))
        shape = c.shape(0, min_rank=1)
        c.axis(attrs.axis)
        return c.tensor(shape)

    return rel


def _softmax_parts(x: Tensor, axis: int) -> tuple[
        Tensor, Tensor, Callable[[tuple[PrimExpr, ...]], tuple[PrimExpr, ...]]]:
    """(max, sum of exp(x - max)) along ``axis``, and the map from x's index to theirs."""
    axis %= x.ndim
    rest = x.shape[:axis] + x.shape[axis + 1:]

    def along(p: tuple[PrimExpr, ...], r: PrimExpr) -> tuple[PrimExpr, ...]:
        return (*p[:axis], r, *p[axis:])

    def top(*p: PrimExpr) -> PrimExpr:
        r = reduce_axis(x.shape[axis], "k")
        return T.max(x[along(p, r)], r)

    biggest = compute(rest, top, "T_softmax_max")

    def total(*p: PrimExpr) -> PrimExpr:
        r = reduce_axis(x.shape[axis], "k")
        return T.sum(exp(x[along(p, r)] - biggest[p]), r)

    return biggest, compute(rest, total, "T_softmax_sum"), lambda o: o[:axis] + o[axis + 1:]


# ---- softmax ------------------------------------------------------------------------------------


def _softmax(xp: ArrayModule, data: Array, axis: int) -> Array:
    e = xp.exp(data - xp.max(data, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _softmax_np(data: Array, *, axis: int) -> Array:
    return _softmax(np, data, axis)


def _softmax_jax(data: Array, *, axis: int) -> Array:
    return _softmax(jnp, data, axis)


def _softmax_grad(call: Call, g: Expr) -> list[Expr]:
    """d softmax(x) = y * (g - sum(g * y)), y = softmax(x), summing along the axis."""
    y, axis = call, call.attrs.axis
    return [gu.mul(y, gu.sub(g, gu.sum_(gu.mul(g, y), axis, keepdims=True)))]


def _softmax_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    biggest, total, drop = _softmax_parts(x, attrs.axis)
    return compute(x.shape, lambda *o: exp(x[o] - biggest[drop(o)]) / total[drop(o)],
                   "T_softmax")


softmax = register(OpDef(
    "softmax", ("data",), _softmax_rel("softmax"), OpPattern.OPAQUE,
    numpy_ref=_softmax_np, jax_lower=_softmax_jax, compute=_softmax_compute,
    gradient=_softmax_grad, attrs=(_AXIS,),
    doc="exp(x - max) / sum(exp(x - max)) along axis",
))

# ---- log_softmax --------------------------------------------------------------------------------


def log_softmax_xp(xp: ArrayModule, data: Array, axis: int) -> Array:
    """log_softmax over the array namespace xp (numpy or jax.numpy)."""
    shifted = data - xp.max(data, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def _log_softmax_np(data: Array, *, axis: int) -> Array:
    return log_softmax_xp(np, data, axis)


def _log_softmax_jax(data: Array, *, axis: int) -> Array:
    return log_softmax_xp(jnp, data, axis)


def _log_softmax_grad(call: Call, g: Expr) -> list[Expr]:
    """d log_softmax(x) = g - softmax(x) * sum(g), summing along the axis."""
    x, axis = call.args[0], call.attrs.axis
    return [gu.sub(g, gu.mul(softmax(x, axis=axis), gu.sum_(g, axis, keepdims=True)))]


def log_softmax_te(x: Tensor, axis: int) -> Tensor:
    """log_softmax of x along axis, in te."""
    biggest, total, drop = _softmax_parts(x, axis)
    return compute(x.shape, lambda *o: (x[o] - biggest[drop(o)]) - log(total[drop(o)]),
                   "T_log_softmax")


def _log_softmax_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    return log_softmax_te(inputs[0], attrs.axis)


log_softmax = register(OpDef(
    "log_softmax", ("data",), _softmax_rel("log_softmax"), OpPattern.OPAQUE,
    numpy_ref=_log_softmax_np, jax_lower=_log_softmax_jax, compute=_log_softmax_compute,
    gradient=_log_softmax_grad, attrs=(_AXIS,),
    doc="x - max - log(sum(exp(x - max))) along axis",
))
