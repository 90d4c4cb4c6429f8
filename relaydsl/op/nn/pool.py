"""Pooling: max_pool2d, its adjoint max_pool2d_grad, avg_pool2d, global_avg_pool2d,
global_max_pool2d; max_pool1d, avg_pool1d (NCW: the 2-D pools over a height of 1, window.py);
max_pool3d, avg_pool3d (NCDHW: the 2-D pools over (H, W) and then over D, window.py).

The window geometry is window.py's. Pooling with ``ceil_mode`` pads the extra windows with
-inf (max) or leaves them out of the count (avg). ``avg_pool2d`` divides by the number of
input elements a window covers; ``count_include_pad`` also counts the explicit padding
(never ceil_mode's extra padding). ``max_pool2d_grad(out_grad, data)``, the adjoint of
``max_pool2d`` that its gradient rule uses, adds each window's gradient at the window's first
maximum (row-major), as JAX does. The pools are OUT_ELEMWISE_FUSABLE, as in TVM: an
elementwise consumer fuses into them.
"""
from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from typing import Any as AnyValue, Sequence

import numpy as np
from numpy.typing import NDArray

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, const as relay_const
from relaydsl.ir.types import TensorType, Type, type_to_str
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jax, jnp, lax
from relaydsl.op.nn.common import Array, Inputs, all_positive, non_negative
from relaydsl.op.nn.conv import PADDING, STRIDES, conv2d, conv_data_grad
from relaydsl.op.nn.shape import pad
from relaydsl.op.nn.window import (
    Window, as_batch, compute_via_2d, compute_via_2d_twice, gradient_via_2d,
    gradient_via_2d_twice, image, reference_via_2d, reference_via_2d_twice, single_example,
    unbatch, window_dim,
)
from relaydsl.op.quantize_rule import SAME_SCALE_POOL, IntegerForm, rescale_rule
from relaydsl.op.registry import (
    REQUIRED, Attr, OpDef, OpPattern, Relation, Traits, ops, register,
)
from relaydsl.te import tensor as T
from relaydsl.te.expr import (
    IterVar, PrimExpr, cast, const, equal, maximum, minimum, not_equal, select,
)
from relaydsl.te.rules import ComputeRule
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import FLOAT, NUMERIC, RelationContext

POOL = (
    Attr("pool_size", "pair", REQUIRED, all_positive, "window size (h, w)"),
    # TVM's pools take dilation before padding: padding on is by keyword only
    STRIDES, replace(PADDING, keyword_only=True),
    Attr("ceil_mode", "bool", False, doc="round the output size up (see window.py)"),
)


def _pool_rel(op: str) -> Relation:
    # a maximum is defined on integers too (quantized feature maps); a mean, as TVM's, on floats
    dtypes = NUMERIC if op.startswith("max_pool") else FLOAT

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = Inputs(ctx, op, args, ("data",), dtypes)
        n, ch, *hw = image(c)
        oh, ow = Window.pool(attrs).out_dims(c, hw)
        return c.tensor((n, ch, oh, ow)[n is None:])

    return rel


def _pool_compute(op: str) -> ComputeRule:
    """max_pool2d's and avg_pool2d's rule: a reduction over each window's taps."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (data,) = inputs
        win = Window.pool(attrs)
        kh, kw = win.kernel

        def f(*o: PrimExpr) -> PrimExpr:
            *lead, y, x = o
            ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
            iy, ix = win.te_position(y, x, ry, rx)
            if op == "max_pool2d":
                return T.max(win.te_read(data, tuple(lead), iy, ix, lowest(data.dtype)),
                             [ry, rx])
            total = T.sum(win.te_read(data, tuple(lead), iy, ix, 0.0), [ry, rx])
            divisor = _avg_divisor_te(win, data.shape[-2:], attrs.count_include_pad, (y, x))
            return total / cast(data.dtype, divisor)

        return compute(out_type.concrete_shape(), f, "T_" + op)

    return rule


# ---- max_pool2d ---------------------------------------------------------------------------------


def lowest(dtype: AnyValue) -> float:
    """What max pooling pads with: -inf, or an integer dtype's least value (which no maximum
    over a window with a real element can return)."""
    dt = np.dtype(dtype)
    return float(np.iinfo(dt).min) if dt.kind in "iu" else -np.inf


@single_example
def _max_pool2d_np(data: np.ndarray, **attrs: AnyValue) -> np.ndarray:
    return Window.pool(attrs).np_windows(data, lowest(data.dtype)).max(axis=(-2, -1))


@single_example
def _max_pool2d_jax(data: Array, **attrs: AnyValue) -> Array:
    return Window.pool(attrs).jax_reduce(data, lowest(data.dtype), lax.max)


def _max_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d max_pool2d(x) = max_pool2d_grad(g, x): each window's g at the window's first maximum."""
    return [max_pool2d_grad(g, call.args[0], **call.attrs)]


