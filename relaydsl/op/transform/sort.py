"""Ops that order a tensor along an axis: topk.

The order is a strict total one, so every result is determined: larger values first (smaller
with ``is_ascend``), equal values by their index (the lower first, as a stable sort and
``jax.lax.top_k`` take them), NaN above every number (as NumPy's sort places it).

Its compute rule selects without sorting: the rank of each element (how many elements come
before it, one reduction), then for each output position the index whose rank it is (a
second): O(n**2) per row, which suits the short rows topk meets (classes, anchors).
"""
from __future__ import annotations

from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, TupleGetItem, const as ir_const
from relaydsl.ir.types import TensorType, TupleType, Type, type_to_str
from relaydsl.op.grad_util import static_dims, sum_, tensor_type, zeros_for
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.registry import (
    Array, ArrayModule, Attr, OpDef, OpPattern, Traits, ops, register,
)
from relaydsl.te import tensor as T
from relaydsl.te.expr import FLOAT_DTYPES, PrimExpr, cast, const, equal, not_equal, select
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import (
    NUMERIC, RelationContext, attr_axis, require_dtype, shape_of, tensor_arg,
)

_RET_TYPES = ("both", "values", "indices")


def _kept(k: int, n: int) -> int:
    """How many elements topk keeps of n: k, or all of them for k < 1 (TVM's convention)."""
    return n if k < 1 else k


def _topk_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "topk: the input")
    require_dtype(ctx, "topk", "the input", t, NUMERIC)
    axis = attr_axis(ctx, "topk", "axis", attrs.axis, t)
    shape = list(shape_of(ctx, t))
    n = shape[axis]
    if isinstance(n, int) and attrs.k > n:
        ctx.fail(f"topk: attribute 'k' = {attrs.k} is more than axis {axis} of the input "
                 f"{type_to_str(t)} holds")
    if attrs.k >= 1:
        shape[axis] = attrs.k
    values, indices = TensorType(tuple(shape), t.dtype), TensorType(tuple(shape), attrs.dtype)
    return {"both": TupleType((values, indices)), "values": values,
            "indices": indices}[attrs.ret_type]


def _order(x: AnyValue, axis: int, is_ascend: bool, argsort: AnyValue, xp: AnyValue) -> AnyValue:
    """The indices of x along `axis` in topk's order, by a stable ascending argsort."""
    if is_ascend:
        return argsort(x, axis)
    n = x.shape[axis]  # descending, equal values by index: sort the reversed row ascending
    return (n - 1) - xp.flip(argsort(xp.flip(x, axis), axis), axis)


def _topk_reference(xp: ArrayModule, argsort: Callable[[Array, int], Array]
                    ) -> Callable[[Array, int, int, str, bool, str], Array]:
    """The NumPy reference (xp = numpy) or the JAX lowering (xp = jax.numpy)."""

    def ref(x: Array, k: int, axis: int, ret_type: str, is_ascend: bool, dtype: str) -> Array:
        axis %= x.ndim
        order = _order(x, axis, is_ascend, argsort, xp)
        top = xp.take(order, xp.arange(_kept(k, x.shape[axis])), axis=axis)
        values, indices = xp.take_along_axis(x, top, axis=axis), top.astype(dtype)
        return {"both": (values, indices), "values": values, "indices": indices}[ret_type]

    return ref


def _topk_gradient(call: Call, g: Expr) -> list[Expr]:
    """d topk(x) = g_values scattered back to the positions they came from, 0 elsewhere."""
    x, a = call.args[0], call.attrs
    if a.ret_type == "indices":
        return [zeros_for(x)]
    g_values = TupleGetItem(g, 0) if a.ret_type == "both" else g
    axis: int = a.axis % tensor_type(x).ndim
    n = static_dims(x, "topk")[axis]
    indices = topk(x, a.k, a.axis, "indices", a.is_ascend, "int32")
    dtype = tensor_type(x).concrete_dtype()
    # hit[..., p, j, ...] = 1 where output position p came from x's position j (axis + 1)
    hit = ops.one_hot(indices, ir_const(1, dtype), ir_const(0, dtype), n, axis + 1, dtype)
    return [sum_(ops.multiply(hit, ops.expand_dims(g_values, axis + 1)), axis)]


