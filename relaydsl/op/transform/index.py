"""Ops that read part of a tensor: take, strided_slice and gather_nd, and the adjoints take_grad
and strided_slice_grad, which gradient rules build (gather_nd's is a take_grad of the data
flattened on its indexed axes).

take clamps or wraps its indices as ``mode`` says; strided_slice has Python's slice
semantics. The adjoints scatter: strided_slice_grad reads out_grad where the output index is
on the slice's grid (0 elsewhere), and take_grad sums out_grad over the index positions that
take to it, in order (repeated indices accumulate, as numpy.add.at does).
"""
from __future__ import annotations

import math
from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, const as ir_const
from relaydsl.ir.types import TensorType, Type, type_to_str
from relaydsl.op.grad_util import static_dims, tensor_type, zeros_for
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.registry import Array, ArrayModule, Attr, OpDef, OpPattern, ops, register
from relaydsl.op.transform.common import along, as_tuple
from relaydsl.op.transform.shape import reshape, reshape_like
from relaydsl.te import tensor as T
from relaydsl.te.expr import PrimExpr, cast, const, equal, maximum, minimum, select
from relaydsl.te.indexing import ravel, unravel
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import (
    INTEGER, RelationContext, attr_axes, attr_axis, require_dtype, shape_of, slice_dim,
    tensor_arg,
)

# ---- take ----------------------------------------------------------------------------------


def _take_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    data = tensor_arg(ctx, args[0], "take: the data")
    indices = tensor_arg(ctx, args[1], "take: the indices")
    require_dtype(ctx, "take", "the indices", indices, INTEGER)
    if attrs.axis is None:
        return TensorType(shape_of(ctx, indices), data.dtype)
    axis = attr_axis(ctx, "take", "axis", attrs.axis, data)
    shape = shape_of(ctx, data)
    return TensorType(shape[:axis] + shape_of(ctx, indices) + shape[axis + 1:], data.dtype)


def _take_gradient(call: Call, g: Expr) -> list[Expr]:
    """d take(x, i) = (take_grad(g, i, x): g added at the positions read, 0)."""
    x, indices = call.args
    return [take_grad(g, indices, x, **call.attrs), zeros_for(indices)]


def _take_position(i: PrimExpr, n: int, mode: str) -> PrimExpr:
    """The position in 0 .. n-1 that take reads for index ``i``: clamped, or wrapped."""
    if i.dtype in ("int8", "int16", "uint8"):  # room for n - 1
        i = cast("int32", i)
    return minimum(maximum(i, 0), n - 1) if mode == "clip" else i % n


