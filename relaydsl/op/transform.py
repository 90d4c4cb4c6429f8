"""Shape transformations and tensor constructors, with NumPy semantics.

reshape, transpose, expand_dims, squeeze, concatenate, split, stack, take,
strided_slice, broadcast_to; zeros, ones, full, zeros_like, ones_like; and the
adjoints gradient rules need: reshape_like, take_grad, strided_slice_grad.
concatenate and stack take one tuple-typed input (a Python tuple of arrays
at run time); split returns a tuple. Dims that pass through stay symbolic;
a dim computed from a symbolic one (a concatenated axis, reshape's -1, a
sliced axis) is ``Any``. squeeze with ``axis=None`` removes the dims known
to be 1 and keeps symbolic ones (as TVM does).
"""
from __future__ import annotations

from typing import Any as AnyValue

import jax.numpy as jnp
import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import AnyDim, Dim, TensorType, TupleType, Type, type_to_str
from relaydsl.op._legacy import OpDef, register
from relaydsl.op.registry import Attr, OpPattern
from relaydsl.typing.relations import (
    INTEGER, RelationContext, attr_axes, attr_axis, identity_rel, known_product, known_sum,
    require_dtype, same_dtype, shape_of, slice_dim, tensor_arg, tensor_tuple_arg,
)


def _as_tuple(v: int | tuple[int, ...]) -> tuple[int, ...]:
    return (v,) if isinstance(v, int) else tuple(v)


def _nonnegative(shape: tuple[int, ...]) -> str | None:
    return f"dims must be >= 0, got {shape}" if any(d < 0 for d in shape) else None


def _shape_attr(doc: str) -> Attr:
    return Attr("shape", "ints", check=_nonnegative, doc=doc)


def _along(axis: int, ndim: int, index: slice) -> tuple[slice, ...]:
    """An index applying `index` on `axis` and taking everything on the other axes."""
    axis = axis % ndim
    return (slice(None),) * axis + (index,) + (slice(None),) * (ndim - axis - 1)


# ---- reshape -------------------------------------------------------------------

def _newshape_check(newshape: tuple[int, ...]) -> str | None:
    if any(d < -1 for d in newshape) or newshape.count(-1) > 1:
        return f"dims must be >= 0, with at most one -1 (inferred), got {newshape}"
    return None


def _reshape_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "reshape: the input")
    newshape: tuple[int, ...] = attrs.newshape
    size = known_product(shape_of(ctx, t))
    rest = known_product([d for d in newshape if d != -1])
    assert isinstance(rest, int)  # newshape holds ints only
    if not isinstance(size, int):  # symbolic input: only -1 is unknown, nothing to check
        return TensorType(tuple(AnyDim() if d == -1 else d for d in newshape), t.dtype)
    if -1 in newshape and rest != 0 and size % rest == 0:
        return TensorType(tuple(size // rest if d == -1 else d for d in newshape), t.dtype)
    if -1 not in newshape and rest == size:
        return TensorType(newshape, t.dtype)
    ctx.fail(f"reshape: attribute 'newshape' = {newshape} does not fit the {size} elements "
             f"of the input {type_to_str(t)}")


register(OpDef(
    "reshape", ("data",), _reshape_rel, OpPattern.INJECTIVE,
    lambda x, newshape: np.reshape(x, newshape), lambda x, newshape: jnp.reshape(x, newshape),
    attrs=(Attr("newshape", "ints", check=_newshape_check,
                doc="the new shape; one -1 is inferred from the size"),),
    doc="the elements of x, in row-major order, with shape `newshape`",
))


def _reshape_like_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "reshape_like: the data")
    like = tensor_arg(ctx, args[1], "reshape_like: the shape source")
    size, want = known_product(shape_of(ctx, t)), known_product(shape_of(ctx, like))
    if isinstance(size, int) and isinstance(want, int) and size != want:
        ctx.fail(f"reshape_like: the data {type_to_str(t)} has {size} elements, the shape "
                 f"source {type_to_str(like)} {want}")
    return TensorType(shape_of(ctx, like), t.dtype)


register(OpDef(
    "reshape_like", ("data", "like"), _reshape_like_rel, OpPattern.INJECTIVE,
    lambda x, like: np.reshape(x, like.shape), lambda x, like: jnp.reshape(x, like.shape),
    doc="the elements of x, in row-major order, with the shape of `like` (symbolic dims too)",
))

# ---- transpose -----------------------------------------------------------------


def _transpose_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "transpose: the input")
    shape = shape_of(ctx, t)
    if attrs.axes is None:
        return TensorType(shape[::-1], t.dtype)
    axes = attr_axes(ctx, "transpose", "axes", attrs.axes, t)
    if len(axes) != t.ndim:
        ctx.fail(f"transpose: attribute 'axes' = {attrs.axes} is not a permutation of the axes "
                 f"of the input {type_to_str(t)}")
    return TensorType(tuple(shape[a] for a in axes), t.dtype)


