"""Compute rules of the neural-network ops (relaydsl/op/nn.py).

Products reduce over the contraction axis; conv2d and the pools read their
input at ``out * stride + tap * dilation - pad_before``, guarded by
``select`` where a window may leave the input (padding, ceil_mode), which
reads 0 (conv2d, avg_pool2d) or -inf (max_pool2d) there. max_pool2d_grad
sums, at each input position, the out_grad of the windows whose first maximum
it is, over just the windows that contain it. softmax and
log_softmax are written as their references are: the maximum along the axis,
the shifted exponentials and their sum.
"""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.te import tensor as T
from relaydsl.te.rules import ComputeRule
from relaydsl.te.indexing import right_aligned
from relaydsl.op.transform.shape import reshape_compute
from relaydsl.te.expr import (
    PrimExpr, cast, const, equal, exp, log, maximum, minimum, not_equal, select,
)
from relaydsl.te.tensor import Tensor, compute, reduce_axis


def _pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _padding(v: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, (h, w) or the four values."""
    if isinstance(v, int):
        return (v, v, v, v)
    return (v[0], v[1], v[0], v[1]) if len(v) == 2 else (v[0], v[1], v[2], v[3])


# ---- products ----------------------------------------------------------------------


def _matmul(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    a, b = inputs
    shape = out_type.concrete_shape()
    nbatch = len(shape) - (a.ndim >= 2) - (b.ndim >= 2)

    def f(*o: PrimExpr) -> PrimExpr:
        batch, rest = o[:nbatch], list(o[nbatch:])
        k = reduce_axis(a.shape[-1], "k")
        ai = (k,) if a.ndim == 1 else (*right_aligned(a.shape[:-2], batch), rest.pop(0), k)
        bi = (k,) if b.ndim == 1 else (*right_aligned(b.shape[:-2], batch), k, rest.pop(0))
        return T.sum(a[ai] * b[bi], k)

    return compute(shape, f, "T_matmul")


def _dense(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, weight = inputs

    def f(*o: PrimExpr) -> PrimExpr:
        k = reduce_axis(weight.shape[1], "k")
        return T.sum(data[o[:-1] + (k,)] * weight[o[-1], k], k)

    return compute(out_type.concrete_shape(), f, "T_dense")


def _batch_matmul(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    x, y = inputs

    def f(b: PrimExpr, i: PrimExpr, j: PrimExpr) -> PrimExpr:
        k = reduce_axis(x.shape[1 if attrs.transpose_a else 2], "k")
        bx = const(0) if x.shape[0] == 1 else b
        by = const(0) if y.shape[0] == 1 else b
        xv = x[bx, k, i] if attrs.transpose_a else x[bx, i, k]
        yv = y[by, j, k] if attrs.transpose_b else y[by, k, j]
        return T.sum(xv * yv, k)

    return compute(out_type.concrete_shape(), f, "T_batch_matmul")


def _bias_add(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, bias = inputs
    axis = attrs.axis % data.ndim
    return compute(data.shape, lambda *o: data[o] + bias[o[axis]], "T_bias_add")


# ---- convolution and pooling -------------------------------------------------------


class _Window:
    """Reads of a 2-D window over the last two axes of ``x``, padded with ``fill``."""

    def __init__(self, x: Tensor, attrs: Attrs, dilation: tuple[int, int], guard: bool):
        self.x, self.h, self.w = x, x.shape[-2], x.shape[-1]
        self.strides, self.dilation = _pair(attrs.strides), dilation
        self.pads = _padding(attrs.padding)
        self.guard = guard or any(self.pads)

    def rows_cols(self, y: PrimExpr, x: PrimExpr, ry: PrimExpr,
                  rx: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
        (sh, sw), (dh, dw), (top, left) = self.strides, self.dilation, self.pads[:2]
        iy = (y * sh if sh != 1 else y) + (ry * dh if dh != 1 else ry)
        ix = (x * sw if sw != 1 else x) + (rx * dw if dw != 1 else rx)
        return (iy - top if top else iy), (ix - left if left else ix)

    def read(self, lead: tuple[PrimExpr, ...], iy: PrimExpr, ix: PrimExpr,
             fill: float) -> PrimExpr:
        v = self.x[(*lead, iy, ix)]
        if not self.guard:
            return v
        inside = (iy >= 0) & (iy < self.h) & (ix >= 0) & (ix < self.w)
        return select(inside, v, const(fill, self.x.dtype))


def _conv2d(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, weight = inputs
    cout, cin_per_group, kh, kw = weight.shape
    per_group = cout // attrs.groups
    win = _Window(data, attrs, _pair(attrs.dilation), guard=False)

    def f(*o: PrimExpr) -> PrimExpr:
        *batch, co, y, x = o
        rc, ry, rx = reduce_axis(cin_per_group, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
        c = rc if attrs.groups == 1 else co // per_group * cin_per_group + rc
        iy, ix = win.rows_cols(y, x, ry, rx)
        return T.sum(win.read((*batch, c), iy, ix, 0.0) * weight[co, rc, ry, rx], [rc, ry, rx])

    return compute(out_type.concrete_shape(), f, "T_conv2d")


def _pool(op: str):
    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (data,) = inputs
        kh, kw = _pair(attrs.pool_size)
        win = _Window(data, attrs, (1, 1), guard=attrs.ceil_mode)

        def f(*o: PrimExpr) -> PrimExpr:
            *lead, y, x = o
            ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
            iy, ix = win.rows_cols(y, x, ry, rx)
            if op == "max_pool2d":
                return T.max(win.read(tuple(lead), iy, ix, -np.inf), [ry, rx])
            total = T.sum(win.read(tuple(lead), iy, ix, 0.0), [ry, rx])
            return total / cast(data.dtype, _avg_divisor(win, attrs, y, x, (kh, kw)))

        return compute(out_type.concrete_shape(), f, "T_" + op)

    return rule


def _max_pool2d_grad(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """Each window's out_grad added at its first maximum (row-major), as the reference does.

    ``first`` is each window's first tap holding the recomputed maximum (or a NaN, as
    argmax picks); an input position sums out_grad over only the windows that contain
    it (at most ceil(k / stride) per axis), in the reference's (row-major) order.
    """
    out_grad, data = inputs
    kh, kw = _pair(attrs.pool_size)
    oh, ow = out_grad.shape[-2:]
    if oh == 0 or ow == 0:
        return compute(data.shape, lambda *o: const(0, data.dtype), "T_max_pool2d_grad")
    win = _Window(data, attrs, (1, 1), guard=attrs.ceil_mode)
    pooled = _pool("max_pool2d")(attrs, [data], TensorType(out_grad.shape, data.dtype))

    def first_tap(*o: PrimExpr) -> PrimExpr:
        *lead, y, x = o
        ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
        v = win.read(tuple(lead), *win.rows_cols(y, x, ry, rx), -np.inf)
        hit = equal(v, pooled[o]) | not_equal(v, v)
        return T.min(select(hit, ry * kw + rx, kh * kw), [ry, rx])

    first = compute(out_grad.shape, first_tap, "T_max_pool2d_first")
    (sh, sw), (top, left) = win.strides, win.pads[:2]
    spans = [(top, sh, kh, oh, data.shape[-2]), (left, sw, kw, ow, data.shape[-1])]

    def f(*o: PrimExpr) -> PrimExpr:
        *lead, iy, ix = o
        valid, out_at, tap = [], [], []
        for i, (before, stride, k, extent, size) in zip((iy, ix), spans):
            # i (at p in the padded input) is in windows (p - k) / stride < w <= p / stride
            count = min(-(-k // stride), extent)
            r = reduce_axis(count, "wy" if not out_at else "wx")
            p = i + before if before else i
            last = p // stride if stride > 1 else p
            if (size - 1 + before) // stride > extent - 1:
                last = minimum(last, extent - 1)
            w = last - (count - 1) + r if count > 1 else last
            t = p - w * stride if stride > 1 else p - w  # the tap of i in window w, >= 0
            valid += ([w >= 0] if count > 1 else []) + [t < k]
            out_at.append((w, r))
            tap.append(t)
        (wy, ry), (wx, rx) = out_at
        at = (*lead, wy, wx)
        inside = valid[0]
        for c in valid[1:]:
            inside = inside & c
        zero = const(0, data.dtype)
        mine = select(equal(first[at], tap[0] * kw + tap[1]), out_grad[at], zero)
        return T.sum(select(inside, mine, zero), [ry, rx])

    return compute(data.shape, f, "T_max_pool2d_grad")


def _avg_divisor(win: _Window, attrs: Attrs, y: PrimExpr, x: PrimExpr,
                 kernel: tuple[int, int]) -> PrimExpr:
    """How many input (or, with count_include_pad, explicitly padded) elements a window covers."""
    counts = []
    for i, o in enumerate((y, x)):
        before, after, size = win.pads[i], win.pads[i + 2], (win.h, win.w)[i]
        lo, hi = (-before, size + after) if attrs.count_include_pad else (0, size)
        start = o * win.strides[i] - before
        counts.append(minimum(maximum(start + kernel[i], lo), hi) - minimum(maximum(start, lo), hi))
    return maximum(counts[0] * counts[1], 1)


def _global_avg_pool2d(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (data,) = inputs
    h, w = data.shape[-2:]

    def f(n: PrimExpr, c: PrimExpr, _y: PrimExpr, _x: PrimExpr) -> PrimExpr:
        ry, rx = reduce_axis(h, "ry"), reduce_axis(w, "rx")
        return T.sum(data[n, c, ry, rx], [ry, rx]) / float(h * w)

    return compute(out_type.concrete_shape(), f, "T_global_avg_pool2d")


# ---- softmax family ----------------------------------------------------------------


def _softmax_parts(x: Tensor, axis: int) -> tuple[Tensor, Tensor, Callable]:
    """(max, sum of exp(x - max)) along ``axis``, and the map from x's index to theirs."""
    axis %= x.ndim
    rest = x.shape[:axis] + x.shape[axis + 1:]

    def along(p: tuple, r: PrimExpr) -> tuple:
        return p[:axis] + (r,) + p[axis:]

    def top(*p: PrimExpr) -> PrimExpr:
        r = reduce_axis(x.shape[axis], "k")
        return T.max(x[along(p, r)], r)

    biggest = compute(rest, top, "T_softmax_max")

    def total(*p: PrimExpr) -> PrimExpr:
        r = reduce_axis(x.shape[axis], "k")
        return T.sum(exp(x[along(p, r)] - biggest[p]), r)

    return biggest, compute(rest, total, "T_softmax_sum"), lambda o: o[:axis] + o[axis + 1:]