def _take_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[o before axis, position(indices[o on the index axes]), o after]."""
    x, indices = inputs
    k = indices.ndim
    given: int | None = attrs.axis
    n = math.prod(x.shape) if given is None else x.shape[given % x.ndim]

    def position(i: PrimExpr) -> PrimExpr:
        return _take_position(i, n, attrs.mode)

    if attrs.axis is None:
        return compute(out_type.concrete_shape(),
                       lambda *o: x[unravel(position(indices[o]), x.shape)], "T_take")
    axis: int = attrs.axis % x.ndim
    return compute(out_type.concrete_shape(), lambda *o: x[
        (*o[:axis], position(indices[o[axis:axis + k]]), *o[axis + k:])], "T_take")


_TAKE_ATTRS = (
    Attr("axis", "optional_int", None, doc="the axis to index; None indexes the flattened x"),
    Attr("mode", "str", "clip",
         lambda m: None if m in ("clip", "wrap") else "must be 'clip' or 'wrap'",
         doc="out-of-range indices: 'clip' clamps (negative to 0), 'wrap' wraps around",
         keyword_only=True),
)

def _take_ref(xp: ArrayModule) -> Callable[[Array, Array, int | None, str], Array]:
    def ref(x: Array, indices: Array, axis: int | None, mode: str) -> Array:
        return xp.take(x, indices, axis, mode=mode)

    return ref


take = register(OpDef(
    "take", ("data", "indices"), _take_rel, OpPattern.INJECTIVE,
    numpy_ref=_take_ref(np), jax_lower=_take_ref(jnp),
    compute=_take_compute, gradient=_take_gradient,
    attrs=_TAKE_ATTRS, doc="the elements of x at `indices` along `axis`, as numpy.take",
))

# ---- take_grad -----------------------------------------------------------------------------


def _take_grad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    like = tensor_arg(ctx, args[2], "take_grad: the shape source")
    taken = _take_rel([like, args[1]], attrs, ctx)
    ctx.unify_types(args[0], taken, f"take_grad: the output gradient must have the type of "
                    f"take(like, indices), {type_to_str(taken)}")
    return like


def _taken_index(shape: tuple[int, ...], indices: AnyValue, axis: int | None, mode: str,
                 xp: ArrayModule) -> tuple[Array, ...]:
    """The index of the elements take reads (of the flattened x when axis is None)."""
    n = int(np.prod(shape)) if axis is None else shape[axis]
    i = xp.clip(indices, 0, n - 1) if mode == "clip" else xp.mod(indices, n)
    return (i,) if axis is None else along(axis, len(shape), i)


def _take_grad_numpy(g: AnyValue, indices: AnyValue, like: AnyValue, axis: int | None,
                     mode: str) -> AnyValue:
    out: Array = np.zeros(like.size if axis is None else like.shape, g.dtype)
    np.add.at(out, _taken_index(like.shape, indices, axis, mode, np), g)
    return out.reshape(like.shape)


def _take_grad_jax(g: AnyValue, indices: AnyValue, like: AnyValue, axis: int | None,
                   mode: str) -> AnyValue:
    out = jnp.zeros(like.size if axis is None else like.shape, g.dtype)
    return out.at[_taken_index(like.shape, indices, axis, mode, jnp)].add(g).reshape(like.shape)


def _take_grad_gradient(call: Call, g: Expr) -> list[Expr]:
    """d take_grad(d, i, t) = (take(g, i), 0, 0): take_grad is linear in d, the adjoint of take."""
    _, indices, like = call.args
    return [take(g, indices, **call.attrs), zeros_for(indices), zeros_for(like)]


def _take_grad_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[j] = sum over the index positions p of select(position(indices[p]) == j, g[p], 0)."""
    g, indices, like = inputs
    shape = out_type.concrete_shape()
    axis: int | None = None if attrs.axis is None else attrs.axis % like.ndim
    n = math.prod(shape) if axis is None else shape[axis]
    if math.prod(indices.shape) == 0:  # take read nothing
        return compute(shape, lambda *o: const(0, g.dtype), "T_take_grad")

    def f(*o: PrimExpr) -> PrimExpr:
        j = ravel(o, shape) if axis is None else o[axis]
        r = [reduce_axis(e, f"r{d}") for d, e in enumerate(indices.shape)]
        at = _take_position(indices[tuple(r)], n, attrs.mode)
        hit = equal(at, j if at.dtype == j.dtype else cast(at.dtype, j))
        read = g[tuple(r)] if axis is None else g[o[:axis] + tuple(r) + o[axis + 1:]]
        value = select(hit, read, const(0, g.dtype))
        return T.sum(value, r) if r else value  # a 0-d indices reads one position

    return compute(shape, f, "T_take_grad")


take_grad = register(OpDef(
    "take_grad", ("out_grad", "indices", "like"), _take_grad_rel, OpPattern.OPAQUE,
    numpy_ref=_take_grad_numpy, jax_lower=_take_grad_jax,
    compute=_take_grad_compute, gradient=_take_grad_gradient, attrs=_TAKE_ATTRS,
    doc="zeros shaped like `like` with out_grad added at the positions take(like, indices) "
        "reads (repeated indices accumulate): the adjoint of take",
))

# ---- strided_slice -------------------------------------------------------------------------


def _slice_index(ndim: int, begin: tuple[int, ...], end: tuple[int, ...],
                 strides: int | tuple[int, ...] | None,
                 axes: int | tuple[int, ...] | None) -> tuple[slice, ...]:
    """The Python index that strided_slice applies: begin[i]:end[i]:strides[i] on axes[i]."""
    strides = (1,) * len(begin) if strides is None else as_tuple(strides)
    axes = tuple(range(len(begin))) if axes is None else as_tuple(axes)
    index = [slice(None)] * ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        index[a] = slice(b, e, s)
    return tuple(index)