def _transpose_axes(axes: int | tuple[int, ...] | None) -> tuple[int, ...] | None:
    return None if axes is None else _as_tuple(axes)


register(OpDef(
    "transpose", ("data",), _transpose_rel, OpPattern.INJECTIVE,
    lambda x, axes: np.transpose(x, _transpose_axes(axes)),
    lambda x, axes: jnp.transpose(x, _transpose_axes(axes)),
    attrs=(Attr("axes", "optional_ints", None, doc="output axis i is input axis axes[i]; "
                "None reverses the axes"),),
    doc="x with its axes permuted by `axes` (reversed by default)",
))

# ---- expand_dims / squeeze -----------------------------------------------------


def _expanded(shape: tuple[Dim, ...], axis: int, num_newaxis: int) -> tuple[Dim, ...]:
    at = axis % (len(shape) + 1)
    return shape[:at] + (1,) * num_newaxis + shape[at:]


def _expand_dims_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "expand_dims: the input")
    attr_axis(ctx, "expand_dims", "axis", attrs.axis, t, t.ndim + 1)
    return TensorType(_expanded(shape_of(ctx, t), attrs.axis, attrs.num_newaxis), t.dtype)


register(OpDef(
    "expand_dims", ("data",), _expand_dims_rel, OpPattern.INJECTIVE,
    lambda x, axis, num_newaxis: np.reshape(x, _expanded(x.shape, axis, num_newaxis)),
    lambda x, axis, num_newaxis: jnp.reshape(x, _expanded(x.shape, axis, num_newaxis)),
    attrs=(Attr("axis", "int", doc="where the new axes go, in -ndim-1 .. ndim"),
           Attr("num_newaxis", "int", 1, lambda n: "must be >= 0" if n < 0 else None,
                doc="how many size-1 axes to insert")),
    doc="x with `num_newaxis` size-1 axes inserted at `axis`",
))


def _squeeze_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "squeeze: the input")
    shape = shape_of(ctx, t)
    if attrs.axis is None:
        return TensorType(tuple(d for d in shape if d != 1), t.dtype)
    axes = attr_axes(ctx, "squeeze", "axis", attrs.axis, t)
    for a in axes:
        what = (f"squeeze: attribute 'axis' = {attrs.axis} names axis {a} of the input "
                f"{type_to_str(t)}, which is not of size 1")
        if isinstance(shape[a], int) and shape[a] != 1:
            ctx.fail(what)
        ctx.unify_dims(shape[a], 1, what)  # binds a symbolic dim to 1
    return TensorType(tuple(ctx.resolve_dim(d) for i, d in enumerate(shape) if i not in axes),
                      t.dtype)


register(OpDef(
    "squeeze", ("data",), _squeeze_rel, OpPattern.INJECTIVE,
    lambda x, axis: np.squeeze(x, axis), lambda x, axis: jnp.squeeze(x, axis),
    attrs=(Attr("axis", "optional_ints", None, doc="size-1 axes to remove; None removes all"),),
    doc="x without the size-1 axes `axis` (all size-1 axes by default)",
))

# ---- concatenate / stack / split -------------------------------------------------


def _same_rank(ctx: RelationContext, op: str, tuple_type: Type, ts: list[TensorType]) -> None:
    if not ts:
        ctx.fail(f"{op}: the input must hold at least one tensor, got {type_to_str(tuple_type)}")
    if any(t.ndim != ts[0].ndim for t in ts):
        ctx.fail(f"{op}: the tensors must have the same rank, got {type_to_str(tuple_type)}")