def _comes_before(a: PrimExpr, b: PrimExpr, ia: PrimExpr, ib: PrimExpr,
                  ascend: bool) -> PrimExpr:
    """Whether a (at index ia) comes before b (at index ib) in topk's order."""
    first, second = (b, a) if ascend else (a, b)
    before = first > second
    same = equal(a, b)
    if a.dtype in FLOAT_DTYPES:  # NaN above every number, NaNs equal to each other
        nan_a, nan_b = not_equal(a, a), not_equal(b, b)
        nan_first, nan_second = (nan_b, nan_a) if ascend else (nan_a, nan_b)
        before = before | (nan_first & ~nan_second)
        same = same | (nan_a & nan_b)
    return before | (same & (ia < ib))


def _topk_compute(attrs: Attrs, inputs: list[Tensor],
                  out_type: Type) -> Tensor | tuple[Tensor, Tensor]:
    """rank[j] = #{i before j}; position[p] = the j of rank p; values[p] = x[position[p]]."""
    (x,) = inputs
    axis: int = attrs.axis % x.ndim
    n = x.shape[axis]
    shape = (*x.shape[:axis], _kept(attrs.k, n), *x.shape[axis + 1:])

    def at(o: tuple[PrimExpr, ...], i: PrimExpr) -> tuple[PrimExpr, ...]:
        return (*o[:axis], i, *o[axis + 1:])

    if n == 0:  # nothing to order: the results are empty
        position = compute(shape, lambda *o: const(0), "T_topk_position")
    else:
        def rank(*o: PrimExpr) -> PrimExpr:
            r = reduce_axis(n, "r")
            earlier = _comes_before(x[at(o, r)], x[o], r, o[axis], attrs.is_ascend)
            return T.sum(select(earlier, const(1), const(0)), [r])

        ranks = compute(x.shape, rank, "T_topk_rank")

        def position_of(*o: PrimExpr) -> PrimExpr:
            j = reduce_axis(n, "j")
            return T.sum(select(equal(ranks[at(o, j)], o[axis]), j, const(0)), [j])

        position = compute(shape, position_of, "T_topk_position")
    values = compute(shape, lambda *o: x[at(o, position[o])], "T_topk_values")
    indices = compute(shape, lambda *o: cast(attrs.dtype, position[o]), "T_topk_indices")
    return {"both": (values, indices), "values": values, "indices": indices}[attrs.ret_type]


topk = register(OpDef(
    "topk", ("data",), _topk_rel, OpPattern.OPAQUE,
    numpy_ref=_topk_reference(np, lambda x, axis: np.argsort(x, axis=axis, kind="stable")),
    jax_lower=_topk_reference(jnp, lambda v, axis: jnp.argsort(v, axis=axis, stable=True)),
    compute=_topk_compute, gradient=_topk_gradient,
    attrs=(Attr("k", "int", 1, doc="how many to keep; k < 1 keeps the whole axis"),
           Attr("axis", "int", -1, doc="the axis to order"),
           Attr("ret_type", "str", "both",
                lambda r: None if r in _RET_TYPES else f"must be one of {', '.join(_RET_TYPES)}",
                doc="'both': (values, indices); 'values' or 'indices' alone"),
           Attr("is_ascend", "bool", False, doc="the k smallest (ascending), not the largest"),
           Attr("dtype", "dtype", "int32", check=lambda d: None if d in (
               "int32", "int64") else "must be int32 or int64", doc="the indices' dtype")),
    doc="the k largest (or smallest) elements of x along `axis`, in order, and their indices, "
        "as TVM's topk; equal values by index, NaN above every number",
    traits=Traits(result_arity=lambda a: 2 if a.get("ret_type", "both") == "both" else 0),
))
