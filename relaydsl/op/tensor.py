"""Elementwise and broadcasting ops: unary math, binary arithmetic, comparisons, logic.

Binary ops broadcast as NumPy does and require equal dtypes (there is no
implicit promotion; use ``cast``). Each op states which dtypes it accepts:
float-only math (exp, log, ...) rejects integer and bool tensors, arithmetic
rejects bool, logic requires bool. Integer ``divide`` is floor division
(Python ``//``); float ``divide`` is true division. NumPy references keep the
input dtype (float32 stays float32).
"""
from __future__ import annotations

from typing import Any as AnyValue, Callable

import jax
import jax.numpy as jnp
import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType, Type
from relaydsl.op._legacy import OpDef, register
from relaydsl.op.registry import Attr, OpPattern
from relaydsl.typing.relations import (
    BOOL, FLOAT, NUMERIC, DTypeClass, RelationContext, broadcast_shapes, require_dtype, same_dtype,
    tensor_arg,
)

Relation = Callable[[list[Type], Attrs, RelationContext], Type]


def elementwise_rel(op: str, accepts: DTypeClass | None, out_dtype: str | None = None) -> Relation:
    """The relation of an elementwise op: broadcast shapes, equal dtypes from `accepts`.

    The output has the common dtype, or `out_dtype` if given (comparisons give bool).
    """

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        ts = [tensor_arg(ctx, a, f"{op}: argument {i}") for i, a in enumerate(args)]
        dtype = same_dtype(ctx, ts, op)
        if accepts is not None:
            for t in ts:
                require_dtype(ctx, op, "the input" if len(ts) == 1 else "each input", t, accepts)
        return TensorType(broadcast_shapes(ctx, *(t.shape for t in ts)), out_dtype or dtype)

    return rel


def _unary(name: str, accepts: DTypeClass | None, numpy_ref, jax_lower, doc: str,
           differentiable: bool = True) -> None:
    register(OpDef(name, ("data",), elementwise_rel(name, accepts), OpPattern.ELEMWISE,
                   numpy_ref, jax_lower, doc=doc, differentiable=differentiable))


def _binary(name: str, accepts: DTypeClass | None, numpy_ref, jax_lower, doc: str,
            out_dtype: str | None = None, differentiable: bool = True) -> None:
    register(OpDef(name, ("lhs", "rhs"), elementwise_rel(name, accepts, out_dtype),
                   OpPattern.BROADCAST, numpy_ref, jax_lower, doc=doc,
                   differentiable=differentiable))


def _compare(name: str, numpy_ref, jax_lower, doc: str) -> None:
    _binary(name, None, numpy_ref, jax_lower, doc, out_dtype="bool", differentiable=False)


# ---- unary math ---------------------------------------------------------------

_unary("negative", NUMERIC, np.negative, jnp.negative, "-x")
_unary("exp", FLOAT, np.exp, jnp.exp, "e**x")
_unary("log", FLOAT, np.log, jnp.log, "natural logarithm of x")
_unary("sqrt", FLOAT, np.sqrt, jnp.sqrt, "square root of x")
_unary("rsqrt", FLOAT, lambda x: np.reciprocal(np.sqrt(x)), jax.lax.rsqrt, "1 / sqrt(x)")
_unary("tanh", FLOAT, np.tanh, jnp.tanh, "hyperbolic tangent of x")
_unary("sigmoid", FLOAT, lambda x: 0.5 * (np.tanh(0.5 * x) + 1), jax.nn.sigmoid,
       "1 / (1 + e**-x)")
_unary("relu", NUMERIC, lambda x: np.maximum(x, np.zeros((), x.dtype)),
       lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)), "max(x, 0)")
_unary("abs", NUMERIC, np.abs, jnp.abs, "|x|")
_unary("sign", NUMERIC, np.sign, jnp.sign, "-1, 0 or 1 by the sign of x", differentiable=False)
_unary("floor", FLOAT, np.floor, jnp.floor, "largest integer <= x", differentiable=False)
_unary("ceil", FLOAT, np.ceil, jnp.ceil, "smallest integer >= x", differentiable=False)
_unary("round", FLOAT, np.round, jnp.round, "nearest integer, ties to even",
       differentiable=False)


_clip_elementwise = elementwise_rel("clip", NUMERIC)


def _clip_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    if attrs.a_min > attrs.a_max:
        ctx.fail(f"clip: attribute 'a_min' = {attrs.a_min} is greater than 'a_max' = {attrs.a_max}")
    return _clip_elementwise(args, attrs, ctx)