max_pool2d = register(OpDef(
    "max_pool2d", ("data",), _pool_rel("max_pool2d"), OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_max_pool2d_np, jax_lower=_max_pool2d_jax, compute=_pool_compute("max_pool2d"),
    gradient=_max_pool2d_grad, attrs=POOL,
    doc="maximum over each pool_size window of NCHW data (any numeric dtype), padding with -inf "
        "(an integer dtype's least value)",
    traits=Traits(quantize=SAME_SCALE_POOL),
))

# ---- max_pool2d_grad ----------------------------------------------------------------------------


def _max_pool2d_grad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    pooled = _pool_rel("max_pool2d_grad")([args[1]], attrs, ctx)
    ctx.unify_types(args[0], pooled, "max_pool2d_grad: the output gradient must have the type "
                    f"of max_pool2d(data), {type_to_str(pooled)}")
    return args[1]


def _max_pool2d_grad_np(out_grad: NDArray[AnyValue], data: NDArray[AnyValue],
                        **attrs: AnyValue) -> NDArray[AnyValue]:
    """Each window's out_grad added at the window's first maximum in row-major order."""
    if data.ndim == 3:
        return _max_pool2d_grad_np(out_grad[None], data[None], **attrs)[0]
    win = Window.pool(attrs)
    windows = win.np_windows(data, -np.inf)  # (n, c, oh, ow, kh, kw)
    n, c, oh, ow, kh, kw = (int(d) for d in windows.shape)
    first = windows.reshape(n, c, oh, ow, kh * kw).argmax(axis=-1)
    rows = np.arange(oh)[:, None] * win.strides[0] + first // kw  # in the padded input
    cols = np.arange(ow)[None, :] * win.strides[1] + first % kw
    (top, bottom), (left, right) = win.pad_pairs(data.shape[-2:])
    h, w = data.shape[-2:]
    grad = np.zeros((n, c, top + h + bottom, left + w + right), out_grad.dtype)
    np.add.at(grad, (np.arange(n)[:, None, None, None], np.arange(c)[:, None, None], rows, cols),
              out_grad)
    return grad[..., top:top + h, left:left + w]


def _max_pool2d_grad_jax(out_grad: Array, data: Array, **attrs: AnyValue) -> Array:
    _, pullback = jax.vjp(partial(_max_pool2d_jax, **attrs), data)
    return pullback(out_grad)[0]