def _strided_slice_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "strided_slice: the input")
    n = len(attrs.begin)
    strides = (1,) * n if attrs.strides is None else as_tuple(attrs.strides)
    if not n == len(attrs.end) == len(strides):
        ctx.fail(f"strided_slice: attributes 'begin' = {attrs.begin}, 'end' = {attrs.end} and "
                 f"'strides' = {attrs.strides} must have the same length")
    if attrs.axes is None:
        if n > t.ndim:
            ctx.fail(f"strided_slice: attribute 'begin' = {attrs.begin} has more entries than "
                     f"the input {type_to_str(t)} has axes")
        axes = tuple(range(n))
    else:
        axes = attr_axes(ctx, "strided_slice", "axes", attrs.axes, t)
        if len(axes) != n:
            ctx.fail(f"strided_slice: attribute 'axes' = {attrs.axes} must have one axis per "
                     f"entry of 'begin' = {attrs.begin}")
    index = _slice_index(t.ndim, attrs.begin, attrs.end, strides, axes)
    shape = list(shape_of(ctx, t))
    for a in axes:
        shape[a] = slice_dim(shape[a], index[a].start, index[a].stop, index[a].step)
    return TensorType(tuple(shape), t.dtype)


def _strided_slice_reference(x: AnyValue, begin: tuple[int, ...], end: tuple[int, ...],
                             strides: int | tuple[int, ...] | None,
                             axes: int | tuple[int, ...] | None) -> AnyValue:
    return x[_slice_index(x.ndim, begin, end, strides, axes)]


def _strided_slice_gradient(call: Call, g: Expr) -> list[Expr]:
    """d x[begin:end:strides] = zeros like x holding g at the sliced positions."""
    return [strided_slice_grad(g, call.args[0], **call.attrs)]


def _slice_starts(attrs: Attrs, shape: tuple[int, ...]) -> dict[int, tuple[int, int, int]]:
    """axis -> (start, step, count) of each sliced axis, as Python's slice resolves them."""
    n = len(attrs.begin)
    strides = (1,) * n if attrs.strides is None else as_tuple(attrs.strides)
    axes = tuple(range(n)) if attrs.axes is None else as_tuple(attrs.axes)
    out: dict[int, tuple[int, int, int]] = {}
    for a, b, e, s in zip(axes, attrs.begin, attrs.end, strides):
        a %= len(shape)  # a repeated axis: the last slice wins, as in the reference
        start, stop, step = slice(b, e, s).indices(shape[a])
        out[a] = (start, step, len(range(start, stop, step)))
    return out


