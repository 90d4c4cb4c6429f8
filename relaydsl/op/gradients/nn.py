"""Gradient rules of the neural-network ops (relaydsl/op/nn.py)."""
from __future__ import annotations

import math

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.expr import Call, Expr, TupleGetItem, const
from relaydsl.ir.types import type_to_str
from relaydsl.op.gradients.common import (
    _END, _add, _along, _broadcast_like, op_call, _collapse, _count, _dims, _div, _image_hw,
    _mean, _mul, _others, _rule, _scalar, _sub, _sum, _tensor, _where, _zeros,
)
from relaydsl.op.registry import ops
from relaydsl.op.nn import _Window, _avg_divisor, _out_size, _padding, _pair, _pool_window

# ---- products -----------------------------------------------------------------------------------

def _swap_last(x: Expr, ndim: int) -> Expr:
    """x with its last two axes swapped."""
    return op_call("transpose", x, axes=(*range(ndim - 2), ndim - 1, ndim - 2))


@_rule("matmul")
def _matmul_grad(call: Call, g: Expr) -> list[Expr]:
    """d(a @ b) = (sum_b(g @ bᵀ, a), sum_b(aᵀ @ g, b)), 1-D operands promoted to matrices."""
    a, b = call.args
    ra, rb = _tensor(a).ndim, _tensor(b).ndim
    a2 = a if ra > 1 else op_call("expand_dims", a, axis=0)  # (k,) -> (1, k)
    b2 = b if rb > 1 else op_call("expand_dims", b, axis=-1)  # (k,) -> (k, 1)
    g2 = g if rb > 1 else op_call("expand_dims", g, axis=-1)  # the n axis b's promotion added
    g2 = g2 if ra > 1 else op_call("expand_dims", g2, axis=-2)  # the m axis a's promotion added
    da = _collapse(op_call("matmul", g2, _swap_last(b2, max(rb, 2))), a2)
    db = _collapse(op_call("matmul", _swap_last(a2, max(ra, 2)), g2), b2)
    return [da if ra > 1 else op_call("reshape_like", da, a),
            db if rb > 1 else op_call("reshape_like", db, b)]


@_rule("dense")
def _dense_grad(call: Call, g: Expr) -> list[Expr]:
    """d dense(x, w) = (g @ w, gᵀ @ x), the leading dims of x and g flattened."""
    x, w = call.args
    rank = _tensor(x).ndim
    if rank == 1:
        dw = _mul(op_call("expand_dims", g, axis=1), op_call("expand_dims", x, axis=0))
    elif rank == 2:
        dw = op_call("matmul", op_call("transpose", g), x)
    else:
        units, k = _dims(w, "dense")
        rows = op_call("reshape", g, newshape=(-1, units))
        dw = op_call("matmul", op_call("transpose", rows), op_call("reshape", x, newshape=(-1, k)))
    return [op_call("matmul", g, w), dw]


@_rule("batch_matmul")
def _batch_matmul_grad(call: Call, g: Expr) -> list[Expr]:
    """d(X @ Y) = (g @ Yᵀ, Xᵀ @ g) with X, Y the optionally transposed x, y; batch-1 summed."""
    x, y = call.args
    ta, tb = call.attrs.transpose_a, call.attrs.transpose_b

    def bmm(p: Expr, q: Expr, tp: bool, tq: bool) -> Expr:
        return op_call("batch_matmul", p, q, transpose_a=tp, transpose_b=tq)

    dx = bmm(y, g, tb, True) if ta else bmm(g, y, False, not tb)
    dy = bmm(g, x, True, ta) if tb else bmm(x, g, not ta, False)
    return [_collapse(dx, x), _collapse(dy, y)]