def _max_pool2d_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d max_pool2d_grad(d, x) = (g at each window's first maximum of x, 0): linear in d."""
    (x, single), a = as_batch(call.args[1]), call.attrs
    g = ops.expand_dims(g, axis=0) if single else g
    win = Window.pool(a)
    hw = gu.image_hw(call.args[1], "max_pool2d_grad")
    (top, bottom), (left, right) = win.pad_pairs(hw)
    widths = (0, 0, 0, 0, top, bottom, left, right)
    x_pad = pad(x, pad_width=widths, pad_value=-math.inf)
    g_pad = pad(g, pad_width=widths)
    peak = max_pool2d(x, **a)
    (oh, ow), (sh, sw) = win.out_hw(hw), win.strides
    gathered: Expr | None = None
    found: Expr | None = None  # whether an earlier offset of the window holds its maximum
    for i, j in np.ndindex(*win.kernel):  # each offset in the windows, in row-major order
        at: dict[str, AnyValue] = dict(
            begin=(i, j), end=(i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1),
            strides=(sh, sw), axes=(2, 3))
        hit = ops.equal(ops.strided_slice(x_pad, **at), peak)
        first = hit if found is None else ops.logical_and(hit, ops.logical_not(found))
        found = hit if found is None else ops.logical_or(found, hit)
        picked = gu.where(first, ops.strided_slice(g_pad, **at), gu.scalar(0, call.args[1]))
        gathered = picked if gathered is None else gu.add(gathered, picked)
    assert gathered is not None
    return [unbatch(gathered, single), gu.zeros_for(call.args[1])]


def _max_pool2d_grad_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """Each window's out_grad added at its first maximum (row-major), as the reference does.

    ``first`` is each window's first tap holding the recomputed maximum (or a NaN, as
    argmax picks); an input position sums out_grad over only the windows that contain
    it (at most ceil(k / stride) per axis), in the reference's (row-major) order.
    """
    out_grad, data = inputs
    win = Window.pool(attrs)
    kh, kw = win.kernel
    oh, ow = out_grad.shape[-2:]
    if oh == 0 or ow == 0:
        return compute(data.shape, lambda *o: const(0, data.dtype), "T_max_pool2d_grad")
    pooled = max_pool2d.compute(attrs, [data], TensorType(out_grad.shape, data.dtype))
    assert isinstance(pooled, Tensor)

    def first_tap(*o: PrimExpr) -> PrimExpr:
        *lead, y, x = o
        ry, rx = reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
        v = win.te_read(data, tuple(lead), *win.te_position(y, x, ry, rx), -np.inf)
        hit = equal(v, pooled[o]) | not_equal(v, v)
        return T.min(select(hit, ry * kw + rx, kh * kw), [ry, rx])

    first = compute(out_grad.shape, first_tap, "T_max_pool2d_first")
    (sh, sw), (top, left) = win.strides, win.pads[:2]
    spans = [(top, sh, kh, oh, data.shape[-2]), (left, sw, kw, ow, data.shape[-1])]

    def f(*o: PrimExpr) -> PrimExpr:
        *lead, iy, ix = o
        valid: list[PrimExpr] = []
        out_at: list[tuple[PrimExpr, IterVar]] = []
        tap: list[PrimExpr] = []
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


max_pool2d_grad = register(OpDef(
    "max_pool2d_grad", ("out_grad", "data"), _max_pool2d_grad_rel, OpPattern.OPAQUE,
    numpy_ref=_max_pool2d_grad_np, jax_lower=_max_pool2d_grad_jax,
    compute=_max_pool2d_grad_compute, gradient=_max_pool2d_grad_grad, attrs=POOL,
    doc="zeros shaped like data with each window's out_grad added at the window's first "
        "maximum (row-major): the adjoint of max_pool2d",
))

# ---- avg_pool2d ---------------------------------------------------------------------------------


def _avg_divisor(win: Window, hw: Sequence[int], count_include_pad: bool) -> NDArray[AnyValue]:
    """(OH, OW): how many input (or explicitly padded) elements each window covers, at least 1."""
    counts: list[NDArray[AnyValue]] = []
    for i, out in enumerate(win.out_hw(hw)):
        before, after = win.pads[i], win.pads[i + 2]
        lo, hi = (-before, hw[i] + after) if count_include_pad else (0, hw[i])
        start = np.arange(out) * win.strides[i] - before
        counts.append(np.clip(start + win.kernel[i], lo, hi) - np.clip(start, lo, hi))
    return np.maximum(np.outer(*counts), 1)


def _avg_divisor_te(win: Window, hw: Sequence[int], count_include_pad: bool,
                    at: tuple[PrimExpr, PrimExpr]) -> PrimExpr:
    """_avg_divisor at output position `at`, in te."""
    counts: list[PrimExpr] = []
    for i, o in enumerate(at):
        before, after = win.pads[i], win.pads[i + 2]
        lo, hi = (-before, hw[i] + after) if count_include_pad else (0, hw[i])
        start = o * win.strides[i] - before
        counts.append(minimum(maximum(start + win.kernel[i], lo), hi)
                      - minimum(maximum(start, lo), hi))
    return maximum(counts[0] * counts[1], 1)


@single_example
def _avg_pool2d_np(data: np.ndarray, *, count_include_pad: bool,
                   **attrs: AnyValue) -> np.ndarray:
    win = Window.pool(attrs)
    sums = win.np_windows(data, 0.0).sum(axis=(-2, -1))
    return sums / _avg_divisor(win, data.shape[-2:], count_include_pad).astype(data.dtype)


@single_example
def _avg_pool2d_jax(data: Array, *, count_include_pad: bool, **attrs: AnyValue) -> Array:
    win = Window.pool(attrs)
    sums = win.jax_reduce(data, 0.0, lax.add)
    return sums / jnp.asarray(_avg_divisor(win, data.shape[-2:], count_include_pad), data.dtype)


def _avg_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d avg_pool2d(x) = the data adjoint of a depthwise all-ones conv2d, of g / window counts."""
    (_, single), a = as_batch(call.args[0]), call.attrs
    g = ops.expand_dims(g, axis=0) if single else g
    t, hw = gu.tensor_type(call.args[0]), gu.image_hw(call.args[0], "avg_pool2d")
    channels = t.shape[-3]
    if not isinstance(channels, int):
        raise IRError(f"the gradient of avg_pool2d needs static channels, got {type_to_str(t)}")
    win = Window.pool(a)
    counts = relay_const(_avg_divisor(win, hw, a.count_include_pad), t.concrete_dtype())
    ones = ops.ones(shape=(channels, 1, *win.kernel), dtype=t.dtype)
    dx = conv_data_grad(gu.div(g, counts), ones, channels, hw, win, groups=channels)
    return [unbatch(dx, single)]


def _avg_pool2d_integer(call: Call, q: Expr, step: np.ndarray, dtype: str
                        ) -> IntegerForm | None:
    """On integers: each window's sum, exact in int32 (a depthwise conv2d with a kernel of
    ones, which pads with 0 as the mean does), standing for the mean at the step over the
    window's size. Only where every window counts the same number of elements (no padding,
    or padding counted, and no ceil_mode window cut short); else the mean runs in float."""
    a, (*_, channels, h, w) = call.attrs, gu.tensor_type(call.args[0]).shape
    if not (isinstance(channels, int) and isinstance(h, int) and isinstance(w, int)):
        return None
    win = Window.pool(a)
    counts = _avg_divisor(win, (h, w), a.count_include_pad)
    floor_hw = Window.pool({**a, "ceil_mode": False}).out_hw((h, w))
    if counts.min() != counts.max() or tuple(floor_hw) != tuple(win.out_hw((h, w))):
        return None
    ones = relay_const(np.ones((channels, 1, *win.kernel), dtype))
    total = conv2d(q, ones, strides=win.strides, padding=win.pads, groups=channels,
                   out_dtype="int32")
    return IntegerForm(total, 1.0 / float(counts.flat[0]), "int32")


COUNT_INCLUDE_PAD = Attr("count_include_pad", "bool", False,
                         doc="count explicit padding in the mean")
"""The average pools' choice of divisor, after their window attributes."""

