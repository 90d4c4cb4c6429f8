"""Convolution: conv2d (TVM's: NCHW data, or one CHW example; OIHW weight; groups); conv1d
(NCW data, OIW weight: conv2d over a height of 1, window.py); conv2d_nchwc (conv2d in the
blocked layouts NCHW{i}c / OIHW{i}i{o}o, which AlterOpLayout rewrites conv2d into);
conv2d_transpose (NCHW data, IOHW weight as TVM's: the adjoint of conv2d's data, conv2d
being its own adjoint).

The window geometry (strides, padding, dilation, the output size) is window.py's. The
NumPy reference contracts sliding-window views with the filters; the JAX lowering is
``lax.conv_general_dilated``; the compute rule reduces over in-channels and the taps. Both take
any numeric dtype; ``out_dtype`` is the dtype the products are summed in and the result's (int8
inputs accumulated in int32), the inputs converted to it first.
"""
from __future__ import annotations

from typing import Any as AnyValue, Callable

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, Let, Var
from relaydsl.ir.types import Any, Dim, TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp, lax
from relaydsl.op.nn.common import (
    Array, Inputs, all_positive, non_negative, out_dtype_attr, positive,
)
from relaydsl.op.nn.shape import pad
from relaydsl.op.nn.window import (
    Window, as_batch, compute_via_2d, gradient_via_2d, image, out_size, reference_via_2d,
    single_example, unbatch, window_dim,
)
from relaydsl.op.quantize_rule import product_rule
from relaydsl.op.registry import Attr, OpDef, OpPattern, Traits, ops, register
from relaydsl.op.transform.layout import Layout, layout_transform, transform_array
from relaydsl.te import tensor as T
from relaydsl.te.expr import PrimExpr, cast, const, equal, select
from relaydsl.te.tensor import Tensor, compute, reduce_axis
from relaydsl.typing.relations import (
    FLOAT, NUMERIC, RelationContext, is_unknown, tensor_arg,
)

STRIDES = Attr("strides", "pair", (1, 1), all_positive, "window step (h, w)")
PADDING = Attr("padding", "padding", (0, 0, 0, 0), non_negative,
               "an int, (h, w) or (top, left, bottom, right)")
DILATION = Attr("dilation", "pair", (1, 1), all_positive, "kernel dilation (h, w)")
GROUPS = Attr("groups", "int", 1, positive, "channel groups (groups = in-channels: depthwise)")
CHANNELS = Attr("channels", "optional_int", None,
                doc="out-channels O; with kernel_size, lets inference infer the weight")


def _check_channels(c: Inputs, attrs: Attrs, cin: Dim, cin_per_group: Dim, cout: Dim) -> None:
    """A convolution's channels agree: data and weight in-channels (per group), out-channels
    divisible by the groups, and the `channels` attribute where given."""
    groups = attrs.groups
    mismatch = f"the in-channels of {c.arg(0)} and {c.arg(1)} differ"
    if groups == 1:
        c.same(cin, cin_per_group, mismatch)
    elif isinstance(cin_per_group, int):
        c.same(cin, cin_per_group * groups, f"{mismatch} (with groups={groups})")
    if isinstance(cout, int) and cout % groups:
        c.fail(f"the out-channels of {c.arg(1)} are not divisible by groups={groups}")
    if attrs.channels is not None:
        c.same(cout, attrs.channels, f"{c.arg(1)} does not have channels={attrs.channels}")


def _conv2d_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type | None:
    if is_unknown(args[1]):  # a hidden parameter: OIHW from channels, kernel_size and the data
        data = tensor_arg(ctx, args[0], "conv2d: data")
        if attrs.channels is None or attrs.kernel_size is None or data.ndim not in (3, 4):
            return None
        cin = ctx.resolve_dim(data.shape[-3])
        cin_per_group = cin // attrs.groups if isinstance(cin, int) else cin
        args[1] = ctx.unify_types(
            args[1], TensorType((attrs.channels, cin_per_group, *attrs.kernel_size), data.dtype),
            "conv2d: the weight")
    c = Inputs(ctx, "conv2d", args, ("data", "weight"), NUMERIC, out_dtype=attrs.out_dtype)
    data, (cout, cin_per_group, *kernel) = image(c), c.shape(1, rank=4)
    n, cin, *hw = data
    _check_channels(c, attrs, cin, cin_per_group, cout)
    if attrs.kernel_size is not None:
        for k, want in zip(kernel, attrs.kernel_size):
            c.same(k, want, f"{c.arg(1)} does not have kernel_size={attrs.kernel_size}")
    # The kernel may be symbolic here (an unknown weight): out_dims, the one method a
    # relation calls, reads it as a Dim.
    oh, ow = Window.conv(attrs, kernel).out_dims(c, hw)  # pyright: ignore[reportArgumentType]
    return c.tensor((n, cout, oh, ow)[n is None:], attrs.out_dtype)


