"""Reductions: sum, mean, max, min, prod over a set of axes; argmax, argmin along one axis;
collapse_sum_like, which sums a tensor down to a shape that broadcasts to it.

``axis=None`` reduces every axis (argmax/argmin: the flattened tensor);
negative axes count from the end; ``keepdims`` keeps reduced axes with size 1.
A reduction keeps its input dtype (an int32 sum is int32, accumulating in
int32); ``mean`` accepts only floating-point tensors; argmax/argmin give int32.
"""
from __future__ import annotations

from typing import Any as AnyValue

import jax.numpy as jnp
import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import Dim, TensorType, Type, type_to_str
from relaydsl.op._legacy import OpDef, register
from relaydsl.op.registry import Attr, OpPattern
from relaydsl.typing.relations import (
    ANY_DTYPE, FLOAT, NUMERIC, DTypeClass, RelationContext, attr_axes, attr_axis, require_dtype, shape_of,
    tensor_arg,
)

_KEEPDIMS = Attr("keepdims", "bool", False, doc="keep reduced axes with size 1")


def _reduced(shape: tuple[Dim, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[Dim, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _reduce_rel(op: str, accepts: DTypeClass):
    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        t = tensor_arg(ctx, args[0], f"{op}: the input")
        require_dtype(ctx, op, "the input", t, accepts)
        axes = attr_axes(ctx, op, "axis", attrs.axis, t)
        return TensorType(_reduced(shape_of(ctx, t), axes, attrs.keepdims), t.dtype)

    return rel


def _reduce(name: str, accepts: DTypeClass, numpy_ref, jax_lower, doc: str) -> None:
    register(OpDef(
        name, ("data",), _reduce_rel(name, accepts), OpPattern.COMM_REDUCE, numpy_ref, jax_lower,
        attrs=(Attr("axis", "optional_ints", None, doc="axes to reduce; None reduces all"),
               _KEEPDIMS),
        doc=doc,
    ))


def _with_dtype(reduction):
    """A NumPy/JAX reduction that accumulates in, and returns, the input dtype."""
    return lambda x, axis, keepdims: reduction(x, axis=axis, keepdims=keepdims, dtype=x.dtype)


def _same(reduction):
    return lambda x, axis, keepdims: reduction(x, axis=axis, keepdims=keepdims)


_reduce("sum", NUMERIC, _with_dtype(np.sum), _with_dtype(jnp.sum), "sum over the axes")
_reduce("mean", FLOAT, _same(np.mean), _same(jnp.mean), "mean over the axes")
# On bool tensors max is "any" and min is "all" (Figure 2 of the Relay paper uses min so).
_reduce("max", ANY_DTYPE, _same(np.max), _same(jnp.max), "maximum over the axes")
_reduce("min", ANY_DTYPE, _same(np.min), _same(jnp.min), "minimum over the axes")
_reduce("prod", NUMERIC, _with_dtype(np.prod), _with_dtype(jnp.prod), "product over the axes")


def _arg_rel(op: str):
    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        t = tensor_arg(ctx, args[0], f"{op}: the input")
        shape = shape_of(ctx, t)
        if attrs.axis is None:
            return TensorType((1,) * len(shape) if attrs.keepdims else (), "int32")
        axis = attr_axis(ctx, op, "axis", attrs.axis, t)
        return TensorType(_reduced(shape, (axis,), attrs.keepdims), "int32")

    return rel


def _arg_numpy(reduction):
    def ref(x: AnyValue, axis: int | None, keepdims: bool) -> AnyValue:
        return np.asarray(reduction(x, axis=axis, keepdims=keepdims)).astype(np.int32)

    return ref


def _arg_jax(reduction):
    return lambda x, axis, keepdims: reduction(x, axis=axis, keepdims=keepdims).astype(jnp.int32)


def _arg_reduce(name: str, numpy_ref, jax_lower, doc: str) -> None:
    register(OpDef(
        name, ("data",), _arg_rel(name), OpPattern.COMM_REDUCE, numpy_ref, jax_lower,
        attrs=(Attr("axis", "optional_int", None,
                    doc="the axis; None searches the flattened input"),
               _KEEPDIMS),
        doc=doc, differentiable=False,
    ))


_arg_reduce("argmax", _arg_numpy(np.argmax), _arg_jax(jnp.argmax),
            "int32 index of the first maximum along the axis")
_arg_reduce("argmin", _arg_numpy(np.argmin), _arg_jax(jnp.argmin),
            "int32 index of the first minimum along the axis")


# ---- collapse_sum_like: the adjoint of broadcasting ------------------------------


def _collapse_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    data = tensor_arg(ctx, args[0], "collapse_sum_like: the data")
    like = tensor_arg(ctx, args[1], "collapse_sum_like: the shape source")
    require_dtype(ctx, "collapse_sum_like", "the data", data, NUMERIC)
    shape, target = shape_of(ctx, data), shape_of(ctx, like)
    fits = len(target) <= len(shape) and all(
        not (isinstance(t, int) and isinstance(d, int)) or t in (1, d)
        for t, d in zip(target[::-1], shape[::-1])
    )
    if not fits:
        ctx.fail(f"collapse_sum_like: {type_to_str(like)} does not broadcast to the data "
                 f"{type_to_str(data)}, so the data cannot be summed down to it")
    return TensorType(target, data.dtype)


def _collapsed_axes(shape: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...]:
    """The axes of `shape` that broadcasting `target` to it added or expanded from 1."""
    lead = len(shape) - len(target)
    return tuple(range(lead)) + tuple(
        lead + i for i, t in enumerate(target) if t == 1 and shape[lead + i] != 1)


def _collapse_sum_like(xp):
    def ref(data: AnyValue, like: AnyValue) -> AnyValue:
        axes = _collapsed_axes(data.shape, like.shape)
        out = xp.sum(data, axis=axes, keepdims=True, dtype=data.dtype)
        return xp.reshape(out, like.shape)

    return ref


register(OpDef(
    "collapse_sum_like", ("data", "like"), _collapse_rel, OpPattern.COMM_REDUCE,
    _collapse_sum_like(np), _collapse_sum_like(jnp),
    doc="data summed over the axes that broadcasting `like` to data's shape adds or expands, "
        "so the result has like's shape (and data's dtype): the adjoint of broadcasting",
))