avg_pool2d = register(OpDef(
    "avg_pool2d", ("data",), _pool_rel("avg_pool2d"), OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_avg_pool2d_np, jax_lower=_avg_pool2d_jax, compute=_pool_compute("avg_pool2d"),
    gradient=_avg_pool2d_grad,
    attrs=(*POOL, COUNT_INCLUDE_PAD),
    doc="mean over each pool_size window of NCHW data (padding not counted unless asked)",
    traits=Traits(quantize=rescale_rule(_avg_pool2d_integer, channel_axes=(1,))),
))

# ---- global_avg_pool2d --------------------------------------------------------------------------


def _global_pool_rel(op: str) -> Relation:
    dtypes = NUMERIC if op.startswith("global_max") else FLOAT

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = Inputs(ctx, op, args, ("data",), dtypes)
        n, ch, _, _ = c.shape(0, rank=4)
        return c.tensor((n, ch, 1, 1))

    return rel


def _global_pool_compute(op: str) -> ComputeRule:
    """global_avg_pool2d's and global_max_pool2d's rule: a reduction over H and W."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (data,) = inputs
        h, w = data.shape[-2:]

        def f(n: PrimExpr, c: PrimExpr, _y: PrimExpr, _x: PrimExpr) -> PrimExpr:
            ry, rx = reduce_axis(h, "ry"), reduce_axis(w, "rx")
            if op == "global_max_pool2d":
                return T.max(data[n, c, ry, rx], [ry, rx])
            return T.sum(data[n, c, ry, rx], [ry, rx]) / float(h * w)

        return compute(out_type.concrete_shape(), f, "T_" + op)

    return rule


def _global_avg_pool2d_ref(data: Array) -> Array:
    return data.mean(axis=(2, 3), keepdims=True)


def _global_avg_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d global_avg_pool2d(x) = g / (H * W) broadcast over H and W."""
    x = call.args[0]
    return [gu.div(gu.broadcast_like(g, x), gu.count(x, (2, 3)))]


