"""Ops that make a tensor from a shape: zeros, ones, full, zeros_like, ones_like, one_hot;
and shape_of and ndarray_size, a tensor's shape and size as tensors.

Only full and one_hot are differentiable (in their fill values); the others' results do not
depend on the values of their inputs.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Constant, Expr, const as ir_const
from relaydsl.ir.types import TensorType, Type, type_to_str
from relaydsl.op.grad_util import sum_, tensor_type, through_cast, zeros_for
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.registry import Array, ArrayModule, Attr, OpDef, OpPattern, Traits, ops, register
from relaydsl.op.transform.common import shape_attr
from relaydsl.te.expr import PrimExpr, cast, const, equal, select
from relaydsl.te.rules import ComputeRule
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import (
    INTEGER, RelationContext, identity_rel, require_dtype, shape_of as dims_of, tensor_arg,
)

# ---- zeros, ones ---------------------------------------------------------------------------


def _constant_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    return TensorType(attrs.shape, attrs.dtype)


def _filled(value: int) -> ComputeRule:
    """The compute rule of a tensor of `value`, of the attribute's dtype or the input's."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        dtype = inputs[0].dtype if inputs else attrs.dtype
        return compute(out_type.concrete_shape(), lambda *o: const(value, dtype),
                       "T_zeros" if value == 0 else "T_ones")

    return rule


_CONSTANT_ATTRS = (shape_attr("the result shape"),
                   Attr("dtype", "dtype", "float32", doc="the result dtype"))


def _zeros_jax(shape: tuple[int, ...], dtype: str) -> Array:
    return jnp.zeros(shape, dtype)


def _ones_jax(shape: tuple[int, ...], dtype: str) -> Array:
    return jnp.ones(shape, dtype)


zeros = register(OpDef(
    "zeros", (), _constant_rel, OpPattern.ELEMWISE,
    numpy_ref=np.zeros, jax_lower=_zeros_jax,
    compute=_filled(0), differentiable=False, attrs=_CONSTANT_ATTRS,
    doc="a tensor of zeros of `shape` and `dtype`",
))

ones = register(OpDef(
    "ones", (), _constant_rel, OpPattern.ELEMWISE,
    numpy_ref=np.ones, jax_lower=_ones_jax,
    compute=_filled(1), differentiable=False, attrs=_CONSTANT_ATTRS,
    doc="a tensor of ones of `shape` and `dtype`",
))

# ---- full ----------------------------------------------------------------------------------


def _full_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    fill = tensor_arg(ctx, args[0], "full: the fill value")
    if fill.ndim != 0:
        ctx.fail(f"full: the fill value must be a scalar tensor, got {type_to_str(fill)}")
    return TensorType(attrs.shape, attrs.dtype or fill.dtype)


def _full_gradient(call: Call, g: Expr) -> list[Expr]:
    """d full(v) = sum(g) cast to v's dtype (0 if the result is not float)."""
    v, dtype = call.args[0], call.attrs.dtype
    return [through_cast(sum_(g, None), v, dtype or tensor_type(v).dtype)]