# ---- convolution and pooling --------------------------------------------------------------------
#
# Along one spatial axis, conv2d computes y[o] = sum_k xpad[o*s + k*d] w[k] (stride s, dilation d,
# xpad padded by p before). Its adjoints are again convolutions:
#   dx[i] = sum_k gs[i + p - k*d] w[k], with gs = g spread out by s (s - 1 zeros between
#           elements): a stride-1 conv of gs, padded by d*(k-1) - p before, with the flipped w;
#   dw[k] = sum_o xpad[k*d + o*s] g[o]: a conv of xpad with g as the kernel, stride d and
#           dilation s, contracting over the batch (so batch and channels trade places).


def _as_batch(x: Expr) -> tuple[Expr, bool]:
    """NCHW x as is, or one CHW example as a batch of one; and whether it was one example."""
    if _tensor(x).ndim == 3:
        return op_call("expand_dims", x, axis=0), True
    return x, False


def _spread(g: Expr, channels: int, out_hw: tuple[int, int], strides: tuple[int, int]) -> Expr:
    """NCHW g with s - 1 zeros after each element along H and W: (n, c, oh*sh, ow*sw)."""
    (oh, ow), (sh, sw) = out_hw, strides
    # (n, c, oh, 1, ow, 1)
    cells = op_call("expand_dims", op_call("expand_dims", g, axis=3), axis=5)
    cells = op_call("pad", cells, pad_width=(0, 0, 0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1))
    return op_call("reshape", cells, newshape=(-1, channels, oh * sh, ow * sw))


def _conv_data_grad(g: Expr, flipped: Expr, channels: int, hw: tuple[int, int], win: _Window,
                    groups: int) -> Expr:
    """The adjoint of a conv2d's NCHW data: a stride-1 conv2d of g spread by the strides,
    padded (or cropped) to give back hw, with the flipped transposed weight `flipped`."""
    out_hw = win.out_hw(hw)
    before = [win.dilation[i] * (win.kernel[i] - 1) - win.pads[i] for i in (0, 1)]
    reach = [(out_hw[i] - 1) * win.strides[i] + 1 for i in (0, 1)]  # the spread g's extent
    after = [hw[i] - reach[i] + win.pads[i] for i in (0, 1)]
    size = list(out_hw)
    if max(win.strides) > 1:
        g = _spread(g, channels, out_hw, win.strides)
        size = [out_hw[i] * win.strides[i] for i in (0, 1)]
    begin = tuple(max(-b, 0) for b in before)  # negative padding crops
    end = tuple(reach[i] - max(-after[i], 0) for i in (0, 1))
    if begin != (0, 0) or list(end) != size:
        g = op_call("strided_slice", g, begin=begin, end=end, axes=(2, 3))
    padding = tuple(max(p, 0) for p in (*before, *after))
    return op_call("conv2d", g, flipped, padding=padding, dilation=win.dilation, groups=groups)