def _global_avg_pool2d_integer(call: Call, q: Expr, step: np.ndarray, dtype: str
                               ) -> IntegerForm | None:
    """On integers: the sum over H and W in int32, standing for the mean at the step over
    H · W (exact: no division)."""
    h, w = gu.tensor_type(call.args[0]).shape[-2:]
    if not (isinstance(h, int) and isinstance(w, int)):
        return None
    total = ops.sum(ops.cast(q, dtype="int32"), axis=(2, 3), keepdims=True)
    return IntegerForm(total, 1.0 / float(h * w), "int32")


global_avg_pool2d = register(OpDef(
    "global_avg_pool2d", ("data",), _global_pool_rel("global_avg_pool2d"),
    OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_global_avg_pool2d_ref, jax_lower=_global_avg_pool2d_ref,
    compute=_global_pool_compute("global_avg_pool2d"), gradient=_global_avg_pool2d_grad,
    doc="mean over H and W of NCHW data -> (N, C, 1, 1)",
    traits=Traits(quantize=rescale_rule(_global_avg_pool2d_integer, channel_axes=(1,))),
))

# ---- global_max_pool2d --------------------------------------------------------------------------


def _global_max_pool2d_ref(data: Array) -> Array:
    return data.max(axis=(2, 3), keepdims=True)