def _concatenate_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    ts = tensor_tuple_arg(ctx, args[0], "concatenate: the input")
    _same_rank(ctx, "concatenate", args[0], ts)
    dtype = same_dtype(ctx, ts, "concatenate")
    axis = attr_axis(ctx, "concatenate", "axis", attrs.axis, args[0], ts[0].ndim)
    shape = list(shape_of(ctx, ts[0]))
    for t in ts[1:]:
        for i, d in enumerate(t.shape):
            if i != axis:
                shape[i] = ctx.unify_dims(
                    shape[i], d, f"concatenate: dim {i} differs in {type_to_str(args[0])}")
    shape[axis] = known_sum([ctx.resolve_dim(t.shape[axis]) for t in ts])
    return TensorType(tuple(ctx.resolve_dim(d) for d in shape), dtype)


register(OpDef(
    "concatenate", ("data",), _concatenate_rel, OpPattern.INJECTIVE,
    lambda data, axis: np.concatenate(data, axis), lambda data, axis: jnp.concatenate(data, axis),
    attrs=(Attr("axis", "int", 0, doc="the axis to join along"),),
    doc="the tensors of a tuple joined along an existing axis",
))


def _stack_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    ts = tensor_tuple_arg(ctx, args[0], "stack: the input")
    _same_rank(ctx, "stack", args[0], ts)
    dtype = same_dtype(ctx, ts, "stack")
    axis = attr_axis(ctx, "stack", "axis", attrs.axis, args[0], ts[0].ndim + 1)
    shape = list(shape_of(ctx, ts[0]))
    for t in ts[1:]:
        for i, d in enumerate(t.shape):
            shape[i] = ctx.unify_dims(
                shape[i], d, f"stack: dim {i} differs in {type_to_str(args[0])}")
    shape.insert(axis, len(ts))
    return TensorType(tuple(ctx.resolve_dim(d) for d in shape), dtype)


register(OpDef(
    "stack", ("data",), _stack_rel, OpPattern.INJECTIVE,
    lambda data, axis: np.stack(data, axis), lambda data, axis: jnp.stack(data, axis),
    attrs=(Attr("axis", "int", 0, doc="the position of the new axis, in -ndim-1 .. ndim"),),
    doc="the equally shaped tensors of a tuple joined along a new axis",
))


def _split_check(v: int | tuple[int, ...]) -> str | None:
    return "the number of sections must be >= 1" if isinstance(v, int) and v < 1 else None


def _pieces(size: int, indices_or_sections: int | tuple[int, ...]) -> list[slice]:
    """The slices numpy.split cuts an axis of `size` into (sections must divide `size`)."""
    if isinstance(indices_or_sections, int):
        step = size // indices_or_sections
        return [slice(i * step, (i + 1) * step) for i in range(indices_or_sections)]
    cuts = (0, *indices_or_sections, None)
    return [slice(lo, hi) for lo, hi in zip(cuts[:-1], cuts[1:])]


def _split_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "split: the input")
    axis = attr_axis(ctx, "split", "axis", attrs.axis, t)
    shape = shape_of(ctx, t)
    n, how = shape[axis], attrs.indices_or_sections
    if isinstance(n, int) and isinstance(how, int) and n % how:
        ctx.fail(f"split: attribute 'indices_or_sections' = {how} does not divide axis {axis} "
                 f"of the input {type_to_str(t)}")
    if isinstance(n, int):
        sizes = [slice_dim(n, s.start, s.stop) for s in _pieces(n, how)]
    else:
        sizes = [AnyDim()] * (how if isinstance(how, int) else len(how) + 1)
    return TupleType(tuple(TensorType(shape[:axis] + (d,) + shape[axis + 1:], t.dtype)
                           for d in sizes))


def _split(x: AnyValue, indices_or_sections: int | tuple[int, ...], axis: int) -> tuple:
    return tuple(x[_along(axis, x.ndim, s)] for s in _pieces(x.shape[axis], indices_or_sections))


register(OpDef(
    "split", ("data",), _split_rel, OpPattern.INJECTIVE, _split, _split,
    attrs=(Attr("indices_or_sections", "int_or_ints", check=_split_check,
                doc="a number of equal sections, or the indices to cut at"),
           Attr("axis", "int", 0, doc="the axis to cut")),
    doc="a tuple of pieces of x cut along `axis`, as numpy.split cuts",
))

# ---- take / strided_slice / broadcast_to -------------------------------------------


def _take_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    data = tensor_arg(ctx, args[0], "take: the data")
    indices = tensor_arg(ctx, args[1], "take: the indices")
    require_dtype(ctx, "take", "the indices", indices, INTEGER)
    if attrs.axis is None:
        return TensorType(shape_of(ctx, indices), data.dtype)
    axis = attr_axis(ctx, "take", "axis", attrs.axis, data)
    shape = shape_of(ctx, data)
    return TensorType(shape[:axis] + shape_of(ctx, indices) + shape[axis + 1:], data.dtype)


