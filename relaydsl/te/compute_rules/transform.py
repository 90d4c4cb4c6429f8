"""Compute rules of the shape transformations and constructors (relaydsl/op/transform.py).

Every rule here is a pure index mapping: the output element at ``o`` reads
one input element (or a constant). reshape and flatten go through the
row-major flat position, concatenate selects among its inputs by the offset
along the axis, take clamps or wraps its indices as ``mode`` says.
"""
from __future__ import annotations

import math
from itertools import accumulate

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.te.compute_rules.elementwise import ComputeRule, broadcast_read
from relaydsl.te.compute_rules.indexing import norm_axes, ravel, unravel
from relaydsl.te.expr import PrimExpr, cast, const, maximum, minimum, select
from relaydsl.te.tensor import Tensor, compute


def _as_tuple(v: int | tuple[int, ...]) -> tuple[int, ...]:
    return (v,) if isinstance(v, int) else tuple(v)


def reshape_rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, shape = inputs[0], out_type.concrete_shape()  # reshape_like: inputs[1] gives the shape
    if shape == x.shape:
        return compute(shape, lambda *o: x[o], "T_reshape")
    return compute(shape, lambda *o: x[unravel(ravel(o, shape), x.shape)], "T_reshape")


def _transpose(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    axes = (tuple(range(x.ndim))[::-1] if attrs.axes is None
            else tuple(a % x.ndim for a in _as_tuple(attrs.axes)))

    def f(*o: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = [const(0)] * x.ndim
        for i, a in enumerate(axes):
            index[a] = o[i]
        return x[tuple(index)]

    return compute(out_type.concrete_shape(), f, "T_transpose")


def _expand_dims(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    at, n = attrs.axis % (x.ndim + 1), attrs.num_newaxis
    return compute(out_type.concrete_shape(), lambda *o: x[o[:at] + o[at + n:]],
                   "T_expand_dims")


def _squeeze(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    removed = (tuple(d for d, e in enumerate(x.shape) if e == 1) if attrs.axis is None
               else norm_axes(attrs.axis, x.ndim))

    def f(*o: PrimExpr) -> PrimExpr:
        kept = iter(o)
        return x[tuple(const(0) if d in removed else next(kept) for d in range(x.ndim))]

    return compute(out_type.concrete_shape(), f, "T_squeeze")


def _broadcast_to(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    return compute(out_type.concrete_shape(), lambda *o: broadcast_read(x, o), "T_broadcast_to")


def _concatenate(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    ts = list(inputs[0]) if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)) else inputs
    axis = attrs.axis % ts[0].ndim
    ts = [t for t in ts if t.shape[axis]] or ts[:1]  # an empty piece adds nothing
    ends = list(accumulate(t.shape[axis] for t in ts))

    def f(*o: PrimExpr) -> PrimExpr:
        def read(n: int) -> PrimExpr:
            start = ends[n] - ts[n].shape[axis]
            at = o[axis] if start == 0 else o[axis] - start
            return ts[n][o[:axis] + (at,) + o[axis + 1:]]

        body = read(len(ts) - 1)
        for n in range(len(ts) - 2, -1, -1):
            body = select(o[axis] < ends[n], read(n), body)
        return body

    return compute(out_type.concrete_shape(), f, "T_concatenate")


def _strided_slice(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    n = len(attrs.begin)
    strides = (1,) * n if attrs.strides is None else _as_tuple(attrs.strides)
    axes = tuple(range(n)) if attrs.axes is None else _as_tuple(attrs.axes)
    starts: dict[int, tuple[int, int]] = {}
    for a, b, e, s in zip(axes, attrs.begin, attrs.end, strides):
        start, _, step = slice(b, e, s).indices(x.shape[a % x.ndim])
        starts[a % x.ndim] = (start, step)

    def f(*o: PrimExpr) -> PrimExpr:
        index = []
        for d, i in enumerate(o):
            start, step = starts.get(d, (0, 1))
            i = i if step == 1 else i * step
            index.append(i if start == 0 else i + start)
        return x[tuple(index)]

    return compute(out_type.concrete_shape(), f, "T_strided_slice")


def _take(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, indices = inputs
    k = indices.ndim
    n = math.prod(x.shape) if attrs.axis is None else x.shape[attrs.axis % x.ndim]

    def position(i: PrimExpr) -> PrimExpr:
        if i.dtype in ("int8", "int16", "uint8"):  # room for n - 1
            i = cast("int32", i)
        return minimum(maximum(i, 0), n - 1) if attrs.mode == "clip" else i % n

    if attrs.axis is None:
        return compute(out_type.concrete_shape(),
                       lambda *o: x[unravel(position(indices[o]), x.shape)], "T_take")
    axis = attrs.axis % x.ndim
    return compute(out_type.concrete_shape(), lambda *o: x[
        o[:axis] + (position(indices[o[axis:axis + k]]),) + o[axis + k:]], "T_take")


def _constant(value: int):
    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        dtype = inputs[0].dtype if inputs else attrs.dtype
        return compute(out_type.concrete_shape(), lambda *o: const(value, dtype),
                       "T_zeros" if value == 0 else "T_ones")

    return rule


def _full(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (fill,) = inputs
    dtype = attrs.dtype or fill.dtype
    value = fill[()] if dtype == fill.dtype else cast(dtype, fill[()])
    return compute(out_type.concrete_shape(), lambda *o: value, "T_full")


RULES: dict[str, ComputeRule] = {
    "reshape": reshape_rule, "reshape_like": reshape_rule, "transpose": _transpose,
    "expand_dims": _expand_dims, "squeeze": _squeeze, "broadcast_to": _broadcast_to,
    "concatenate": _concatenate, "strided_slice": _strided_slice, "take": _take,
    "zeros": _constant(0), "ones": _constant(1), "zeros_like": _constant(0),
    "ones_like": _constant(1), "full": _full,
}