def _softmax(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (x,) = inputs
    biggest, total, drop = _softmax_parts(x, attrs.axis)
    return compute(x.shape, lambda *o: exp(x[o] - biggest[drop(o)]) / total[drop(o)],
                   "T_softmax")


def _log_softmax_of(x: Tensor, axis: int) -> Tensor:
    biggest, total, drop = _softmax_parts(x, axis)
    return compute(x.shape, lambda *o: (x[o] - biggest[drop(o)]) - log(total[drop(o)]),
                   "T_log_softmax")


def _log_softmax(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    return _log_softmax_of(inputs[0], attrs.axis)


def _softmax_cross_entropy(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    logits, labels = inputs
    logp = _log_softmax_of(logits, -1)
    lead, classes = logits.shape[:-1], logits.shape[-1]

    def per_example(*p: PrimExpr) -> PrimExpr:
        k = reduce_axis(classes, "k")
        return -T.sum(labels[p + (k,)] * logp[p + (k,)], k)

    losses = compute(lead, per_example, "T_cross_entropy_per_example")
    if not lead:
        return losses

    def mean() -> PrimExpr:
        r = [reduce_axis(d, f"r{i}") for i, d in enumerate(lead)]
        return T.sum(losses[tuple(r)], r) / float(math.prod(lead))

    return compute((), mean, "T_softmax_cross_entropy")


# ---- padding and flattening ----------------------------------------------------------


def _pad(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
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


RULES: dict[str, ComputeRule] = {
    "matmul": _matmul, "dense": _dense, "batch_matmul": _batch_matmul, "bias_add": _bias_add,
    "conv2d": _conv2d, "max_pool2d": _pool("max_pool2d"), "max_pool2d_grad": _max_pool2d_grad,
    "avg_pool2d": _pool("avg_pool2d"),
    "global_avg_pool2d": _global_avg_pool2d, "softmax": _softmax, "log_softmax": _log_softmax,
    "softmax_cross_entropy": _softmax_cross_entropy, "pad": _pad, "flatten": reshape_compute,
}
