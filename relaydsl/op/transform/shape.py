"""Ops that move a tensor's elements into another shape: reshape (and its adjoint
reshape_like), transpose, expand_dims, squeeze, broadcast_to, tile.

Their compute rules are pure index mappings: the output element at ``o`` reads one input
element. reshape goes through the row-major flat position; squeeze with ``axis=None``
removes the dims known to be 1 and keeps symbolic ones (as TVM does).
"""
from __future__ import annotations

from typing import Callable, TypeVar as TypeVariable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import AnyDim, Dim, TensorType, Type, type_to_str
from relaydsl.op.grad_util import collapse, norm_axes, static_dims, sum_, tensor_type, zeros_for
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.quantize_rule import SAME_SCALE_RESHAPE
from relaydsl.op.registry import Array, ArrayModule, Attr, OpDef, OpPattern, Traits, register
from relaydsl.op.transform.common import as_tuple, shape_attr
from relaydsl.te.expr import PrimExpr, const
from relaydsl.te.indexing import norm_axes as te_norm_axes, reindex
from relaydsl.te.rules import broadcast_read
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import (
    RelationContext, attr_axes, attr_axis, known_product, shape_of, tensor_arg,
)

# ---- reshape -------------------------------------------------------------------------------


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


def _reshape_gradient(call: Call, g: Expr) -> list[Expr]:
    """d reshape(x) = reshape_like(g, x)."""
    return [reshape_like(g, call.args[0])]


def reshape_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[the index of o's row-major position in x] (also reshape_like's, flatten's)."""
    x, shape = inputs[0], out_type.concrete_shape()  # reshape_like: inputs[1] gives the shape
    if shape == x.shape:
        return compute(shape, lambda *o: x[o], "T_reshape")
    return compute(shape, lambda *o: x[reindex(o, shape, x.shape)], "T_reshape")


def _reshape_ref(xp: ArrayModule) -> Callable[[Array, tuple[int, ...]], Array]:
    def ref(x: Array, newshape: tuple[int, ...]) -> Array:
        return xp.reshape(x, newshape)

    return ref


reshape = register(OpDef(
    "reshape", ("data",), _reshape_rel, OpPattern.INJECTIVE,
    numpy_ref=_reshape_ref(np), jax_lower=_reshape_ref(jnp),
    compute=reshape_compute, gradient=_reshape_gradient,
    attrs=(Attr("newshape", "ints", check=_newshape_check,
                doc="the new shape; one -1 is inferred from the size"),),
    doc="the elements of x, in row-major order, with shape `newshape`",
    traits=Traits(quantize=SAME_SCALE_RESHAPE),
))

# ---- reshape_like --------------------------------------------------------------------------


def _reshape_like_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "reshape_like: the data")
    like = tensor_arg(ctx, args[1], "reshape_like: the shape source")
    size, want = known_product(shape_of(ctx, t)), known_product(shape_of(ctx, like))
    if isinstance(size, int) and isinstance(want, int) and size != want:
        ctx.fail(f"reshape_like: the data {type_to_str(t)} has {size} elements, the shape "
                 f"source {type_to_str(like)} {want}")
    return TensorType(shape_of(ctx, like), t.dtype)


def _reshape_like_gradient(call: Call, g: Expr) -> list[Expr]:
    """d reshape_like(x, t) = (reshape_like(g, x), 0)."""
    x, like = call.args
    return [reshape_like(g, x), zeros_for(like)]


def _reshape_like_ref(xp: ArrayModule) -> Callable[[Array, Array], Array]:
    def ref(x: Array, like: Array) -> Array:
        return xp.reshape(x, like.shape)

    return ref


reshape_like = register(OpDef(
    "reshape_like", ("data", "like"), _reshape_like_rel, OpPattern.INJECTIVE,
    numpy_ref=_reshape_like_ref(np), jax_lower=_reshape_like_ref(jnp),
    compute=reshape_compute, gradient=_reshape_like_gradient,
    doc="the elements of x, in row-major order, with the shape of `like` (symbolic dims too)",
))

# ---- transpose -----------------------------------------------------------------------------


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
    return None if axes is None else as_tuple(axes)


def _transpose_gradient(call: Call, g: Expr) -> list[Expr]:
    """d transpose(x, axes) = transpose(g, inverse permutation of axes)."""
    x, axes = call.args[0], call.attrs.axes
    if axes is None:
        return [transpose(g)]
    inverse = np.argsort(norm_axes(axes, tensor_type(x).ndim))
    return [transpose(g, axes=tuple(int(i) for i in inverse))]