@single_example
def _conv2d_np(data: np.ndarray, weight: np.ndarray, *, groups: int, out_dtype: str | None,
               **attrs: object) -> np.ndarray:
    """Each group's windows (n, cin/groups, oh, ow, kh, kw) contracted with its filters."""
    if out_dtype is not None:
        data, weight = data.astype(out_dtype), weight.astype(out_dtype)
    windows = Window.conv(attrs, weight.shape[2:]).np_windows(data, 0.0)
    per_group = [
        np.tensordot(w_in, w, axes=([1, 4, 5], [1, 2, 3]))  # (n, oh, ow, cout/groups)
        for w_in, w in zip(np.split(windows, groups, axis=1), np.split(weight, groups, axis=0))
    ]
    return np.ascontiguousarray(np.concatenate(per_group, axis=-1).transpose(0, 3, 1, 2))


@single_example
def _conv2d_jax(data: Array, weight: Array, *, groups: int, out_dtype: str | None,
                **attrs: object) -> Array:
    win = Window.conv(attrs, weight.shape[2:])
    if out_dtype is not None:
        data, weight = data.astype(out_dtype), weight.astype(out_dtype)
    return lax.conv_general_dilated(
        data, weight, win.strides, win.pad_pairs(data.shape[-2:]), rhs_dilation=win.dilation,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
        precision=lax.Precision.HIGHEST,
    )


# Along one spatial axis, conv2d computes y[o] = sum_k xpad[o*s + k*d] w[k] (stride s, dilation d,
# xpad padded by p before). Its adjoints are again convolutions:
#   dx[i] = sum_k gs[i + p - k*d] w[k], with gs = g spread out by s (s - 1 zeros between
#           elements): a stride-1 conv of gs, padded by d*(k-1) - p before, with the flipped w;
#   dw[k] = sum_o xpad[k*d + o*s] g[o]: a conv of xpad with g as the kernel, stride d and
#           dilation s, contracting over the batch (so batch and channels trade places).


def _spread(g: Expr, channels: int, out_hw: tuple[int, int], strides: tuple[int, int]) -> Expr:
    """NCHW g with s - 1 zeros after each element along H and W: (n, c, oh*sh, ow*sw)."""
    (oh, ow), (sh, sw) = out_hw, strides
    cells = ops.expand_dims(ops.expand_dims(g, axis=3), axis=5)  # (n, c, oh, 1, ow, 1)
    cells = pad(cells, pad_width=(0, 0, 0, 0, 0, 0, 0, sh - 1, 0, 0, 0, sw - 1))
    return ops.reshape(cells, newshape=(-1, channels, oh * sh, ow * sw))


def conv_data_grad(g: Expr, flipped: Expr, channels: int, hw: tuple[int, int], win: Window,
                   groups: int) -> Expr:
    """The adjoint of a conv2d's NCHW data (also avg_pool2d's): a stride-1 conv2d of g spread
    by the strides, padded (or cropped) to give back hw, with the flipped transposed weight
    `flipped`."""
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
        g = ops.strided_slice(g, begin=begin, end=end, axes=(2, 3))
    padding = tuple(max(p, 0) for p in (*before, *after))
    return conv2d(g, flipped, padding=padding, dilation=win.dilation, groups=groups)