_TAKE_ATTRS = (
    Attr("axis", "optional_int", None, doc="the axis to index; None indexes the flattened x"),
    Attr("mode", "str", "clip",
         lambda m: None if m in ("clip", "wrap") else "must be 'clip' or 'wrap'",
         doc="out-of-range indices: 'clip' clamps (negative to 0), 'wrap' wraps around"),
)

register(OpDef(
    "take", ("data", "indices"), _take_rel, OpPattern.INJECTIVE,
    lambda x, indices, axis, mode: np.take(x, indices, axis, mode=mode),
    lambda x, indices, axis, mode: jnp.take(x, indices, axis, mode=mode),
    attrs=_TAKE_ATTRS, doc="the elements of x at `indices` along `axis`, as numpy.take",
))


def _take_grad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    like = tensor_arg(ctx, args[2], "take_grad: the shape source")
    taken = _take_rel([like, args[1]], attrs, ctx)
    ctx.unify_types(args[0], taken, f"take_grad: the output gradient must have the type of "
                    f"take(like, indices), {type_to_str(taken)}")
    return like


def _taken_index(shape: tuple[int, ...], indices: AnyValue, axis: int | None, mode: str,
                 xp: AnyValue) -> tuple:
    """The index of the elements take reads (of the flattened x when axis is None)."""
    n = int(np.prod(shape)) if axis is None else shape[axis]
    i = xp.clip(indices, 0, n - 1) if mode == "clip" else xp.mod(indices, n)
    return (i,) if axis is None else _along(axis, len(shape), i)


def _take_grad_numpy(g: AnyValue, indices: AnyValue, like: AnyValue, axis: int | None,
                     mode: str) -> AnyValue:
    out = np.zeros(like.size if axis is None else like.shape, g.dtype)
    np.add.at(out, _taken_index(like.shape, indices, axis, mode, np), g)
    return out.reshape(like.shape)


def _take_grad_jax(g: AnyValue, indices: AnyValue, like: AnyValue, axis: int | None,
                   mode: str) -> AnyValue:
    out = jnp.zeros(like.size if axis is None else like.shape, g.dtype)
    return out.at[_taken_index(like.shape, indices, axis, mode, jnp)].add(g).reshape(like.shape)


register(OpDef(
    "take_grad", ("out_grad", "indices", "like"), _take_grad_rel, OpPattern.OPAQUE,
    _take_grad_numpy, _take_grad_jax, attrs=_TAKE_ATTRS,
    doc="zeros shaped like `like` with out_grad added at the positions take(like, indices) "
        "reads (repeated indices accumulate): the adjoint of take",
))


def _slice_index(ndim: int, begin: tuple[int, ...], end: tuple[int, ...],
                 strides: int | tuple[int, ...] | None,
                 axes: int | tuple[int, ...] | None) -> tuple[slice, ...]:
    """The Python index that strided_slice applies: begin[i]:end[i]:strides[i] on axes[i]."""
    strides = (1,) * len(begin) if strides is None else _as_tuple(strides)
    axes = tuple(range(len(begin))) if axes is None else _as_tuple(axes)
    index = [slice(None)] * ndim
    for a, b, e, s in zip(axes, begin, end, strides):
        index[a] = slice(b, e, s)
    return tuple(index)


def _strided_slice_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "strided_slice: the input")
    n = len(attrs.begin)
    strides = (1,) * n if attrs.strides is None else _as_tuple(attrs.strides)
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


def _strided_slice(x: AnyValue, begin, end, strides, axes) -> AnyValue:
    return x[_slice_index(x.ndim, begin, end, strides, axes)]


_SLICE_ATTRS = (
    Attr("begin", "ints", doc="start of each slice"),
    Attr("end", "ints", doc="end (exclusive) of each slice; out-of-range values clamp"),
    Attr("strides", "optional_ints", None,
         lambda s: "a stride cannot be 0" if s is not None and 0 in _as_tuple(s) else None,
         doc="step of each slice; None is all 1"),
    Attr("axes", "optional_ints", None, doc="the sliced axes; None is the leading axes"),
)

register(OpDef(
    "strided_slice", ("data",), _strided_slice_rel, OpPattern.INJECTIVE,
    _strided_slice, _strided_slice, attrs=_SLICE_ATTRS,
    doc="x[begin:end:strides] on each of `axes`, with Python slice semantics",
))