def _transpose_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[i] where i[axes[d]] = o[d]."""
    (x,) = inputs
    axes = (tuple(range(x.ndim))[::-1] if attrs.axes is None
            else tuple(a % x.ndim for a in as_tuple(attrs.axes)))

    def f(*o: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = [const(0)] * x.ndim
        for i, a in enumerate(axes):
            index[a] = o[i]
        return x[tuple(index)]

    return compute(out_type.concrete_shape(), f, "T_transpose")


def _transpose_ref(xp: ArrayModule) -> Callable[[Array, tuple[int, ...] | None], Array]:
    def ref(x: Array, axes: tuple[int, ...] | None) -> Array:
        return xp.transpose(x, _transpose_axes(axes))

    return ref


transpose = register(OpDef(
    "transpose", ("data",), _transpose_rel, OpPattern.INJECTIVE,
    numpy_ref=_transpose_ref(np), jax_lower=_transpose_ref(jnp),
    compute=_transpose_compute, gradient=_transpose_gradient,
    attrs=(Attr("axes", "optional_ints", None, doc="output axis i is input axis axes[i]; "
                "None reverses the axes"),),
    doc="x with its axes permuted by `axes` (reversed by default)",
    traits=Traits(transpose=True, quantize=SAME_SCALE_RESHAPE),
))

# ---- expand_dims ---------------------------------------------------------------------------


# A shape: NumPy's (ints) in the references, a type's (dims) in the relation.
Shape = TypeVariable("Shape", tuple[int, ...], tuple[Dim, ...])


def _expanded(shape: Shape, axis: int, num_newaxis: int) -> Shape:
    at = axis % (len(shape) + 1)
    return shape[:at] + (1,) * num_newaxis + shape[at:]


def _expand_dims_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "expand_dims: the input")
    attr_axis(ctx, "expand_dims", "axis", attrs.axis, t, t.ndim + 1)
    return TensorType(_expanded(shape_of(ctx, t), attrs.axis, attrs.num_newaxis), t.dtype)


def _expand_dims_gradient(call: Call, g: Expr) -> list[Expr]:
    """d expand_dims(x) = squeeze(g) on the inserted axes."""
    x, a = call.args[0], call.attrs
    if a.num_newaxis == 0:
        return [g]
    at = a.axis % (tensor_type(x).ndim + 1)
    return [squeeze(g, axis=tuple(range(at, at + a.num_newaxis)))]


def _expand_dims_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[o without the inserted axes]."""
    (x,) = inputs
    at, n = attrs.axis % (x.ndim + 1), attrs.num_newaxis
    return compute(out_type.concrete_shape(), lambda *o: x[o[:at] + o[at + n:]],
                   "T_expand_dims")


def _expand_dims_ref(xp: ArrayModule) -> Callable[[Array, int, int], Array]:
    def ref(x: Array, axis: int, num_newaxis: int) -> Array:
        return xp.reshape(x, _expanded(x.shape, axis, num_newaxis))

    return ref


expand_dims = register(OpDef(
    "expand_dims", ("data",), _expand_dims_rel, OpPattern.INJECTIVE,
    numpy_ref=_expand_dims_ref(np), jax_lower=_expand_dims_ref(jnp),
    compute=_expand_dims_compute, gradient=_expand_dims_gradient,
    attrs=(Attr("axis", "int", doc="where the new axes go, in -ndim-1 .. ndim"),
           Attr("num_newaxis", "int", 1, lambda n: "must be >= 0" if n < 0 else None,
                doc="how many size-1 axes to insert")),
    doc="x with `num_newaxis` size-1 axes inserted at `axis`",
    traits=Traits(quantize=SAME_SCALE_RESHAPE),
))

# ---- squeeze -------------------------------------------------------------------------------


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


def _squeeze_gradient(call: Call, g: Expr) -> list[Expr]:
    """d squeeze(x) = reshape_like(g, x)."""
    return [reshape_like(g, call.args[0])]