def _flip_transpose(w: Expr, groups: int) -> Expr:
    """OIHW weight (o, c/G, kh, kw) as the transposed convolution's: (c, o/G, kh, kw) flipped."""
    o, cg, kh, kw = _dims(w, "conv2d")
    w = op_call("reshape", w, newshape=(groups, o // groups, cg, kh, kw))
    w = op_call("reshape", op_call("transpose", w, axes=(0, 2, 1, 3, 4)),
              newshape=(groups * cg, o // groups, kh, kw))
    return op_call("strided_slice", w, begin=(kh - 1, kw - 1), end=(-kh - 1, -kw - 1),
                 strides=(-1, -1), axes=(2, 3))


def _conv_weight_grad(x: Expr, g: Expr, weight: tuple[int, ...], hw: tuple[int, int],
                      win: _Window, groups: int) -> Expr:
    """dw[o, c] = sum over the batch of x[:, c] correlated with g[:, o] (within a group)."""
    o, cg, kh, kw = weight
    (h, w), (oh, ow) = hw, win.out_hw(hw)
    data = op_call("reshape", x, newshape=(-1, groups, cg, h, w))
    data = op_call("reshape", op_call("transpose", data, axes=(2, 1, 0, 3, 4)),
                 newshape=(cg, -1, h, w))  # (c/G, G * n, h, w): batch and channels traded
    kernel = op_call("reshape", g, newshape=(-1, groups, o // groups, oh, ow))
    kernel = op_call("reshape", op_call("transpose", kernel, axes=(1, 2, 0, 3, 4)),
                   newshape=(o, -1, oh, ow))  # (o, n, oh, ow)
    dw = op_call("conv2d", data, kernel, strides=win.dilation, padding=win.pads,
               dilation=win.strides, groups=groups)  # (c/G, o, kh', kw') with kh' >= kh
    dw = op_call("transpose", dw, axes=(1, 0, 2, 3))
    full = [_out_size(hw[i], (oh, ow)[i], win.dilation[i], win.strides[i], win.pads[i],
                      win.pads[i + 2], False) for i in (0, 1)]
    if full != [kh, kw]:
        dw = op_call("strided_slice", dw, begin=(0, 0), end=(kh, kw), axes=(2, 3))
    return dw


def _unbatch(dx: Expr, single: bool) -> Expr:
    return op_call("squeeze", dx, axis=(0,)) if single else dx


@_rule("conv2d")
def _conv2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d conv2d(x, w) = (conv2d(spread(g), flip(w)ᵀ), conv2d(xᵀ, gᵀ)): see the comment above."""
    (x, single), w, a = _as_batch(call.args[0]), call.args[1], call.attrs
    g = op_call("expand_dims", g, axis=0) if single else g
    weight, (h, wd) = _dims(w, "conv2d"), _image_hw(call.args[0], "conv2d")
    win = _Window((weight[2], weight[3]), _pair(a.strides), _pair(a.dilation), _padding(a.padding))
    dx = _conv_data_grad(g, _flip_transpose(w, a.groups), weight[0], (h, wd), win, a.groups)
    return [_unbatch(dx, single), _conv_weight_grad(x, g, weight, (h, wd), win, a.groups)]


@_rule("max_pool2d")
def _max_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d max_pool2d(x) = max_pool2d_grad(g, x): each window's g at the window's first maximum."""
    return [op_call("max_pool2d_grad", g, call.args[0], **call.attrs)]


@_rule("max_pool2d_grad")
def _max_pool2d_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d max_pool2d_grad(d, x) = (g at each window's first maximum of x, 0): linear in d."""
    (x, single), a = _as_batch(call.args[1]), call.attrs
    g = op_call("expand_dims", g, axis=0) if single else g
    win = _pool_window(a.pool_size, a.strides, a.padding, a.ceil_mode)
    hw = _image_hw(call.args[1], "max_pool2d_grad")
    (top, bottom), (left, right) = win.pad_pairs(hw)
    widths = (0, 0, 0, 0, top, bottom, left, right)
    x_pad = op_call("pad", x, pad_width=widths, pad_value=-math.inf)
    g_pad = op_call("pad", g, pad_width=widths)
    peak = op_call("max_pool2d", x, **a)
    (oh, ow), (sh, sw) = win.out_hw(hw), win.strides
    gathered: Expr | None = None
    found: Expr | None = None  # whether an earlier offset of the window holds its maximum
    for i, j in np.ndindex(*win.kernel):  # each offset in the windows, in row-major order
        at = dict(begin=(i, j), end=(i + (oh - 1) * sh + 1, j + (ow - 1) * sw + 1),
                  strides=(sh, sw), axes=(2, 3))
        hit = op_call("equal", op_call("strided_slice", x_pad, **at), peak)
        first = hit if found is None else op_call("logical_and", hit, op_call("logical_not", found))
        found = hit if found is None else op_call("logical_or", found, hit)
        picked = _where(first, op_call("strided_slice", g_pad, **at), _scalar(0, call.args[1]))
        gathered = picked if gathered is None else _add(gathered, picked)
    assert gathered is not None
    return [_unbatch(gathered, single), _zeros(call.args[1])]


@_rule("avg_pool2d")
def _avg_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d avg_pool2d(x) = the data adjoint of a depthwise all-ones conv2d, of g / window counts."""
    (x, single), a = _as_batch(call.args[0]), call.attrs
    g = op_call("expand_dims", g, axis=0) if single else g
    t, hw = _tensor(call.args[0]), _image_hw(call.args[0], "avg_pool2d")
    channels = t.shape[-3]
    if not isinstance(channels, int):
        raise IRError(f"the gradient of avg_pool2d needs static channels, got {type_to_str(t)}")
    win = _pool_window(a.pool_size, a.strides, a.padding, a.ceil_mode)
    counts = const(_avg_divisor(win, hw, a.count_include_pad), t.dtype)
    ones = op_call("ones", shape=(channels, 1, *win.kernel), dtype=t.dtype)
    dx = _conv_data_grad(_div(g, counts), ones, channels, hw, win, groups=channels)
    return [_unbatch(dx, single)]


@_rule("global_avg_pool2d")
def _global_avg_pool2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d global_avg_pool2d(x) = g / (H * W) broadcast over H and W."""
    x = call.args[0]
    return [_div(_broadcast_like(g, x), _count(x, (2, 3)))]


# ---- normalisation, dropout, losses -------------------------------------------------------------

@_rule("softmax")
def _softmax_grad(call: Call, g: Expr) -> list[Expr]:
    """d softmax(x) = y * (g - sum(g * y)), y = softmax(x), summing along the axis."""
    y, axis = call, call.attrs.axis
    return [_mul(y, _sub(g, _sum(_mul(g, y), axis, keepdims=True)))]


@_rule("log_softmax")
def _log_softmax_grad(call: Call, g: Expr) -> list[Expr]:
    """d log_softmax(x) = g - softmax(x) * sum(g), summing along the axis."""
    x, axis = call.args[0], call.attrs.axis
    return [_sub(g, _mul(op_call("softmax", x, axis=axis), _sum(g, axis, keepdims=True)))]


def _standardized_grad(dy: Expr, xhat: Expr, rstd: Expr, axes: tuple[int, ...]) -> Expr:
    """d of xhat = (x - mean(x)) * rstd: rstd * (dy - mean(dy) - xhat * mean(dy * xhat))."""
    centred = _sub(dy, _mean(dy, axes))
    return _mul(rstd, _sub(centred, _mul(xhat, _mean(_mul(dy, xhat), axes))))


def _affine_grads(call: Call, g: Expr, xhat: Expr, others: tuple[int, ...]) -> list[Expr]:
    """The adjoints of gamma and beta in xhat * gamma + beta (zero if scale/center is off)."""
    _, gamma, beta = call.args[:3]
    d_gamma = _sum(_mul(g, xhat), others) if call.attrs.scale else _zeros(gamma)
    d_beta = _sum(g, others) if call.attrs.center else _zeros(beta)
    return [d_gamma, d_beta]


@_rule("batch_norm")
def _batch_norm_grad(call: Call, g: Expr) -> list[Expr]:
    """d batch_norm: g.0 through (x - mean) * rstd * gamma + beta; g.1, g.2 via the statistics."""
    x, gamma, _, moving_mean, moving_var = call.args
    a = call.attrs
    ndim = _tensor(x).ndim
    axis, others = a.axis % ndim, _others(a.axis, ndim)
    g_out, g_mean, g_var = (TupleGetItem(g, i) for i in range(3))

    def spread(v: Expr) -> Expr:
        return _along(v, axis, ndim)

    mean = op_call("mean", x, axis=others) if a.training else moving_mean
    centred = _sub(x, spread(mean))
    var = op_call("mean", _mul(centred, centred), axis=others) if a.training else moving_var
    rstd = spread(op_call("rsqrt", _add(var, _scalar(a.epsilon, x))))
    xhat = _mul(centred, rstd)
    dy = _mul(g_out, spread(gamma)) if a.scale else g_out
    if a.training:  # the batch statistics depend on x; the moving ones blend them in
        m, n = _scalar(a.momentum, x), _count(x, others)
        via_stats = _add(spread(g_mean), _mul(_mul(spread(g_var), _scalar(2, x)), centred))
        dx = _add(_standardized_grad(dy, xhat, rstd, others), _div(_mul(m, via_stats), n))
        keep = _scalar(1 - a.momentum, x)
        d_moving = [_mul(keep, g_mean), _mul(keep, g_var)]
    else:
        dx = _mul(dy, rstd)
        d_mean = _sub(g_mean, _sum(_mul(dy, rstd), others))
        rstd3 = _mul(_mul(rstd, rstd), rstd)
        d_var = _sub(g_var, _sum(_mul(_mul(dy, centred), _mul(rstd3, _scalar(0.5, x))), others))
        d_moving = [d_mean, d_var]
    return [dx, *_affine_grads(call, g_out, xhat, others), *d_moving]


@_rule("layer_norm")
def _layer_norm_grad(call: Call, g: Expr) -> list[Expr]:
    """d layer_norm(x) = rstd * (dy - mean(dy) - xhat * mean(dy * xhat)), dy = g * gamma."""
    x, gamma, _ = call.args
    a = call.attrs
    ndim = _tensor(x).ndim
    axis = (a.axis % ndim,)
    centred = _sub(x, _mean(x, axis))
    rstd = op_call("rsqrt", _add(_mean(_mul(centred, centred), axis), _scalar(a.epsilon, x)))
    xhat = _mul(centred, rstd)
    dy = _mul(g, _along(gamma, a.axis, ndim)) if a.scale else g
    dx = _standardized_grad(dy, xhat, rstd, axis)
    return [dx, *_affine_grads(call, g, xhat, _others(a.axis, ndim))]


@_rule("dropout")
def _dropout_grad(call: Call, g: Expr) -> list[Expr]:
    """d dropout(x) = dropout(g) with the same seed: the same mask and scale (or the identity)."""
    return [op_call("dropout", g, **call.attrs)]


@_rule("bias_add")
def _bias_add_grad(call: Call, g: Expr) -> list[Expr]:
    """d bias_add(x, b) = (g, sum of g over every axis but `axis`)."""
    x = call.args[0]
    return [g, _sum(g, _others(call.attrs.axis, _tensor(x).ndim))]


@_rule("softmax_cross_entropy")
def _softmax_cross_entropy_grad(call: Call, g: Expr) -> list[Expr]:
    """d sce(z, t) = (g/n * (softmax(z) * sum(t) - t), -g/n * log_softmax(z)), n rows."""
    logits, labels = call.args
    per_row = _div(g, _count(logits, range(_tensor(logits).ndim - 1)))
    mass = _sum(labels, -1, keepdims=True)
    d_logits = _mul(per_row, _sub(_mul(op_call("softmax", logits, axis=-1), mass), labels))
    d_labels = _mul(op_call("negative", per_row), op_call("log_softmax", logits, axis=-1))
    return [d_logits, d_labels]


# ---- padding and flattening ------------------------------------------------------------------------------------

@_rule("pad")
def _pad_grad(call: Call, g: Expr) -> list[Expr]:
    """d pad(x) = g[before:-after] on every axis."""
    widths = call.attrs.pad_width
    ends = tuple(-after if after else _END for after in widths[1::2])
    return [op_call("strided_slice", g, begin=widths[0::2], end=ends)]


@_rule("flatten")
def _flatten_grad(call: Call, g: Expr) -> list[Expr]:
    """d flatten(x) = reshape_like(g, x)."""
    return [ops.reshape_like(g, call.args[0])]
