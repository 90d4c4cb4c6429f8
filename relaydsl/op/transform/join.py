"""Ops that join tensors or cut one into pieces: concatenate, stack and split.

concatenate and stack take one tuple-typed input (a Python tuple of arrays at run time; in a
compute rule, its fields as separate te tensors); split returns a tuple. Dims that pass
through stay symbolic; a concatenated axis of a symbolic dim is ``Any``.
"""
from __future__ import annotations

import functools
from itertools import accumulate, pairwise
from typing import Any as AnyValue, Callable, Sequence, cast

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, Tuple, TupleGetItem
from relaydsl.ir.types import AnyDim, TensorType, TupleType, Type, type_to_str
from relaydsl.op.grad_util import END, add, arg_type, tensor_type
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.quantize_rule import COMMON_SCALE
from relaydsl.op.registry import Array, ArrayModule, Attr, OpDef, OpPattern, Traits, register
from relaydsl.op.transform.common import along, as_tuple
from relaydsl.op.transform.index import strided_slice, strided_slice_grad
from relaydsl.op.transform.shape import reshape_like
from relaydsl.op.transform.shape import squeeze
from relaydsl.te.expr import PrimExpr, equal, select
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import (
    RelationContext, attr_axis, known_sum, same_dtype, shape_of, slice_dim, tensor_arg,
    tensor_tuple_arg,
)


def _same_rank(ctx: RelationContext, op: str, tuple_type: Type, ts: list[TensorType]) -> None:
    if not ts:
        ctx.fail(f"{op}: the input must hold at least one tensor, got {type_to_str(tuple_type)}")
    if any(t.ndim != ts[0].ndim for t in ts):
        ctx.fail(f"{op}: the tensors must have the same rank, got {type_to_str(tuple_type)}")


def _fields(t: Type) -> int:
    """How many tensors a tuple-typed argument holds."""
    assert isinstance(t, TupleType)
    return len(t.fields)


def _tensors(inputs: list[Tensor]) -> list[Tensor]:
    """The fields of a tuple-typed argument (flattened, or still one Python tuple)."""
    first = cast(object, inputs[0]) if len(inputs) == 1 else None  # (typed a Tensor)
    if isinstance(first, (tuple, list)):
        return list(cast("Sequence[Tensor]", first))
    return list(inputs)


# ---- concatenate ---------------------------------------------------------------------------


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


def _concatenate_gradient(call: Call, g: Expr) -> list[Expr]:
    """d concatenate(xs) = (the pieces of g where the inputs meet,), one of run-time size."""
    # One input's size along the axis may be known only at run time (a sequence grown in a
    # loop): the pieces before it are cut from g's start, those after it from g's end, and
    # it is what lies between.
    xs = call.args[0]
    axis: int = call.attrs.axis
    n = _fields(arg_type(xs))
    axis %= tensor_type(TupleGetItem(xs, 0)).ndim
    sizes = [tensor_type(TupleGetItem(xs, i)).shape[axis] for i in range(n)]
    known = [d for d in sizes if isinstance(d, int)]
    unknown = [i for i, d in enumerate(sizes) if not isinstance(d, int)]
    if not unknown:
        pieces = split(g, indices_or_sections=tuple(np.cumsum(known[:-1]).tolist()), axis=axis)
        return [Tuple(tuple(TupleGetItem(pieces, i) for i in range(n)))]
    if len(unknown) > 1:
        raise IRError(f"the gradient of concatenate takes at most one input whose size along "
                      f"axis {axis} is known only at run time; inputs {unknown[0]} and "
                      f"{unknown[1]} are of sizes {sizes[unknown[0]]} and {sizes[unknown[1]]}")
    k = unknown[0]  # the one unknown size: known[:k] are the sizes before it, known[k:] after
    # [begin, end) of each piece along the axis, an end counted from g's end when negative
    bounds: list[tuple[int, int]] = []
    at = 0
    for d in known[:k]:
        bounds.append((at, at + d))
        at += d
    after = sum(known[k:])
    bounds.append((at, -after if after else END))
    for d in known[k:]:
        bounds.append((-after, -(after - d) if after - d else END))
        after -= d
    pieces = [strided_slice(g, begin=(b,), end=(e,), axes=(axis,)) for b, e in bounds]
    pieces[k] = reshape_like(pieces[k], TupleGetItem(xs, k))  # x's type: its size variable
    return [Tuple(tuple(pieces))]


def _concatenate_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = the input holding position o[axis], read at o[axis] less that input's start."""
    ts = _tensors(inputs)
    axis: int = attrs.axis % ts[0].ndim
    ts = [t for t in ts if t.shape[axis]] or ts[:1]  # an empty piece adds nothing
    ends = list(accumulate(t.shape[axis] for t in ts))

    def f(*o: PrimExpr) -> PrimExpr:
        def read(n: int) -> PrimExpr:
            start = ends[n] - ts[n].shape[axis]
            at = o[axis] if start == 0 else o[axis] - start
            return ts[n][(*o[:axis], at, *o[axis + 1:])]

        body = read(len(ts) - 1)
        for n in range(len(ts) - 2, -1, -1):
            body = select(o[axis] < ends[n], read(n), body)
        return body

    return compute(out_type.concrete_shape(), f, "T_concatenate")


def _concatenate_ref(xp: ArrayModule) -> Callable[[tuple[Array, ...], int], Array]:
    def ref(data: tuple[Array, ...], axis: int) -> Array:
        return xp.concatenate(data, axis)

    return ref


concatenate = register(OpDef(
    "concatenate", ("data",), _concatenate_rel, OpPattern.INJECTIVE,
    numpy_ref=_concatenate_ref(np), jax_lower=_concatenate_ref(jnp),
    compute=_concatenate_compute, gradient=_concatenate_gradient,
    attrs=(Attr("axis", "int", 0, doc="the axis to join along"),),
    doc="the tensors of a tuple joined along an existing axis",
    traits=Traits(quantize=COMMON_SCALE),
))