def _squeeze_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[o with 0 on the removed axes]."""
    (x,) = inputs
    removed = (tuple(d for d, e in enumerate(x.shape) if e == 1) if attrs.axis is None
               else te_norm_axes(attrs.axis, x.ndim))

    def f(*o: PrimExpr) -> PrimExpr:
        kept = iter(o)
        return x[tuple(const(0) if d in removed else next(kept) for d in range(x.ndim))]

    return compute(out_type.concrete_shape(), f, "T_squeeze")


def _squeeze_ref(xp: ArrayModule) -> Callable[[Array, tuple[int, ...] | None], Array]:
    def ref(x: Array, axis: tuple[int, ...] | None) -> Array:
        return xp.squeeze(x, axis)

    return ref


squeeze = register(OpDef(
    "squeeze", ("data",), _squeeze_rel, OpPattern.INJECTIVE,
    numpy_ref=_squeeze_ref(np), jax_lower=_squeeze_ref(jnp),
    compute=_squeeze_compute, gradient=_squeeze_gradient,
    attrs=(Attr("axis", "optional_ints", None, doc="size-1 axes to remove; None removes all"),),
    doc="x without the size-1 axes `axis` (all size-1 axes by default)",
    traits=Traits(quantize=SAME_SCALE_RESHAPE),
))

# ---- broadcast_to --------------------------------------------------------------------------


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


def _broadcast_to_gradient(call: Call, g: Expr) -> list[Expr]:
    """d broadcast_to(x) = collapse_sum_like(g, x): g summed over the broadcast axes."""
    return [collapse(g, call.args[0])]


def _broadcast_to_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[o right-aligned, 0 on x's size-1 axes]."""
    (x,) = inputs
    return compute(out_type.concrete_shape(), lambda *o: broadcast_read(x, o), "T_broadcast_to")


def _broadcast_to_ref(xp: ArrayModule) -> Callable[[Array, tuple[int, ...]], Array]:
    def ref(x: Array, shape: tuple[int, ...]) -> Array:
        return xp.broadcast_to(x, shape)

    return ref


broadcast_to = register(OpDef(
    "broadcast_to", ("data",), _broadcast_to_rel, OpPattern.BROADCAST,
    numpy_ref=_broadcast_to_ref(np), jax_lower=_broadcast_to_ref(jnp),
    compute=_broadcast_to_compute, gradient=_broadcast_to_gradient,
    attrs=(shape_attr("the target shape"),),
    doc="x broadcast (NumPy rules) to `shape`",
))

# ---- tile ----------------------------------------------------------------------------------


def _tiled(shape: tuple[Dim, ...], reps: tuple[int, ...]) -> tuple[Dim, ...]:
    """NumPy's tile shape: the shorter of shape and reps padded with leading 1s, times."""
    n = max(len(shape), len(reps))
    shape = (1,) * (n - len(shape)) + shape
    reps = (1,) * (n - len(reps)) + reps
    return tuple(d * r if isinstance(d, int) else d if r == 1 else AnyDim()
                 for d, r in zip(shape, reps))


def _tile_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "tile: the input")
    return TensorType(_tiled(shape_of(ctx, t), attrs.reps), t.dtype)


def _tile_gradient(call: Call, g: Expr) -> list[Expr]:
    """d tile(x, reps) = sum over the r axes of g reshaped to (r0, d0, r1, d1, ...)."""
    x = call.args[0]
    dims = static_dims(x, "tile")
    n = max(len(dims), len(call.attrs.reps))
    dims = (1,) * (n - len(dims)) + dims
    reps = (1,) * (n - len(call.attrs.reps)) + call.attrs.reps
    tiles = reshape(g, tuple(v for pair in zip(reps, dims) for v in pair))
    return [reshape_like(sum_(tiles, tuple(range(0, 2 * n, 2))), x)]


def _tile_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = x[o % x.shape on x's axes, the trailing ones of o]."""
    (x,) = inputs
    shape = out_type.concrete_shape()
    lead = len(shape) - x.ndim

    def f(*o: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = []
        for i, n in enumerate(x.shape):
            at = o[lead + i]
            index.append(const(0) if n == 1 else at if shape[lead + i] == n else at % n)
        return x[tuple(index)]

    return compute(shape, f, "T_tile")


def _tile_ref(xp: ArrayModule) -> Callable[[Array, tuple[int, ...]], Array]:
    def ref(x: Array, reps: tuple[int, ...]) -> Array:
        return xp.tile(x, reps)

    return ref


tile = register(OpDef(
    "tile", ("data",), _tile_rel, OpPattern.INJECTIVE,
    numpy_ref=_tile_ref(np), jax_lower=_tile_ref(jnp),
    compute=_tile_compute, gradient=_tile_gradient,
    attrs=(Attr("reps", "ints",
                check=lambda r: f"must be >= 0, got {r}" if any(v < 0 for v in r) else None,
                doc="repetitions per axis; the shorter of reps and x's shape gets leading 1s"),),
    doc="x repeated `reps` times along each axis, as numpy.tile",
))