def _strided_slice_grad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    like = tensor_arg(ctx, args[1], "strided_slice_grad: the shape source")
    sliced = _strided_slice_rel([like], attrs, ctx)
    ctx.unify_types(args[0], sliced, f"strided_slice_grad: the output gradient must have the "
                    f"type of strided_slice(like), {type_to_str(sliced)}")
    return like


def _strided_slice_grad(xp: AnyValue):
    def ref(g: AnyValue, like: AnyValue, begin, end, strides, axes) -> AnyValue:
        index = _slice_index(like.ndim, begin, end, strides, axes)
        if xp is np:
            out = np.zeros(like.shape, g.dtype)
            out[index] = g
            return out
        return jnp.zeros(like.shape, g.dtype).at[index].set(g)

    return ref


register(OpDef(
    "strided_slice_grad", ("out_grad", "like"), _strided_slice_grad_rel, OpPattern.INJECTIVE,
    _strided_slice_grad(np), _strided_slice_grad(jnp), attrs=_SLICE_ATTRS,
    doc="zeros shaped like `like` holding out_grad at like[begin:end:strides]: "
        "the adjoint of strided_slice",
))


def _broadcast_to_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "broadcast_to: the input")
    target: tuple[int, ...] = attrs.shape
    fits = t.ndim <= len(target) and all(
        not isinstance(d, int) or d in (1, want)  # a symbolic dim cannot be checked statically
        for d, want in zip(shape_of(ctx, t)[::-1], target[::-1])
    )
    if not fits:
        ctx.fail(f"broadcast_to: the input {type_to_str(t)} cannot be broadcast to "
                 f"attribute 'shape' = {target}")
    return TensorType(target, t.dtype)


register(OpDef(
    "broadcast_to", ("data",), _broadcast_to_rel, OpPattern.BROADCAST,
    lambda x, shape: np.broadcast_to(x, shape), lambda x, shape: jnp.broadcast_to(x, shape),
    attrs=(_shape_attr("the target shape"),),
    doc="x broadcast (NumPy rules) to `shape`",
))

# ---- constructors ------------------------------------------------------------------


def _constant_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    return TensorType(attrs.shape, attrs.dtype)


def _constant(name: str, numpy_ref, jax_lower, doc: str) -> None:
    register(OpDef(
        name, (), _constant_rel, OpPattern.ELEMWISE, numpy_ref, jax_lower,
        attrs=(_shape_attr("the result shape"),
               Attr("dtype", "dtype", "float32", doc="the result dtype")),
        doc=doc, differentiable=False,
    ))


_constant("zeros", np.zeros, jnp.zeros, "a tensor of zeros of `shape` and `dtype`")
_constant("ones", np.ones, jnp.ones, "a tensor of ones of `shape` and `dtype`")


def _full_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    fill = tensor_arg(ctx, args[0], "full: the fill value")
    if fill.ndim != 0:
        ctx.fail(f"full: the fill value must be a scalar tensor, got {type_to_str(fill)}")
    return TensorType(attrs.shape, attrs.dtype or fill.dtype)


register(OpDef(
    "full", ("fill_value",), _full_rel, OpPattern.BROADCAST,
    lambda v, shape, dtype: np.full(shape, v, dtype or v.dtype),
    lambda v, shape, dtype: jnp.full(shape, v, dtype or v.dtype),
    attrs=(_shape_attr("the result shape"),
           Attr("dtype", "optional_dtype", None, doc="the result dtype; None is fill_value's")),
    doc="a tensor of `shape` filled with the scalar fill_value, converted to `dtype`",
))


register(OpDef("zeros_like", ("data",), identity_rel, OpPattern.ELEMWISE, np.zeros_like,
               jnp.zeros_like, doc="zeros of x's shape and dtype", differentiable=False))
register(OpDef("ones_like", ("data",), identity_rel, OpPattern.ELEMWISE, np.ones_like,
               jnp.ones_like, doc="ones of x's shape and dtype", differentiable=False))


def _shape_of_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "shape_of: the input")
    return TensorType((t.ndim,), "int32")


register(OpDef(
    "shape_of", ("data",), _shape_of_rel, OpPattern.OPAQUE,
    lambda x: np.array(np.shape(x), np.int32), lambda x: jnp.array(x.shape, jnp.int32),
    doc="the shape of x as a 1-D int32 tensor (loops over a tensor's first axis use it)",
    differentiable=False,
))