# ---- split ---------------------------------------------------------------------------------


def _split_check(v: int | tuple[int, ...]) -> str | None:
    return "the number of sections must be >= 1" if isinstance(v, int) and v < 1 else None


def _pieces(size: int, indices_or_sections: int | tuple[int, ...]) -> list[slice]:
    """The slices numpy.split cuts an axis of `size` into (sections must divide `size`)."""
    if isinstance(indices_or_sections, int):
        step = size // indices_or_sections
        return [slice(i * step, (i + 1) * step) for i in range(indices_or_sections)]
    cuts = (0, *indices_or_sections, None)
    return [slice(lo, hi) for lo, hi in pairwise(cuts)]


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
    return TupleType(tuple(TensorType((*shape[:axis], d, *shape[axis + 1:]), t.dtype)
                           for d in sizes))


def _split_reference(x: AnyValue, indices_or_sections: int | tuple[int, ...],
                     axis: int) -> tuple[AnyValue, ...]:
    return tuple(x[along(axis, x.ndim, s)] for s in _pieces(x.shape[axis], indices_or_sections))


def _split_gradient(call: Call, g: Expr) -> list[Expr]:
    """d split(x) = concatenate(g); if pieces overlap, the sum of each g[i] put in its place."""
    x, how, axis = call.args[0], call.attrs.indices_or_sections, call.attrs.axis
    if isinstance(how, int) or (min(how, default=0) >= 0 and list(how) == sorted(how)):
        return [concatenate(g, axis=axis)]
    cuts = (0, *how, END)  # cuts out of order (or from the end): pieces may overlap
    placed = [strided_slice_grad(TupleGetItem(g, i), x, begin=(lo,), end=(hi,), axes=(axis,))
              for i, (lo, hi) in enumerate(pairwise(cuts))]
    return [functools.reduce(add, placed)]


def _split_compute(attrs: Attrs, inputs: list[Tensor],
                   out_type: TupleType) -> tuple[Tensor, ...]:
    """One tensor per piece (numpy.split's), reading x shifted by the piece's start."""
    (x,) = inputs
    axis: int = attrs.axis % x.ndim
    how: int | tuple[int, ...] = attrs.indices_or_sections
    size = x.shape[axis]
    cuts = ([size // how * i for i in range(how + 1)] if isinstance(how, int)
            else [0, *as_tuple(how), size])
    pieces: list[Tensor] = []
    for n, (lo, hi) in enumerate(pairwise(cuts)):
        start, stop, _ = slice(lo, hi).indices(size)

        def f(*o: PrimExpr, start: int = start) -> PrimExpr:
            return x[(*o[:axis], o[axis] + start if start else o[axis], *o[axis + 1:])]

        shape = (*x.shape[:axis], max(stop - start, 0), *x.shape[axis + 1:])
        pieces.append(compute(shape, f, f"T_split_{n}"))
    return tuple(pieces)


def _split_arity(attrs: Attrs) -> int | None:
    """n sections give n pieces, n cut indices n + 1; None when the attribute is unknown."""
    how = attrs.get("indices_or_sections")
    if isinstance(how, int):
        return how
    if isinstance(how, (tuple, list)):
        return len(cast("Sequence[object]", how)) + 1  # (isinstance leaves its items unknown)
    return None


split = register(OpDef(
    "split", ("data",), _split_rel, OpPattern.INJECTIVE,
    numpy_ref=_split_reference, jax_lower=_split_reference,
    compute=_split_compute, gradient=_split_gradient,
    attrs=(Attr("indices_or_sections", "int_or_ints", check=_split_check,
                doc="a number of equal sections, or the indices to cut at"),
           Attr("axis", "int", 0, doc="the axis to cut")),
    doc="a tuple of pieces of x cut along `axis`, as numpy.split cuts",
    traits=Traits(result_arity=_split_arity),
))

# ---- stack ---------------------------------------------------------------------------------


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


def _stack_gradient(call: Call, g: Expr) -> list[Expr]:
    """d stack(xs) = (the slices of g along the new axis, each squeezed,)."""
    xs = call.args[0]
    axis: int = call.attrs.axis
    n = _fields(arg_type(xs))
    pieces = split(g, indices_or_sections=n, axis=axis)
    return [Tuple(tuple(squeeze(TupleGetItem(pieces, i), axis=(axis,)) for i in range(n)))]


def _stack_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = the input numbered o[axis], read at o without the new axis."""
    ts = _tensors(inputs)
    axis: int = attrs.axis % (ts[0].ndim + 1)

    def f(*o: PrimExpr) -> PrimExpr:
        rest = o[:axis] + o[axis + 1:]
        body = ts[-1][rest]
        for n in range(len(ts) - 2, -1, -1):
            body = select(equal(o[axis], n), ts[n][rest], body)
        return body

    return compute(out_type.concrete_shape(), f, "T_stack")


def _stack_ref(xp: ArrayModule) -> Callable[[tuple[Array, ...], int], Array]:
    def ref(data: tuple[Array, ...], axis: int) -> Array:
        return xp.stack(data, axis)

    return ref


stack = register(OpDef(
    "stack", ("data",), _stack_rel, OpPattern.INJECTIVE,
    numpy_ref=_stack_ref(np), jax_lower=_stack_ref(jnp),
    compute=_stack_compute, gradient=_stack_gradient,
    attrs=(Attr("axis", "int", 0, doc="the position of the new axis, in -ndim-1 .. ndim"),),
    doc="the equally shaped tensors of a tuple joined along a new axis",
))