def _global_max_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d global_max_pool2d(x) = g * [x == max] / (number of ties), as max over H and W."""
    x = call.args[0]
    return gu.input_adjoints(ops.max(x, axis=(2, 3), keepdims=True), g)


global_max_pool2d = register(OpDef(
    "global_max_pool2d", ("data",), _global_pool_rel("global_max_pool2d"),
    OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_global_max_pool2d_ref, jax_lower=_global_max_pool2d_ref,
    compute=_global_pool_compute("global_max_pool2d"), gradient=_global_max_pool2d_grad,
    doc="maximum over H and W of NCHW data (any numeric dtype) -> (N, C, 1, 1)",
    traits=Traits(quantize=SAME_SCALE_POOL),
))

# ---- max_pool1d, avg_pool1d ---------------------------------------------------------------------

POOL1D = (
    Attr("pool_size", "single", REQUIRED, all_positive, "window size (w,)"),
    Attr("strides", "single", (1,), all_positive, "window step (w,)"),
    Attr("padding", "padding1d", (0, 0), non_negative, "an int or (left, right)",
         keyword_only=True),
    Attr("ceil_mode", "bool", False, doc="round the output size up (see window.py)"),
)


def _pool1d_rel(op: str) -> Relation:
    """NCW data: (n, c, w) -> (n, c, ow), ow the number of windows along W."""

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = Inputs(ctx, op, args, ("data",))
        n, ch, w = c.shape(0, rank=3)
        (k,), (stride,) = attrs.pool_size, attrs.strides
        ow = window_dim(c, w, k, stride, 1, attrs.padding, attrs.ceil_mode, 2)
        return c.tensor((n, ch, ow))

    return rel


max_pool1d = register(OpDef(
    "max_pool1d", ("data",), _pool1d_rel("max_pool1d"), OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=reference_via_2d(max_pool2d.numpy_ref),
    jax_lower=reference_via_2d(max_pool2d.jax_lower),
    compute=compute_via_2d(max_pool2d.compute),
    gradient=gradient_via_2d(
        max_pool2d, "d max_pool1d(x) = g at each window's first maximum, as max_pool2d's."),
    attrs=POOL1D,
    doc="maximum over each pool_size window of NCW data, padding with -inf",
    traits=Traits(quantize=SAME_SCALE_POOL),
))

avg_pool1d = register(OpDef(
    "avg_pool1d", ("data",), _pool1d_rel("avg_pool1d"), OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=reference_via_2d(avg_pool2d.numpy_ref),
    jax_lower=reference_via_2d(avg_pool2d.jax_lower),
    compute=compute_via_2d(avg_pool2d.compute),
    gradient=gradient_via_2d(
        avg_pool2d, "d avg_pool1d(x) = g / window counts spread over each window, as "
                    "avg_pool2d's."),
    attrs=(*POOL1D, COUNT_INCLUDE_PAD),
    doc="mean over each pool_size window of NCW data (padding not counted unless asked)",
))

# ---- max_pool3d, avg_pool3d ---------------------------------------------------------------------

POOL3D = (
    Attr("pool_size", "triple", REQUIRED, all_positive, "window size (d, h, w)"),
    Attr("strides", "triple", (1, 1, 1), all_positive, "window step (d, h, w)"),
    Attr("padding", "padding3d", (0,) * 6, non_negative,
         "an int, (d, h, w) or (front, top, left, back, bottom, right)",
         keyword_only=True),  # TVM's dilation comes first
    Attr("ceil_mode", "bool", False, doc="round the output size up (see window.py)"),
)


def _pool3d_rel(op: str) -> Relation:
    """NCDHW data: (n, c, d, h, w) -> (n, c, od, oh, ow), the numbers of windows per axis."""
    dtypes = NUMERIC if op.startswith("max_pool") else FLOAT

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = Inputs(ctx, op, args, ("data",), dtypes)
        n, ch, *dhw = c.shape(0, rank=5)
        p = attrs.padding
        out = [window_dim(c, dhw[i], attrs.pool_size[i], attrs.strides[i], 1, (p[i], p[i + 3]),
                          attrs.ceil_mode, i + 2) for i in range(3)]
        return c.tensor((n, ch, *out))

    return rel


max_pool3d = register(OpDef(
    "max_pool3d", ("data",), _pool3d_rel("max_pool3d"), OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=reference_via_2d_twice(max_pool2d.numpy_ref),
    jax_lower=reference_via_2d_twice(max_pool2d.jax_lower),
    compute=compute_via_2d_twice(max_pool2d.compute),
    gradient=gradient_via_2d_twice(
        max_pool2d, "d max_pool3d(x) = g at each window's first maximum in (d, h, w) order."),
    attrs=POOL3D,
    doc="maximum over each pool_size window of NCDHW data, padding with -inf",
    traits=Traits(quantize=SAME_SCALE_POOL),
))

avg_pool3d = register(OpDef(
    "avg_pool3d", ("data",), _pool3d_rel("avg_pool3d"), OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=reference_via_2d_twice(avg_pool2d.numpy_ref),
    jax_lower=reference_via_2d_twice(avg_pool2d.jax_lower),
    compute=compute_via_2d_twice(avg_pool2d.compute),
    gradient=gradient_via_2d_twice(
        avg_pool2d, "d avg_pool3d(x) = g / window counts spread over each window."),
    attrs=(*POOL3D, COUNT_INCLUDE_PAD),
    doc="mean over each pool_size window of NCDHW data (padding not counted unless asked)",
))