def _clip_numpy(x: AnyValue, a_min: float, a_max: float) -> AnyValue:
    return np.clip(x, np.asarray(a_min, x.dtype), np.asarray(a_max, x.dtype))


def _clip_jax(x: AnyValue, a_min: float, a_max: float) -> AnyValue:
    return jnp.clip(x, jnp.asarray(a_min, x.dtype), jnp.asarray(a_max, x.dtype))


register(OpDef(
    "clip", ("data",), _clip_rel, OpPattern.ELEMWISE, _clip_numpy, _clip_jax,
    attrs=(Attr("a_min", "float", doc="lower bound, converted to the input dtype"),
           Attr("a_max", "float", doc="upper bound, converted to the input dtype")),
    doc="min(max(x, a_min), a_max); the bounds are converted to x's dtype",
))


def _cast_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "cast: the input")
    return TensorType(t.shape, attrs.dtype)


register(OpDef(
    "cast", ("data",), _cast_rel, OpPattern.ELEMWISE,
    lambda x, dtype: np.asarray(x).astype(dtype), lambda x, dtype: x.astype(dtype),
    attrs=(Attr("dtype", "dtype", doc="the result dtype"),),
    doc="x converted to `dtype` (float to int truncates toward zero)",
))


def _cast_like_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "cast_like: the input")
    like = tensor_arg(ctx, args[1], "cast_like: the dtype source")
    return TensorType(t.shape, like.dtype)


register(OpDef(
    "cast_like", ("data", "dtype_like"), _cast_like_rel, OpPattern.ELEMWISE,
    lambda x, like: np.asarray(x).astype(like.dtype), lambda x, like: x.astype(like.dtype),
    doc="x converted to the dtype of `dtype_like` (how Python literals take their operand's dtype)",
))

# ---- binary arithmetic -------------------------------------------------------


def _divide_numpy(x: AnyValue, y: AnyValue) -> AnyValue:
    return np.floor_divide(x, y) if np.issubdtype(x.dtype, np.integer) else np.true_divide(x, y)


def _divide_jax(x: AnyValue, y: AnyValue) -> AnyValue:
    return jnp.floor_divide(x, y) if jnp.issubdtype(x.dtype, jnp.integer) else jnp.true_divide(x, y)


_binary("add", NUMERIC, np.add, jnp.add, "x + y, broadcasting")
_binary("subtract", NUMERIC, np.subtract, jnp.subtract, "x - y, broadcasting")
_binary("multiply", NUMERIC, np.multiply, jnp.multiply, "x * y, broadcasting")
_binary("divide", NUMERIC, _divide_numpy, _divide_jax,
        "x / y for floats, x // y (floor division) for integers, broadcasting")
_binary("power", FLOAT, np.power, jnp.power, "x ** y, broadcasting")
_binary("maximum", NUMERIC, np.maximum, jnp.maximum, "elementwise max(x, y), broadcasting")
_binary("minimum", NUMERIC, np.minimum, jnp.minimum, "elementwise min(x, y), broadcasting")

# ---- comparisons (any dtype, bool result) --------------------------------------

_compare("equal", np.equal, jnp.equal, "x == y, broadcasting; bool result")
_compare("not_equal", np.not_equal, jnp.not_equal, "x != y, broadcasting; bool result")
_compare("less", np.less, jnp.less, "x < y, broadcasting; bool result")
_compare("less_equal", np.less_equal, jnp.less_equal, "x <= y, broadcasting; bool result")
_compare("greater", np.greater, jnp.greater, "x > y, broadcasting; bool result")
_compare("greater_equal", np.greater_equal, jnp.greater_equal,
         "x >= y, broadcasting; bool result")

# ---- logic (bool only) ---------------------------------------------------------

_binary("logical_and", BOOL, np.logical_and, jnp.logical_and, "x and y, broadcasting",
        differentiable=False)
_binary("logical_or", BOOL, np.logical_or, jnp.logical_or, "x or y, broadcasting",
        differentiable=False)
_unary("logical_not", BOOL, np.logical_not, jnp.logical_not, "not x", differentiable=False)

# ---- selection -------------------------------------------------------------------


def _where_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    cond, x, y = (tensor_arg(ctx, a, f"where: argument {n}")
                  for a, n in zip(args, ("condition", "x", "y")))
    require_dtype(ctx, "where", "the condition", cond, BOOL)
    dtype = same_dtype(ctx, [x, y], "where")
    return TensorType(broadcast_shapes(ctx, cond.shape, x.shape, y.shape), dtype)


register(OpDef(
    "where", ("condition", "x", "y"), _where_rel, OpPattern.BROADCAST, np.where, jnp.where,
    doc="x where condition else y, all three broadcasting",
))