def _strided_slice_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[start + o * step] on each sliced axis, x[o] on the others."""
    (x,) = inputs
    starts = _slice_starts(attrs, x.shape)

    def f(*o: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = []
        for d, i in enumerate(o):
            start, step, _ = starts.get(d, (0, 1, 0))
            i = i if step == 1 else i * step
            index.append(i if start == 0 else i + start)
        return x[tuple(index)]

    return compute(out_type.concrete_shape(), f, "T_strided_slice")


_SLICE_ATTRS = (
    Attr("begin", "ints", doc="start of each slice"),
    Attr("end", "ints", doc="end (exclusive) of each slice; out-of-range values clamp"),
    Attr("strides", "optional_ints", None,
         lambda s: "a stride cannot be 0" if s is not None and 0 in as_tuple(s) else None,
         doc="step of each slice; None is all 1"),
    Attr("axes", "optional_ints", None, doc="the sliced axes; None is the leading axes"),
)

strided_slice = register(OpDef(
    "strided_slice", ("data",), _strided_slice_rel, OpPattern.INJECTIVE,
    numpy_ref=_strided_slice_reference, jax_lower=_strided_slice_reference,
    compute=_strided_slice_compute, gradient=_strided_slice_gradient, attrs=_SLICE_ATTRS,
    doc="x[begin:end:strides] on each of `axes`, with Python slice semantics",
))

# ---- strided_slice_grad --------------------------------------------------------------------


def _strided_slice_grad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    like = tensor_arg(ctx, args[1], "strided_slice_grad: the shape source")
    sliced = _strided_slice_rel([like], attrs, ctx)
    ctx.unify_types(args[0], sliced, f"strided_slice_grad: the output gradient must have the "
                    f"type of strided_slice(like), {type_to_str(sliced)}")
    return like


def _strided_slice_grad_numpy(g: AnyValue, like: AnyValue, begin: tuple[int, ...],
                              end: tuple[int, ...], strides: int | tuple[int, ...] | None,
                              axes: int | tuple[int, ...] | None) -> AnyValue:
    out = np.zeros(like.shape, g.dtype)
    out[_slice_index(like.ndim, begin, end, strides, axes)] = g
    return out


def _strided_slice_grad_jax(g: AnyValue, like: AnyValue, begin: tuple[int, ...],
                            end: tuple[int, ...], strides: int | tuple[int, ...] | None,
                            axes: int | tuple[int, ...] | None) -> AnyValue:
    index = _slice_index(like.ndim, begin, end, strides, axes)
    return jnp.zeros(like.shape, g.dtype).at[index].set(g)


def _strided_slice_grad_gradient(call: Call, g: Expr) -> list[Expr]:
    """d strided_slice_grad(d, t) = (g[begin:end:strides], 0)."""
    return [strided_slice(g, **call.attrs), zeros_for(call.args[1])]


def _strided_slice_grad_compute(attrs: Attrs, inputs: list[Tensor],
                                out_type: TensorType) -> Tensor:
    """out[o] = g[(o - start) / step] where o is on the slice's grid, else 0."""
    g, like = inputs
    starts = _slice_starts(attrs, like.shape)
    if any(count == 0 for _, _, count in starts.values()):  # the slice was empty
        return compute(like.shape, lambda *o: const(0, g.dtype), "T_strided_slice_grad")

    def f(*o: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = []
        inside: PrimExpr | None = None
        for d, i in enumerate(o):
            if d not in starts:
                index.append(i)
                continue
            start, step, count = starts[d]
            n = like.shape[d]
            shifted = i - start if start else i
            at = shifted if step == 1 else shifted // step
            conds = [] if abs(step) == 1 else [equal(shifted % step, 0)]
            if step > 0:  # positions start, start + step, ...: only guard what can miss
                conds += [i >= start] if start > 0 else []
                conds += [at < count] if (n - 1 - start) // step >= count else []
            else:  # positions start, start + step (< start), ...
                conds += [i <= start] if start < n - 1 else []
                conds += [at < count] if -start // step >= count else []
            for c in conds:
                inside = c if inside is None else inside & c
            index.append(at)
        v = g[tuple(index)]
        return v if inside is None else select(inside, v, const(0, g.dtype))

    return compute(like.shape, f, "T_strided_slice_grad")


strided_slice_grad = register(OpDef(
    "strided_slice_grad", ("out_grad", "like"), _strided_slice_grad_rel, OpPattern.INJECTIVE,
    numpy_ref=_strided_slice_grad_numpy, jax_lower=_strided_slice_grad_jax,
    compute=_strided_slice_grad_compute, gradient=_strided_slice_grad_gradient,
    attrs=_SLICE_ATTRS,
    doc="zeros shaped like `like` holding out_grad at like[begin:end:strides]: "
        "the adjoint of strided_slice",
))

# ---- gather_nd -----------------------------------------------------------------------------


def _gather_nd_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    data = tensor_arg(ctx, args[0], "gather_nd: the data")
    indices = tensor_arg(ctx, args[1], "gather_nd: the indices")
    require_dtype(ctx, "gather_nd", "the indices", indices, INTEGER)
    shape, index_shape, b = shape_of(ctx, data), shape_of(ctx, indices), attrs.batch_dims
    if not index_shape or not isinstance(index_shape[0], int):
        ctx.fail(f"gather_nd: the indices {type_to_str(indices)} must have a static first axis "
                 "(the number of indexed axes)")
    m = index_shape[0]
    if b + m > len(shape) or b > len(index_shape) - 1:
        ctx.fail(f"gather_nd: the indices {type_to_str(indices)} index {m} axes after "
                 f"batch_dims = {b}, too many for the data {type_to_str(data)}")
    for d in range(b):
        ctx.unify_dims(shape[d], index_shape[1 + d],
                       f"gather_nd: batch axis {d} of the data and the indices differ")
    return TensorType(index_shape[1:] + shape[b + m:], data.dtype)


def _gather_positions(indices: Array, dims: tuple[int, ...], xp: ArrayModule) -> list[Array]:
    """indices[j] as positions on axis dims[j]: negative ones count from the end, then clamped
    (in int32 or int64: a narrow dtype has no room for i + n)."""
    if indices.dtype != xp.int64:
        indices = indices.astype(xp.int32)
    return [xp.clip(xp.where(i < 0, i + n, i), 0, n - 1) for i, n in zip(indices, dims)]


def _gather_nd_reference(xp: ArrayModule) -> Callable[[Array, Array, int], Array]:
    """The NumPy reference (xp = numpy) or the JAX lowering (xp = jax.numpy)."""

    def ref(data: Array, indices: Array, batch_dims: int) -> Array:
        b, m, k = batch_dims, indices.shape[0], indices.ndim - 1
        batch = [xp.arange(data.shape[d]).reshape((1,) * d + (-1,) + (1,) * (k - d - 1))
                 for d in range(b)]
        return data[tuple(batch + _gather_positions(indices, data.shape[b:b + m], xp))]

    return ref


def _gather_nd_gradient(call: Call, g: Expr) -> list[Expr]:
    """d gather_nd(x, i) = (take_grad(g, flat positions, x flattened on the indexed axes), 0)."""
    x, indices = call.args
    dims = static_dims(x, "gather_nd")
    b: int = call.attrs.batch_dims
    index_shape = static_dims(indices, "gather_nd")
    m, k = index_shape[0], len(index_shape) - 1
    dtype = "int64" if tensor_type(indices).dtype == "int64" else "int32"
    lead = dims[:b + m]
    strides = [math.prod(lead[d + 1:]) for d in range(b + m)]
    offsets = sum(np.arange(dims[d]).reshape((1,) * d + (-1,) + (1,) * (k - d - 1)) * strides[d]
                  for d in range(b))
    flat: Expr = ir_const(np.broadcast_to(offsets, index_shape[1:]).astype(dtype))
    for j in range(m):
        n = dims[b + j]
        i = ops.cast(take(indices, ir_const(j, dtype), axis=0), dtype)
        wrapped = ops.where(ops.less(i, ir_const(0, dtype)), ops.add(i, ir_const(n, dtype)), i)
        position = ops.clip(wrapped, 0, n - 1)
        flat = ops.add(flat, ops.multiply(position, ir_const(strides[b + j], dtype)))
    rows = reshape(x, (math.prod(lead), *dims[b + m:]))
    return [reshape_like(take_grad(g, flat, rows, axis=0), x), zeros_for(indices)]


def _gather_nd_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[o's batch part, position(indices[j, o's index part]) for each j, the rest]."""
    x, indices = inputs
    b: int = attrs.batch_dims
    m, k = indices.shape[0], indices.ndim - 1

    def position(i: PrimExpr, n: int) -> PrimExpr:
        if i.dtype in ("int8", "int16", "uint8"):  # room for n - 1
            i = cast("int32", i)
        return minimum(maximum(select(i < 0, i + n, i), 0), n - 1)

    def f(*o: PrimExpr) -> PrimExpr:
        at = [position(indices[(const(j), *o[:k])], x.shape[b + j]) for j in range(m)]
        return x[(*o[:b], *at, *o[k:])]

    return compute(out_type.concrete_shape(), f, "T_gather_nd")


gather_nd = register(OpDef(
    "gather_nd", ("data", "indices"), _gather_nd_rel, OpPattern.INJECTIVE,
    numpy_ref=_gather_nd_reference(np),
    jax_lower=_gather_nd_reference(jnp),
    compute=_gather_nd_compute, gradient=_gather_nd_gradient,
    attrs=(Attr("batch_dims", "int", 0,
                check=lambda b: f"must be >= 0, got {b}" if b < 0 else None,
                doc="leading axes shared by the data and indices[1:], gathered from one to one"),),
    doc="x at the positions indices[:, y...] on its axes after the batch axes, as TVM's "
        "gather_nd: out[b, y, rest] = x[b, indices[0, b, y], ..., indices[M-1, b, y], rest]; "
        "negative indices count from the end, then indices are clamped into range",
))
