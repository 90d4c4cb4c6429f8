"""Ops that make a tensor from a shape: zeros, ones, full, zeros_like, ones_like, and
shape_of, a tensor's shape as a tensor.

Only full is differentiable (in its fill value); the others' results do not depend on the
values of their inputs.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Constant, Expr
from relaydsl.ir.types import TensorType, Type, type_to_str
from relaydsl.op.grad_util import sum_, tensor_type, through_cast
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.registry import Attr, OpDef, OpPattern, Traits, register
from relaydsl.op.transform.common import shape_attr
from relaydsl.te.expr import PrimExpr, cast, const, equal, select
from relaydsl.te.rules import ComputeRule
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import RelationContext, identity_rel, tensor_arg

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

zeros = register(OpDef(
    "zeros", (), _constant_rel, OpPattern.ELEMWISE,
    numpy_ref=np.zeros, jax_lower=lambda shape, dtype: jnp.zeros(shape, dtype),
    compute=_filled(0), differentiable=False, attrs=_CONSTANT_ATTRS,
    doc="a tensor of zeros of `shape` and `dtype`",
))

ones = register(OpDef(
    "ones", (), _constant_rel, OpPattern.ELEMWISE,
    numpy_ref=np.ones, jax_lower=lambda shape, dtype: jnp.ones(shape, dtype),
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


full = register(OpDef(
    "full", ("fill_value",), _full_rel, OpPattern.BROADCAST,
    numpy_ref=lambda v, shape, dtype: np.full(shape, v, dtype or v.dtype),
    jax_lower=lambda v, shape, dtype: jnp.full(shape, v, dtype or v.dtype),
    compute=_full_compute, gradient=_full_gradient,
    attrs=(shape_attr("the result shape"),
           Attr("dtype", "optional_dtype", None, doc="the result dtype; None is fill_value's")),
    doc="a tensor of `shape` filled with the scalar fill_value, converted to `dtype`",
))

# ---- zeros_like, ones_like -----------------------------------------------------------------

zeros_like = register(OpDef(
    "zeros_like", ("data",), identity_rel, OpPattern.ELEMWISE,
    numpy_ref=np.zeros_like, jax_lower=lambda x: jnp.zeros_like(x),
    compute=_filled(0), differentiable=False, doc="zeros of x's shape and dtype",
))

ones_like = register(OpDef(
    "ones_like", ("data",), identity_rel, OpPattern.ELEMWISE,
    numpy_ref=np.ones_like, jax_lower=lambda x: jnp.ones_like(x),
    compute=_filled(1), differentiable=False, doc="ones of x's shape and dtype",
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


shape_of = register(OpDef(
    "shape_of", ("data",), _shape_of_rel, OpPattern.OPAQUE,
    numpy_ref=lambda x: np.array(np.shape(x), np.int32),
    jax_lower=lambda x: jnp.array(x.shape, jnp.int32),
    compute=_shape_of_compute, differentiable=False,
    doc="the shape of x as a 1-D int32 tensor (loops over a tensor's first axis use it)",
    traits=Traits(fold_from_types=_shape_of_from_types),
))