def _flip_transpose(w: Expr, groups: int) -> Expr:
    """OIHW weight (o, c/G, kh, kw) as the transposed convolution's: (c, o/G, kh, kw) flipped."""
    o, cg, kh, kw = gu.static_dims(w, "conv2d")
    w = ops.reshape(w, newshape=(groups, o // groups, cg, kh, kw))
    w = ops.reshape(ops.transpose(w, axes=(0, 2, 1, 3, 4)),
                    newshape=(groups * cg, o // groups, kh, kw))
    return ops.strided_slice(w, begin=(kh - 1, kw - 1), end=(-kh - 1, -kw - 1),
                             strides=(-1, -1), axes=(2, 3))


def _conv_weight_grad(x: Expr, g: Expr, weight: tuple[int, ...], hw: tuple[int, int],
                      win: Window, groups: int) -> Expr:
    """dw[o, c] = sum over the batch of x[:, c] correlated with g[:, o] (within a group)."""
    o, cg, kh, kw = weight
    (h, w), (oh, ow) = hw, win.out_hw(hw)
    data = ops.reshape(x, newshape=(-1, groups, cg, h, w))
    data = ops.reshape(ops.transpose(data, axes=(2, 1, 0, 3, 4)),
                       newshape=(cg, -1, h, w))  # (c/G, G * n, h, w): batch and channels traded
    kernel = ops.reshape(g, newshape=(-1, groups, o // groups, oh, ow))
    kernel = ops.reshape(ops.transpose(kernel, axes=(1, 2, 0, 3, 4)),
                         newshape=(o, -1, oh, ow))  # (o, n, oh, ow)
    dw = conv2d(data, kernel, strides=win.dilation, padding=win.pads,
                dilation=win.strides, groups=groups)  # (c/G, o, kh', kw') with kh' >= kh
    dw = ops.transpose(dw, axes=(1, 0, 2, 3))
    full = [out_size(hw[i], (oh, ow)[i], win.dilation[i], win.strides[i], win.pads[i],
                     win.pads[i + 2], False) for i in (0, 1)]
    if full != [kh, kw]:
        dw = ops.strided_slice(dw, begin=(0, 0), end=(kh, kw), axes=(2, 3))
    return dw


def _conv2d_grad(call: Call, g: Expr) -> list[Expr]:
    """d conv2d(x, w) = (conv2d(dilate(g, strides), flip(w)ᵀ), conv2d(xᵀ, gᵀ)), g in x's dtype."""
    (x, single), w, a = as_batch(call.args[0]), call.args[1], call.attrs
    if a.out_dtype not in (None, gu.tensor_type(call.args[0]).dtype):
        g = ops.cast_like(g, call.args[0])
    g = ops.expand_dims(g, axis=0) if single else g
    weight, hw = gu.static_dims(w, "conv2d"), gu.image_hw(call.args[0], "conv2d")
    win = Window.conv(a, weight[2:])
    dx = conv_data_grad(g, _flip_transpose(w, a.groups), weight[0], hw, win, a.groups)
    return [unbatch(dx, single), _conv_weight_grad(x, g, weight, hw, win, a.groups)]


def _conv2d_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, weight = inputs
    cout, cin_per_group, kh, kw = weight.shape
    per_group = cout // attrs.groups
    win = Window.conv(attrs, (kh, kw))
    dtype = str(out_type.dtype)  # a compute rule sees concrete types

    def f(*o: PrimExpr) -> PrimExpr:
        *batch, co, y, x = o
        rc, ry, rx = reduce_axis(cin_per_group, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
        c = rc if attrs.groups == 1 else co // per_group * cin_per_group + rc
        iy, ix = win.te_position(y, x, ry, rx)
        a, b = win.te_read(data, (*batch, c), iy, ix, 0), weight[co, rc, ry, rx]
        if data.dtype != dtype:
            a, b = cast(dtype, a), cast(dtype, b)
        return T.sum(a * b, [rc, ry, rx])

    return compute(out_type.concrete_shape(), f, "T_conv2d")


conv2d = register(OpDef(
    "conv2d", ("data", "weight"), _conv2d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_conv2d_np, jax_lower=_conv2d_jax, compute=_conv2d_compute, gradient=_conv2d_grad,
    attrs=(
        STRIDES, PADDING,
        DILATION,
        GROUPS, CHANNELS,
        Attr("kernel_size", "optional_pair", None, all_positive, "kernel (h, w)"),
        out_dtype_attr(keyword_only=True),  # TVM's layouts come first
    ),
    doc="2-D cross-correlation of NCHW (or one CHW) data with OIHW weight, summed in out_dtype; "
        "in-channels = I * groups",
    traits=Traits(infers_inputs=(1,), quantize=product_rule(weight_axis=0, out_axis=1)),
))

# ---- conv1d -------------------------------------------------------------------------------------


def _conv1d_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type | None:
    if is_unknown(args[1]):  # a hidden parameter: OIW from channels, kernel_size and the data
        data = tensor_arg(ctx, args[0], "conv1d: data")
        if attrs.channels is None or attrs.kernel_size is None or data.ndim != 3:
            return None
        cin = ctx.resolve_dim(data.shape[1])
        cin_per_group = cin // attrs.groups if isinstance(cin, int) else cin
        args[1] = ctx.unify_types(
            args[1], TensorType((attrs.channels, cin_per_group, *attrs.kernel_size), data.dtype),
            "conv1d: the weight")
    c = Inputs(ctx, "conv1d", args, ("data", "weight"), NUMERIC)
    (n, cin, w), (cout, cin_per_group, k) = c.shape(0, rank=3), c.shape(1, rank=3)
    _check_channels(c, attrs, cin, cin_per_group, cout)
    if attrs.kernel_size is not None:
        c.same(k, attrs.kernel_size[0], f"{c.arg(1)} does not have kernel_size={attrs.kernel_size}")
    (stride,), (dilation,) = attrs.strides, attrs.dilation
    ow = window_dim(c, w, k, stride, dilation, attrs.padding, False, 2)
    return c.tensor((n, cout, ow), attrs.out_dtype)


conv1d = register(OpDef(
    "conv1d", ("data", "weight"), _conv1d_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=reference_via_2d(conv2d.numpy_ref), jax_lower=reference_via_2d(conv2d.jax_lower),
    compute=compute_via_2d(conv2d.compute),
    gradient=gradient_via_2d(
        conv2d, "d conv1d(x, w) = (conv1d(spread(g), flip(w)ᵀ), conv1d(xᵀ, gᵀ)), as conv2d's."),
    attrs=(
        Attr("strides", "single", (1,), all_positive, "window step (w,)"),
        Attr("padding", "padding1d", (0, 0), non_negative, "an int or (left, right)"),
        Attr("dilation", "single", (1,), all_positive, "kernel dilation (w,)"),
        GROUPS, CHANNELS,
        Attr("kernel_size", "optional_single", None, all_positive, "kernel (w,)"),
        out_dtype_attr(keyword_only=True),  # TVM's layouts come first
    ),
    doc="1-D cross-correlation of NCW data with OIW weight, summed in out_dtype; "
        "in-channels = I * groups",
    traits=Traits(infers_inputs=(1,)),
))

# ---- conv2d_nchwc -------------------------------------------------------------------------------
# conv2d in TVM's blocked layouts (its contrib_conv2d_NCHWc): data NCHW{i}c (N, C/i, H, W, i),
# weight OIHW{i}i{o}o (O/o, C/i, KH, KW, i, o), result NCHW{o}c (N, O/o, OH, OW, o). The block
# sizes are the shapes' last dims. Each output pixel's o-wide block is a sum of weight rows
# contiguous along o, so the loop over the block vectorises (AlterOpLayout makes these calls).


def nchwc_layouts(in_block: int, out_block: int) -> tuple[str, str, str]:
    """The data, weight and result layouts of a conv2d_nchwc with these block sizes."""
    return f"NCHW{in_block}c", f"OIHW{in_block}i{out_block}o", f"NCHW{out_block}c"


def _conv2d_nchwc_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "conv2d_nchwc", args, ("data", "weight"), NUMERIC)
    n, cin_blocks, h, w, block = c.shape(0, rank=5)
    cout_blocks, w_cin_blocks, kh, kw, w_block, out_block = c.shape(1, rank=6)
    c.same(cin_blocks, w_cin_blocks, f"the in-channel blocks of {c.arg(0)} and {c.arg(1)} differ")
    c.same(block, w_block, f"the in-channel block sizes of {c.arg(0)} and {c.arg(1)} differ")
    oh, ow = Window.conv(attrs, (kh, kw)).out_dims(c, (h, w))  # pyright: ignore[reportArgumentType]
    return c.tensor((n, cout_blocks, oh, ow, out_block))


def _via_nchw(conv: Callable[..., Array], xp: AnyValue) -> Callable[..., Array]:
    """conv2d_nchwc's reference (or lowering) from conv2d's `conv`: unblocked, run, reblocked."""

    def run(data: Array, weight: Array, **attrs: AnyValue) -> Array:
        data_layout, weight_layout, out_layout = nchwc_layouts(data.shape[-1], weight.shape[-1])
        out = conv(transform_array(data, data_layout, "NCHW", xp),
                   transform_array(weight, weight_layout, "OIHW", xp),
                   groups=1, out_dtype=None, **attrs)
        return transform_array(out, "NCHW", out_layout, xp)

    return run


def _conv2d_nchwc_np(data: np.ndarray, weight: np.ndarray, **attrs: AnyValue) -> np.ndarray:
    return np.ascontiguousarray(_via_nchw(_conv2d_np, np)(data, weight, **attrs))


def _conv2d_nchwc_grad(call: Call, g: Expr) -> list[Expr]:
    """d conv2d_nchwc(x, w) = conv2d's adjoints of the unblocked x and w, blocked again."""
    x, w = call.args
    in_block, out_block = gu.tensor_type(w).concrete_shape()[-2:]
    data_layout, weight_layout, out_layout = nchwc_layouts(in_block, out_block)
    g_nchw = layout_transform(g, src_layout=out_layout, dst_layout="NCHW")
    adjoints: list[Expr] = []
    for i, layout in enumerate((data_layout, weight_layout)):  # fresh variables per adjoint
        unblocked = [layout_transform(x, src_layout=data_layout, dst_layout="NCHW"),
                     layout_transform(w, src_layout=weight_layout, dst_layout="OIHW")]
        plain = [Var("data", _unblocked_type(x, data_layout, "NCHW")),
                 Var("weight", _unblocked_type(w, weight_layout, "OIHW"))]
        call2d = conv2d(*plain, **call.attrs)
        adjoint = _conv2d_grad(call2d, g_nchw)[i]
        adjoint = layout_transform(adjoint, src_layout="OIHW" if i else "NCHW", dst_layout=layout)
        for v, u in reversed(list(zip(plain, unblocked))):
            adjoint = Let(v, u, adjoint)
        adjoints.append(adjoint)
    return adjoints


def _unblocked_type(x: Expr, blocked: str, unblocked: str) -> TensorType:
    """The type of `x`, of layout `blocked`, in layout `unblocked`."""
    t = gu.tensor_type(x)
    src, dst = Layout.parse(blocked), Layout.parse(unblocked)
    return TensorType(dst.shape(src.primal_sizes(t.concrete_shape())), t.dtype)


def _conv2d_nchwc_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    data, weight = inputs
    cin_blocks, kh, kw, block = weight.shape[1], weight.shape[2], weight.shape[3], weight.shape[4]
    h, w = data.shape[2:4]
    win = Window.conv(attrs, (kh, kw))
    padded = any(win.pads)

    def f(n: PrimExpr, ob: PrimExpr, y: PrimExpr, x: PrimExpr, oc: PrimExpr) -> PrimExpr:
        rc, ry, rx = reduce_axis(cin_blocks, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
        ri = reduce_axis(block, "ri")
        iy, ix = win.te_position(y, x, ry, rx)
        a = data[n, rc, iy, ix, ri]
        if padded:
            inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
            a = select(inside, a, const(0, data.dtype))
        return T.sum(a * weight[ob, rc, ry, rx, ri, oc], [rc, ry, rx, ri])

    return compute(out_type.concrete_shape(), f, "T_conv2d_nchwc")


conv2d_nchwc = register(OpDef(
    "conv2d_nchwc", ("data", "weight"), _conv2d_nchwc_rel, OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_conv2d_nchwc_np, jax_lower=_via_nchw(_conv2d_jax, jnp),
    compute=_conv2d_nchwc_compute, gradient=_conv2d_nchwc_grad,
    attrs=(STRIDES, PADDING,
           DILATION),
    doc="conv2d of NCHW{i}c data (N, C/i, H, W, i) with OIHW{i}i{o}o weight "
        "(O/o, C/i, KH, KW, i, o), giving NCHW{o}c: the blocked layout AlterOpLayout uses",
))


# ---- conv2d_transpose ---------------------------------------------------------------------------
# conv2d_transpose(x, w) scatters each input element through the kernel: along one axis
# y[i*s + k*d - p] += x[i] w[k], so y has (size - 1)*s - p_before - p_after + d*(k - 1) + 1
# + output_padding elements. It is the adjoint of x' -> conv2d(x', w) (w read as OIHW) with
# the same strides, padding, dilation and groups; output_padding < strides only lengthens the
# result, which conv2d's windows then leave out. Its gradient is therefore conv2d's forward
# (data) and conv2d's weight adjoint with the data and the output gradient in each other's
# places.


def _transpose_size(size: Dim, k: Dim, stride: int, dilation: int, pads: tuple[int, int],
                    extra: int) -> Dim:
    if not (isinstance(size, int) and isinstance(k, int)):
        return Any
    return (size - 1) * stride - pads[0] - pads[1] + dilation * (k - 1) + 1 + extra


def _conv2d_transpose_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "conv2d_transpose", args, ("data", "weight"), FLOAT)
    (n, cin, *hw), (w_cin, cout_per_group, *kernel) = c.shape(0, rank=4), c.shape(1, rank=4)
    groups = attrs.groups
    c.same(cin, w_cin, f"the in-channels of {c.arg(0)} and {c.arg(1)} (its first axis) differ")
    if isinstance(cin, int) and cin % groups:
        c.fail(f"the in-channels of {c.arg(0)} are not divisible by groups={groups}")
    cout = cout_per_group * groups if isinstance(cout_per_group, int) else Any
    if attrs.channels is not None:
        cout = c.same(cout, attrs.channels, f"{c.arg(1)} does not give channels="
                      f"{attrs.channels} (weight.shape[1] * groups)")
    if attrs.kernel_size is not None:
        for k, want in zip(kernel, attrs.kernel_size):
            c.same(k, want, f"{c.arg(1)} does not have kernel_size={attrs.kernel_size}")
    for extra, stride in zip(attrs.output_padding, attrs.strides):
        if extra >= stride:
            c.fail(f"output_padding {attrs.output_padding} must be smaller than the strides "
                   f"{attrs.strides}")
    p = attrs.padding
    out = [_transpose_size(hw[i], kernel[i], attrs.strides[i], attrs.dilation[i],
                           (p[i], p[i + 2]), attrs.output_padding[i]) for i in (0, 1)]
    if any(isinstance(o, int) and o < 1 for o in out):
        c.fail(f"the padding {p} leaves no output of {c.arg(0)} with {c.arg(1)}")
    return c.tensor((n, cout, *out))


def _conv2d_transpose_np(data: np.ndarray, weight: np.ndarray, *, strides: tuple[int, int],
                         padding: tuple[int, ...], output_padding: tuple[int, int],
                         dilation: tuple[int, int], groups: int, **_: object) -> np.ndarray:
    """Each kernel tap's products added at their strided positions, then the padding cut."""
    n, cin, h, w = data.shape
    _, per_group, kh, kw = weight.shape
    (sh, sw), (dh, dw), (top, left) = strides, dilation, padding[:2]
    oh, ow = (_transpose_size(size, k, s, d, (padding[i], padding[i + 2]), output_padding[i])
              for i, (size, k, s, d) in enumerate(((h, kh, sh, dh), (w, kw, sw, dw))))
    assert isinstance(oh, int) and isinstance(ow, int)
    canvas = np.zeros((n, per_group * groups, max((h - 1) * sh + dh * (kh - 1) + 1, top + oh),
                       max((w - 1) * sw + dw * (kw - 1) + 1, left + ow)), data.dtype)
    cg = cin // groups
    for g in range(groups):
        x, k = data[:, g * cg:(g + 1) * cg], weight[g * cg:(g + 1) * cg]
        out = canvas[:, g * per_group:(g + 1) * per_group]
        for ky, kx in np.ndindex(kh, kw):
            out[:, :, ky * dh:ky * dh + (h - 1) * sh + 1:sh,
                kx * dw:kx * dw + (w - 1) * sw + 1:sw] += np.einsum("nchw,co->nohw", x,
                                                                    k[:, :, ky, kx])
    return canvas[:, :, top:top + oh, left:left + ow]


def _conv2d_transpose_jax(data: Array, weight: Array, *, strides: tuple[int, int],
                          padding: tuple[int, ...], output_padding: tuple[int, int],
                          dilation: tuple[int, int], groups: int, **_: object) -> Array:
    """A stride-1 convolution of the input dilated by the strides with the flipped kernel."""
    cin, per_group, kh, kw = weight.shape
    kernel = weight.reshape(groups, cin // groups, per_group, kh, kw).transpose(0, 2, 1, 3, 4)
    kernel = kernel.reshape(groups * per_group, cin // groups, kh, kw)[:, :, ::-1, ::-1]
    pads = [(dilation[i] * (k - 1) - padding[i],
             dilation[i] * (k - 1) - padding[i + 2] + output_padding[i])
            for i, k in enumerate((kh, kw))]
    return lax.conv_general_dilated(
        data, kernel, (1, 1), pads, lhs_dilation=strides, rhs_dilation=dilation,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
        precision=lax.Precision.HIGHEST,
    )


def _conv2d_transpose_grad(call: Call, g: Expr) -> list[Expr]:
    """d conv2d_transpose(x, w) = (conv2d(g, w), conv2d(gᵀ, xᵀ)), conv2d's attributes."""
    x, w, a = call.args[0], call.args[1], call.attrs
    weight, hw = gu.static_dims(w, "conv2d_transpose"), gu.image_hw(x, "conv2d_transpose")
    p = a.padding
    out_hw = tuple(_transpose_size(hw[i], weight[2 + i], a.strides[i], a.dilation[i],
                                   (p[i], p[i + 2]), a.output_padding[i]) for i in (0, 1))
    assert isinstance(out_hw[0], int) and isinstance(out_hw[1], int)
    win = Window.conv(a, weight[2:])
    dx = conv2d(g, w, strides=a.strides, padding=p, dilation=a.dilation, groups=a.groups)
    return [dx, _conv_weight_grad(g, x, weight, (out_hw[0], out_hw[1]), win, a.groups)]


def _conv2d_transpose_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """y[n, o, y, x] sums x[n, c, i, j] w[c, o, ky, kx] over the taps with i*s + ky*d - pad = y
    (and likewise along W): a tap contributes where y + pad - ky*d is a multiple of s inside x."""
    data, weight = inputs
    cin, per_group, kh, kw = weight.shape
    cg = cin // attrs.groups
    h, w = data.shape[-2:]
    (sh, sw), (dh, dw), (top, left) = attrs.strides, attrs.dilation, attrs.padding[:2]

    def source(o: PrimExpr, tap: PrimExpr, stride: int, dilation: int, before: int,
               size: int) -> tuple[PrimExpr, PrimExpr]:
        """The input index feeding output `o` through `tap`, and whether there is one."""
        t = o + before - (tap * dilation if dilation != 1 else tap)
        i = t // stride if stride != 1 else t
        ok = (t >= 0) & (i < size)
        return i, (ok & equal(t % stride, 0)) if stride != 1 else ok

    def f(n: PrimExpr, co: PrimExpr, y: PrimExpr, x: PrimExpr) -> PrimExpr:
        rc, ry, rx = reduce_axis(cg, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
        c = rc if attrs.groups == 1 else co // per_group * cg + rc
        iy, ok_y = source(y, ry, sh, dh, top, h)
        ix, ok_x = source(x, rx, sw, dw, left, w)
        term = data[n, c, iy, ix] * weight[c, co % per_group if attrs.groups > 1 else co, ry, rx]
        return T.sum(select(ok_y & ok_x, term, const(0, data.dtype)), [rc, ry, rx])

    return compute(out_type.concrete_shape(), f, "T_conv2d_transpose")


conv2d_transpose = register(OpDef(
    "conv2d_transpose", ("data", "weight"), _conv2d_transpose_rel,
    OpPattern.OUT_ELEMWISE_FUSABLE,
    numpy_ref=_conv2d_transpose_np, jax_lower=_conv2d_transpose_jax,
    compute=_conv2d_transpose_compute, gradient=_conv2d_transpose_grad,
    attrs=(
        STRIDES, PADDING,
        DILATION,
        Attr("groups", "int", 1, positive, "channel groups"),
        Attr("channels", "optional_int", None, doc="out-channels: weight.shape[1] * groups"),
        Attr("kernel_size", "optional_pair", None, all_positive, "kernel (h, w)"),
        # keyword only: TVM's layouts come before it
        Attr("output_padding", "pair", (0, 0), non_negative,
             "extra rows and columns at the bottom and right (h, w), each below the stride",
             keyword_only=True),
    ),
    doc="transposed 2-D convolution of NCHW data with IOHW weight (TVM's): the adjoint of "
        "conv2d's data; out-channels = O * groups",
))
