"""Compute rules of the shape transformations and constructors (relaydsl/op/transform.py).

Most rules here are pure index mappings: the output element at ``o`` reads
one input element (or a constant). reshape and flatten go through the
row-major flat position, concatenate and stack select among their inputs (a
tuple argument arrives as its fields) by the position along the axis, take
clamps or wraps its indices as ``mode`` says, split returns one tensor per
piece and shape_of a constant vector. The adjoints scatter: strided_slice_grad
reads out_grad where ``o`` is on the slice's grid (0 elsewhere), and take_grad
sums out_grad over the index positions that take to ``o``, in order (repeated
indices accumulate, as numpy.add.at does).
"""
from __future__ import annotations

import math
from itertools import accumulate

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType, TupleType
from relaydsl.te import tensor as T
from relaydsl.te.rules import ComputeRule, broadcast_read
from relaydsl.te.indexing import norm_axes, ravel, unravel
from relaydsl.te.expr import PrimExpr, cast, const, equal, maximum, minimum, select
from relaydsl.te.tensor import Tensor, compute, reduce_axis


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


def _tensors(inputs: list[Tensor]) -> list[Tensor]:
    """The fields of a tuple-typed argument (flattened, or still one Python tuple)."""
    return (list(inputs[0]) if len(inputs) == 1 and isinstance(inputs[0], (tuple, list))
            else list(inputs))


def _concatenate(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    ts = _tensors(inputs)
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
    starts = _slice_starts(attrs, x.shape)

    def f(*o: PrimExpr) -> PrimExpr:
        index = []
        for d, i in enumerate(o):
            start, step, _ = starts.get(d, (0, 1, 0))
            i = i if step == 1 else i * step
            index.append(i if start == 0 else i + start)
        return x[tuple(index)]

    return compute(out_type.concrete_shape(), f, "T_strided_slice")


def _take_position(i: PrimExpr, n: int, mode: str) -> PrimExpr:
    """The position in 0 .. n-1 that take reads for index ``i``: clamped, or wrapped."""
    if i.dtype in ("int8", "int16", "uint8"):  # room for n - 1
        i = cast("int32", i)
    return minimum(maximum(i, 0), n - 1) if mode == "clip" else i % n


def _take(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, indices = inputs
    k = indices.ndim
    n = math.prod(x.shape) if attrs.axis is None else x.shape[attrs.axis % x.ndim]

    def position(i: PrimExpr) -> PrimExpr:
        return _take_position(i, n, attrs.mode)

    if attrs.axis is None:
        return compute(out_type.concrete_shape(),
                       lambda *o: x[unravel(position(indices[o]), x.shape)], "T_take")
    axis = attrs.axis % x.ndim
    return compute(out_type.concrete_shape(), lambda *o: x[
        o[:axis] + (position(indices[o[axis:axis + k]]),) + o[axis + k:]], "T_take")


def _take_grad(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[j] = sum over the index positions p of select(position(indices[p]) == j, g[p], 0)."""
    g, indices, like = inputs
    shape, k = out_type.concrete_shape(), indices.ndim
    axis = None if attrs.axis is None else attrs.axis % like.ndim
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


def _slice_starts(attrs: Attrs, shape: tuple[int, ...]) -> dict[int, tuple[int, int, int]]:
    """axis -> (start, step, count) of each sliced axis, as Python's slice resolves them."""
    n = len(attrs.begin)
    strides = (1,) * n if attrs.strides is None else _as_tuple(attrs.strides)
    axes = tuple(range(n)) if attrs.axes is None else _as_tuple(attrs.axes)
    out: dict[int, tuple[int, int, int]] = {}
    for a, b, e, s in zip(axes, attrs.begin, attrs.end, strides):
        a %= len(shape)  # a repeated axis: the last slice wins, as in the reference
        start, stop, step = slice(b, e, s).indices(shape[a])
        out[a] = (start, step, len(range(start, stop, step)))
    return out


def _strided_slice_grad(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """out[o] = g[(o - start) / step] where o is on the slice's grid, else 0."""
    g, like = inputs
    starts = _slice_starts(attrs, like.shape)
    if any(count == 0 for _, _, count in starts.values()):  # the slice was empty
        return compute(like.shape, lambda *o: const(0, g.dtype), "T_strided_slice_grad")

    def f(*o: PrimExpr) -> PrimExpr:
        index, inside = [], None
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


def _stack(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    ts = _tensors(inputs)
    axis = attrs.axis % (ts[0].ndim + 1)

    def f(*o: PrimExpr) -> PrimExpr:
        rest = o[:axis] + o[axis + 1:]
        body = ts[-1][rest]
        for n in range(len(ts) - 2, -1, -1):
            body = select(equal(o[axis], n), ts[n][rest], body)
        return body

    return compute(out_type.concrete_shape(), f, "T_stack")


def _split(attrs: Attrs, inputs: list[Tensor],
           out_type: TupleType) -> tuple[Tensor, ...]:
    """One tensor per piece (numpy.split's), reading x shifted by the piece's start."""
    (x,) = inputs
    axis, how = attrs.axis % x.ndim, attrs.indices_or_sections
    size = x.shape[axis]
    cuts = ([size // how * i for i in range(how + 1)] if isinstance(how, int)
            else [0, *_as_tuple(how), size])
    pieces = []
    for n, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        start, stop, _ = slice(lo, hi).indices(size)

        def f(*o: PrimExpr, start: int = start) -> PrimExpr:
            return x[o[:axis] + (o[axis] + start if start else o[axis],) + o[axis + 1:]]

        shape = x.shape[:axis] + (max(stop - start, 0),) + x.shape[axis + 1:]
        pieces.append(compute(shape, f, f"T_split_{n}"))
    return tuple(pieces)


def _shape_of(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """The static shape as a constant int32 vector."""
    (x,) = inputs

    def f(i: PrimExpr) -> PrimExpr:
        body = const(x.shape[-1], "int32") if x.shape else const(0, "int32")
        for d in range(x.ndim - 2, -1, -1):
            body = select(equal(i, d), const(x.shape[d], "int32"), body)
        return body

    return compute(out_type.concrete_shape(), f, "T_shape_of")


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
    "concatenate": _concatenate, "stack": _stack, "split": _split,
    "strided_slice": _strided_slice, "strided_slice_grad": _strided_slice_grad, "take": _take,
    "take_grad": _take_grad, "shape_of": _shape_of,
    "zeros": _constant(0), "ones": _constant(1), "zeros_like": _constant(0),
    "ones_like": _constant(1), "full": _full,
}