def _full_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = the fill value, cast to the result dtype."""
    (fill,) = inputs
    dtype = attrs.dtype or fill.dtype
    value = fill[()] if dtype == fill.dtype else cast(dtype, fill[()])
    return compute(out_type.concrete_shape(), lambda *o: value, "T_full")


def _full_ref(xp: ArrayModule) -> Callable[[Array, tuple[int, ...], str | None], Array]:
    def ref(v: Array, shape: tuple[int, ...], dtype: str | None) -> Array:
        return xp.full(shape, v, dtype or v.dtype)

    return ref


full = register(OpDef(
    "full", ("fill_value",), _full_rel, OpPattern.BROADCAST,
    numpy_ref=_full_ref(np), jax_lower=_full_ref(jnp),
    compute=_full_compute, gradient=_full_gradient,
    attrs=(shape_attr("the result shape"),
           Attr("dtype", "optional_dtype", None, doc="the result dtype; None is fill_value's")),
    doc="a tensor of `shape` filled with the scalar fill_value, converted to `dtype`",
))

# ---- zeros_like, ones_like -----------------------------------------------------------------

def _zeros_like_jax(x: Array) -> Array:
    return jnp.zeros_like(x)


def _ones_like_jax(x: Array) -> Array:
    return jnp.ones_like(x)


# The largest result (bytes) a *_like call of a static type folds into (a page): a bigger
# constant would be memory the program holds and its kernel reads, where the call computes
# its values in the kernel it fuses into.
_FOLDED_LIKE_BYTES = 4096


def _filled_from_types(value: int) -> Callable[[Call, Sequence[Type]], Expr | None]:
    """zeros_like(x) / ones_like(x) of a small, statically shaped x: the constant, which no
    longer reads x. The seed of a gradient, ones_like(loss), would otherwise keep the loss
    computed (a kernel, at run time and in the build) where only the gradients are used."""

    def fold(call: Call, arg_types: Sequence[Type]) -> Expr | None:
        t = arg_types[0]
        if not (isinstance(t, TensorType) and t.is_static and isinstance(t.dtype, str)):
            return None
        shape = t.concrete_shape()
        if math.prod(shape) * np.dtype(t.dtype).itemsize > _FOLDED_LIKE_BYTES:
            return None
        return Constant(np.full(shape, value, t.dtype), span=call.span)

    return fold


zeros_like = register(OpDef(
    "zeros_like", ("data",), identity_rel, OpPattern.ELEMWISE,
    numpy_ref=np.zeros_like, jax_lower=_zeros_like_jax,
    compute=_filled(0), differentiable=False, doc="zeros of x's shape and dtype",
    traits=Traits(fold_from_types=_filled_from_types(0)),
))

ones_like = register(OpDef(
    "ones_like", ("data",), identity_rel, OpPattern.ELEMWISE,
    numpy_ref=np.ones_like, jax_lower=_ones_like_jax,
    compute=_filled(1), differentiable=False, doc="ones of x's shape and dtype",
    traits=Traits(fold_from_types=_filled_from_types(1)),
))

# ---- shape_of ------------------------------------------------------------------------------


def _shape_of_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "shape_of: the input")
    return TensorType((t.ndim,), "int32")


def _shape_of_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """The static shape as a constant int32 vector."""
    (x,) = inputs

    def f(i: PrimExpr) -> PrimExpr:
        body = const(x.shape[-1], "int32") if x.shape else const(0, "int32")
        for d in range(x.ndim - 2, -1, -1):
            body = select(equal(i, d), const(x.shape[d], "int32"), body)
        return body

    return compute(out_type.concrete_shape(), f, "T_shape_of")


def _shape_of_from_types(call: Call, arg_types: Sequence[Type]) -> Expr | None:
    """shape_of(x) of a statically shaped x: the shape, a constant int32 vector."""
    t = arg_types[0]
    if isinstance(t, TensorType) and t.is_static:
        return Constant(np.array(t.shape, np.int32), span=call.span)
    return None


def _shape_of_numpy(x: Array) -> Array:
    return np.array(np.shape(x), np.int32)


def _shape_of_jax(x: Array) -> Array:
    return jnp.array(x.shape, jnp.int32)


shape_of = register(OpDef(
    "shape_of", ("data",), _shape_of_rel, OpPattern.OPAQUE,
    numpy_ref=_shape_of_numpy, jax_lower=_shape_of_jax,
    compute=_shape_of_compute, differentiable=False,
    doc="the shape of x as a 1-D int32 tensor (loops over a tensor's first axis use it)",
    traits=Traits(fold_from_types=_shape_of_from_types),
))

# ---- ndarray_size --------------------------------------------------------------------------


def _ndarray_size_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    tensor_arg(ctx, args[0], "ndarray_size: the input")
    return TensorType((), attrs.dtype)


def _ndarray_size_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """The static element count as a constant scalar."""
    return compute((), lambda: const(math.prod(inputs[0].shape), attrs.dtype), "T_ndarray_size")


def _ndarray_size_from_types(call: Call, arg_types: Sequence[Type]) -> Expr | None:
    """ndarray_size(x) of a statically shaped x: the element count, a constant scalar."""
    t = arg_types[0]
    if isinstance(t, TensorType) and t.is_static:
        return Constant(np.array(math.prod(t.concrete_shape()), call.attrs.dtype), span=call.span)
    return None


def _ndarray_size_numpy(x: Array, dtype: str) -> Array:
    return np.array(np.size(x), dtype)


def _ndarray_size_jax(x: Array, dtype: str) -> Array:
    return jnp.array(x.size, dtype)


ndarray_size = register(OpDef(
    "ndarray_size", ("data",), _ndarray_size_rel, OpPattern.OPAQUE,
    numpy_ref=_ndarray_size_numpy, jax_lower=_ndarray_size_jax,
    compute=_ndarray_size_compute, differentiable=False,
    attrs=(Attr("dtype", "dtype", "int32", doc="the result dtype"),),
    doc="the number of elements of x, a scalar of `dtype`",
    traits=Traits(fold_from_types=_ndarray_size_from_types),
))

# ---- one_hot -------------------------------------------------------------------------------


def _one_hot_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    indices = tensor_arg(ctx, args[0], "one_hot: the indices")
    require_dtype(ctx, "one_hot", "the indices", indices, INTEGER)
    for arg, what in zip(args[1:], ("on_value", "off_value")):
        value = tensor_arg(ctx, arg, f"one_hot: {what}")
        if value.ndim != 0:
            ctx.fail(f"one_hot: {what} must be a scalar, got {type_to_str(value)}")
    shape = dims_of(ctx, indices)
    if not -len(shape) - 1 <= attrs.axis <= len(shape):
        ctx.fail(f"one_hot: attribute 'axis' = {attrs.axis} is out of range for the "
                 f"{len(shape) + 1}-D result")
    axis = attrs.axis % (len(shape) + 1)
    return TensorType((*shape[:axis], attrs.depth, *shape[axis:]), attrs.dtype)


def _one_hot_reference(
        xp: ArrayModule) -> Callable[[Array, Array, Array, int, int, str], Array]:
    """The NumPy reference (xp = numpy) or the JAX lowering (xp = jax.numpy)."""

    def ref(indices: Array, on: Array, off: Array, depth: int, axis: int, dtype: str) -> Array:
        axis %= indices.ndim + 1
        positions = xp.arange(depth).reshape((depth,) + (1,) * (indices.ndim - axis))
        hit = xp.expand_dims(indices, axis) == positions
        return xp.where(hit, xp.asarray(on).astype(dtype), xp.asarray(off).astype(dtype))

    return ref


def _one_hot_gradient(call: Call, g: Expr) -> list[Expr]:
    """d one_hot(i, on, off) = (0, sum(g where hit), sum(g where not hit)), through the casts."""
    indices, on, off = call.args
    a = call.attrs
    hit = one_hot(indices, ir_const(True), ir_const(False), a.depth, a.axis, "bool")
    zero = ir_const(0, a.dtype)
    return [zeros_for(indices),
            through_cast(sum_(ops.where(hit, g, zero), None), on, a.dtype),
            through_cast(sum_(ops.where(hit, zero, g), None), off, a.dtype)]


def _one_hot_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = on where indices[o without the axis] == o[axis], else off."""
    indices, on, off = inputs
    shape = out_type.concrete_shape()
    axis: int = attrs.axis % len(shape)

    def f(*o: PrimExpr) -> PrimExpr:
        i = indices[o[:axis] + o[axis + 1:]]
        if i.dtype not in ("int32", "int64"):  # room for depth - 1
            i = cast("int32", i)
        k = o[axis] if i.dtype == "int32" else cast(i.dtype, o[axis])
        return select(equal(i, k), cast(attrs.dtype, on[()]), cast(attrs.dtype, off[()]))

    return compute(shape, f, "T_one_hot")


one_hot = register(OpDef(
    "one_hot", ("indices", "on_value", "off_value"), _one_hot_rel, OpPattern.INJECTIVE,
    numpy_ref=_one_hot_reference(np),
    jax_lower=_one_hot_reference(jnp),
    compute=_one_hot_compute, gradient=_one_hot_gradient,
    attrs=(Attr("depth", "int", check=lambda d: f"must be >= 0, got {d}" if d < 0 else None,
                doc="the size of the one-hot axis"),
           Attr("axis", "int", -1, doc="where the one-hot axis goes; -1: last"),
           Attr("dtype", "dtype", "float32", doc="the result dtype")),
    doc="on_value where the one-hot axis's position equals the index, off_value elsewhere "
        "(indices outside 0 .. depth-1 give all off_value), as TVM's one_hot",
))
