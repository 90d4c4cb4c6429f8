"""Ops that move a tensor's elements without computing on them: pad, dilate, flatten.

All are injective: each output element reads one input element (or, for pad and dilate, the
constant).
"""
from __future__ import annotations

import math

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import Any, Dim, TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp, lax
from relaydsl.op.nn.common import Array, ArrayModule, Inputs, all_positive, non_negative
from relaydsl.op.quantize_rule import SAME_SCALE_RESHAPE
from relaydsl.op.registry import REQUIRED, Attr, OpDef, OpPattern, Traits, ops, register
from relaydsl.te.expr import PrimExpr, const, equal, select
from relaydsl.te.indexing import reindex
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import ANY_DTYPE, RelationContext, known_product

# ---- pad ----------------------------------------------------------------------------------------


def _pad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "pad", args, ("data",))
    shape, widths = c.shape(0, min_rank=1), attrs.pad_width
    if len(widths) != 2 * len(shape):
        c.fail(f"pad_width has {len(widths)} values; {c.arg(0)} needs 2 per axis "
               f"(before0, after0, before1, ...) = {2 * len(shape)}")
    out: list[Dim] = []
    for d, before, after in zip(shape, widths[0::2], widths[1::2]):
        if isinstance(d, int):
            out.append(d + before + after)
        else:
            out.append(d if before == after == 0 else Any)
    return c.tensor(out)


def _pad(xp: ArrayModule, data: Array, pad_width: tuple[int, ...], pad_value: float) -> Array:
    pairs = list(zip(pad_width[0::2], pad_width[1::2]))
    return xp.pad(data, pairs, constant_values=pad_value)


def _pad_np(data: Array, *, pad_width: tuple[int, ...], pad_value: float) -> Array:
    return _pad(np, data, pad_width, pad_value)


def _pad_jax(data: Array, *, pad_width: tuple[int, ...], pad_value: float) -> Array:
    return _pad(jnp, data, pad_width, pad_value)


def _pad_grad(call: Call, g: Expr) -> list[Expr]:
    """d pad(x) = g[before:-after] on every axis."""
    widths = call.attrs.pad_width
    ends = tuple(-after if after else gu.END for after in widths[1::2])
    return [ops.strided_slice(g, begin=widths[0::2], end=ends)]


def _pad_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    befores = attrs.pad_width[0::2]

    def f(*o: PrimExpr) -> PrimExpr:
        index = tuple(i - b if b else i for i, b in zip(o, befores))
        inside = None
        for d, (i, b, a) in enumerate(zip(index, befores, attrs.pad_width[1::2])):
            conds = ([i >= 0] if b else []) + ([i < x.shape[d]] if a else [])
            for c in conds:
                inside = c if inside is None else inside & c
        v = x[index]
        return v if inside is None else select(inside, v, const(attrs.pad_value, x.dtype))

    return compute(out_type.concrete_shape(), f, "T_pad")


pad = register(OpDef(
    "pad", ("data",), _pad_rel, OpPattern.INJECTIVE,
    numpy_ref=_pad_np, jax_lower=_pad_jax, compute=_pad_compute, gradient=_pad_grad,
    attrs=(Attr("pad_width", "ints", REQUIRED, non_negative, "2 values per axis"),
           Attr("pad_value", "float", 0.0, doc="the value of the new elements")),
    doc="constant padding: pad_width = (before0, after0, before1, after1, ...)",
))

# ---- dilate -------------------------------------------------------------------------------------


def _dilate_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "dilate", args, ("data",))
    shape, strides = c.shape(0), attrs.strides
    if len(strides) != len(shape):
        c.fail(f"strides has {len(strides)} values; {c.arg(0)} needs one per axis")
    out: list[Dim] = []
    for d, s in zip(shape, strides):
        if isinstance(d, int):
            out.append((d - 1) * s + 1 if d else 0)
        else:
            out.append(d if s == 1 else Any)
    return c.tensor(out)


def _dilate_np(data: Array, *, strides: tuple[int, ...], dilation_value: float) -> Array:
    shape = [(d - 1) * s + 1 if d else 0 for d, s in zip(data.shape, strides)]
    out = np.full(shape, dilation_value, data.dtype)
    out[tuple(slice(None, None, s) for s in strides)] = data
    return out


def _dilate_jax(data: Array, *, strides: tuple[int, ...], dilation_value: float) -> Array:
    interior = [(0, 0, s - 1) for s in strides]
    return lax.pad(data, jnp.asarray(dilation_value, data.dtype), interior)


def _dilate_grad(call: Call, g: Expr) -> list[Expr]:
    """d dilate(x) = g[::strides] on every axis."""
    strides = call.attrs.strides
    return [ops.strided_slice(g, begin=(0,) * len(strides), end=(gu.END,) * len(strides),
                              strides=strides)]


def _dilate_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs

    def f(*o: PrimExpr) -> PrimExpr:
        on_grid = None  # whether every index is a multiple of its stride
        for i, s in zip(o, attrs.strides):
            if s > 1:
                here = equal(i % s, 0)
                on_grid = here if on_grid is None else on_grid & here
        v = x[tuple(i // s if s > 1 else i for i, s in zip(o, attrs.strides))]
        return v if on_grid is None else select(on_grid, v, const(attrs.dilation_value, x.dtype))

    return compute(out_type.concrete_shape(), f, "T_dilate")


dilate = register(OpDef(
    "dilate", ("data",), _dilate_rel, OpPattern.INJECTIVE,
    numpy_ref=_dilate_np, jax_lower=_dilate_jax, compute=_dilate_compute, gradient=_dilate_grad,
    attrs=(Attr("strides", "ints", REQUIRED, all_positive, "one per axis"),
           Attr("dilation_value", "float", 0.0, doc="the value of the new elements")),
    doc="strides[i] - 1 elements of dilation_value between neighbours along each axis i: "
        "(d - 1) * s + 1 elements",
))

# ---- flatten ------------------------------------------------------------------------------------


def _flatten_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "flatten", args, ("data",), ANY_DTYPE)  # integers too: quantized maps
    first, *rest = c.shape(0, min_rank=1)
    return c.tensor((first, rest[0] if len(rest) == 1 else known_product(rest)))


def _flatten_np(data: Array) -> Array:
    return np.reshape(data, (data.shape[0], math.prod(data.shape[1:])))


def _flatten_jax(data: Array) -> Array:
    return jnp.reshape(data, (data.shape[0], math.prod(data.shape[1:])))


def _flatten_grad(call: Call, g: Expr) -> list[Expr]:
    """d flatten(x) = reshape_like(g, x)."""
    return [ops.reshape_like(g, call.args[0])]


def _flatten_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    shape = out_type.concrete_shape()
    if shape == x.shape:
        return compute(shape, lambda *o: x[o], "T_flatten")
    return compute(shape, lambda *o: x[reindex(o, shape, x.shape)], "T_flatten")


flatten = register(OpDef(
    "flatten", ("data",), _flatten_rel, OpPattern.INJECTIVE,
    numpy_ref=_flatten_np, jax_lower=_flatten_jax, compute=_flatten_compute,
    gradient=_flatten_grad, doc="(d0, d1, ..., dn) -> (d0, d1 * ... * dn)",
    traits=Traits(quantize=SAME_SCALE_RESHAPE),
))
