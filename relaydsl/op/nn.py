"""Neural-network ops: products, convolution, pooling, normalisation, dropout, losses.

Conventions (TVM's unless noted):

* Every op takes floating-point tensors of one dtype; integer inputs are type errors.
* Images are NCHW and conv2d weights OIHW. ``strides``, ``dilation`` and ``pool_size``
  are an int or ``(h, w)``; ``padding`` is an int, ``(h, w)`` or ``(top, left, bottom,
  right)``. A window covers ``dilation * (k - 1) + 1`` input positions and there are
  ``floor((size + pad_before + pad_after - extent) / stride) + 1`` of them along an axis.
* Pooling with ``ceil_mode`` rounds that division up, and, as in PyTorch (not TVM), drops
  a last window that would start inside the bottom/right padding. The extra windows are
  padded with -inf (max) or left out of the count (avg). ``avg_pool2d`` divides by the
  number of input elements a window covers; ``count_include_pad`` also counts the explicit
  padding (never ceil_mode's extra padding). The pools are OUT_ELEMWISE_FUSABLE, as in
  TVM: an elementwise consumer fuses into them.
* ``max_pool2d_grad(out_grad, data)``, the adjoint of ``max_pool2d`` that its gradient rule
  uses, adds each window's gradient at the window's first maximum (row-major), as JAX does.
* ``batch_norm`` returns ``(out, mean, var)``: in inference the moving statistics
  unchanged, in training the updated moving statistics
  ``(1 - momentum) * moving + momentum * batch`` (batch variance is biased).
* ``dropout`` with ``training=True`` keeps an element when a 32-bit hash of ``(seed, flat
  index)`` is at least ``rate * 2**32`` and scales kept elements by ``1 / (1 - rate)``;
  NumPy and JAX compute the same mask bit for bit (see ``_dropout_keep``).

Most references are written once over an array namespace ``xp`` (``numpy`` for the
interpreter, ``jax.numpy`` for the oracle); conv2d and the pools use sliding-window views in
NumPy and ``jax.lax`` in JAX. Type relations keep symbolic dims that pass through (dense on
``(n, 784)`` gives ``(n, units)``), unify dims that must be equal, and give ``Any`` where a
size would need arithmetic on a symbolic dim (a conv output over a symbolic height).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any as AnyValue, Callable, NoReturn, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from relaydsl.errors import RelayTypeError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import Any, Dim, DType, TensorType, TupleType, Type, type_to_str
from relaydsl.op._legacy import OpDef, register
from relaydsl.op.registry import REQUIRED, Attr, OpPattern
from relaydsl.typing.relations import (
    FLOAT, RelationContext, attr_axis, broadcast_shapes, is_unknown, known_product, require_dtype,
    same_dtype, tensor_arg,
)

Array = AnyValue  # a numpy.ndarray or a jax.Array
Relation = Callable[[list[Type], Attrs, RelationContext], Type]
IntOrPair = int | tuple[int, ...]  # an int_or_ints attribute


# ---- type relations ---------------------------------------------------------------------------

class _Inputs:
    """The arguments of one call of an nn op: tensors of one floating-point dtype.

    Failures name the op and show the offending input types.
    """

    def __init__(self, ctx: RelationContext, op: str, args: list[Type], names: Sequence[str]):
        self.ctx, self.op, self.names = ctx, op, names
        self.ts = [tensor_arg(ctx, a, f"{op}: {n}") for a, n in zip(args, names)]
        self.dtype: DType = same_dtype(ctx, self.ts, op)
        require_dtype(ctx, op, "the inputs", self.ts[0], FLOAT)

    def arg(self, i: int) -> str:
        """``data Tensor[(1, 3), float32]``: an argument's name and type, for messages."""
        return f"{self.names[i]} {type_to_str(self.ts[i])}"

    def fail(self, problem: str) -> NoReturn:
        self.ctx.fail(f"{self.op}: {problem}")

    def same(self, a: Dim, b: Dim, problem: str) -> Dim:
        return self.ctx.unify_dims(a, b, f"{self.op}: {problem}")

    def shape(self, i: int, rank: int | None = None, min_rank: int = 0) -> list[Dim]:
        """Argument i's dims (resolved), after checking its rank."""
        t = self.ts[i]
        if rank is not None and t.ndim != rank:
            self.fail(f"{self.arg(i)} must have rank {rank}")
        if t.ndim < min_rank:
            self.fail(f"{self.arg(i)} must have rank >= {min_rank}")
        return [self.ctx.resolve_dim(d) for d in t.shape]

    def axis(self, axis: int) -> int:
        """The `axis` attribute normalised for the first argument (data)."""
        return attr_axis(self.ctx, self.op, "axis", axis, self.ts[0])

    def vector(self, i: int, size: Dim, what: str) -> None:
        """Argument i must be 1-D with `size` elements."""
        (n,) = self.shape(i, rank=1)
        self.same(n, size, f"{self.arg(i)} must have {what} elements")

    def tensor(self, shape: Sequence[Dim]) -> TensorType:
        return TensorType(tuple(shape), self.dtype)


def _matmul_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "matmul", args, ("a", "b"))
    a, b = c.shape(0, min_rank=1), c.shape(1, min_rank=1)
    b_rows = b[-2] if len(b) > 1 else b[0]
    c.same(a[-1], b_rows, f"the contraction dimensions of {c.arg(0)} and {c.arg(1)} differ")
    try:
        batch = broadcast_shapes(ctx, a[:-2], b[:-2])
    except RelayTypeError:
        c.fail(f"the batch dimensions of {c.arg(0)} and {c.arg(1)} cannot be broadcast")
    rows = a[-2:-1]  # empty for a 1-D `a`
    cols = b[-1:] if len(b) > 1 else []
    return c.tensor((*batch, *rows, *cols))


def _dense_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type | None:
    if is_unknown(args[1]):  # a hidden parameter: (units, k) from the attribute and the data
        data = tensor_arg(ctx, args[0], "dense: data")
        if attrs.units is None or not data.shape:
            return None
        args[1] = ctx.unify_types(args[1], TensorType((attrs.units, data.shape[-1]), data.dtype),
                                  "dense: the weight")
    c = _Inputs(ctx, "dense", args, ("data", "weight"))
    data, (units, k) = c.shape(0, min_rank=1), c.shape(1, rank=2)
    c.same(data[-1], k, f"the reduction dimensions of {c.arg(0)} and {c.arg(1)} differ")
    if attrs.units is not None:
        c.same(units, attrs.units, f"{c.arg(1)} does not have units={attrs.units} rows")
    return c.tensor((*data[:-1], units))


def _batch_matmul_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "batch_matmul", args, ("x", "y"))
    (bx, *x), (by, *y) = c.shape(0, rank=3), c.shape(1, rank=3)
    m, kx = reversed(x) if attrs.transpose_a else x
    ky, n = reversed(y) if attrs.transpose_b else y
    c.same(kx, ky, f"the reduction dimensions of {c.arg(0)} and {c.arg(1)} differ")
    try:
        (batch,) = broadcast_shapes(ctx, [bx], [by])
    except RelayTypeError:
        c.fail(f"the batch dimensions of {c.arg(0)} and {c.arg(1)} must match or be 1")
    return c.tensor((batch, m, n))


def _spatial_out(c: _Inputs, hw: Sequence[Dim], kernel: Sequence[Dim], attrs: Attrs,
                 dilation: tuple[int, int], ceil_mode: bool) -> list[Dim]:
    """Output height and width of a 2-D window op; Any where an input size is symbolic."""
    strides, pads = _pair(attrs.strides), _padding(attrs.padding)
    out: list[Dim] = []
    for i in (0, 1):
        size, k = hw[i], kernel[i]
        if not (isinstance(size, int) and isinstance(k, int)):
            out.append(Any)
            continue
        n = _out_size(size, k, strides[i], dilation[i], pads[i], pads[i + 2], ceil_mode)
        if n < 1:
            c.fail(f"the window (size {k}, dilation {dilation[i]}) is larger than the padded "
                   f"input ({size} + {pads[i]} + {pads[i + 2]}) along axis {i + 2} of {c.arg(0)}")
        out.append(n)
    return out


def _image(c: _Inputs) -> list:
    """The data's (N, C, H, W) dims; N is None for a single CHW example."""
    data = c.shape(0)
    if len(data) not in (3, 4):
        c.fail(f"{c.arg(0)} must have rank 4 (NCHW) or 3 (one CHW example)")
    return [None, *data] if len(data) == 3 else data


def _conv2d_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type | None:
    if is_unknown(args[1]):  # a hidden parameter: OIHW from channels, kernel_size and the data
        data = tensor_arg(ctx, args[0], "conv2d: data")
        if attrs.channels is None or attrs.kernel_size is None or data.ndim not in (3, 4):
            return None
        cin = ctx.resolve_dim(data.shape[-3])
        cin_per_group = cin // attrs.groups if isinstance(cin, int) else cin
        kh, kw = _pair(attrs.kernel_size)
        args[1] = ctx.unify_types(
            args[1], TensorType((attrs.channels, cin_per_group, kh, kw), data.dtype),
            "conv2d: the weight")
    c = _Inputs(ctx, "conv2d", args, ("data", "weight"))
    data, (cout, cin_per_group, *kernel) = _image(c), c.shape(1, rank=4)
    n, cin, *hw = data
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
    if attrs.kernel_size is not None:
        for k, want in zip(kernel, _pair(attrs.kernel_size)):
            c.same(k, want, f"{c.arg(1)} does not have kernel_size={attrs.kernel_size}")
    oh, ow = _spatial_out(c, hw, kernel, attrs, _pair(attrs.dilation), ceil_mode=False)
    return c.tensor((n, cout, oh, ow)[n is None:])


def _pool_rel(op: str) -> Relation:
    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = _Inputs(ctx, op, args, ("data",))
        n, ch, *hw = _image(c)
        oh, ow = _spatial_out(c, hw, _pair(attrs.pool_size), attrs, (1, 1), attrs.ceil_mode)
        return c.tensor((n, ch, oh, ow)[n is None:])

    return rel


def _max_pool2d_grad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    pooled = _pool_rel("max_pool2d_grad")([args[1]], attrs, ctx)
    ctx.unify_types(args[0], pooled, "max_pool2d_grad: the output gradient must have the type "
                    f"of max_pool2d(data), {type_to_str(pooled)}")
    return args[1]


def _global_pool_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "global_avg_pool2d", args, ("data",))
    n, ch, _, _ = c.shape(0, rank=4)
    return c.tensor((n, ch, 1, 1))


def _softmax_rel(op: str) -> Relation:
    """softmax, log_softmax: the input type, rank >= 1, `axis` in range."""

    def rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
        c = _Inputs(ctx, op, args, ("data",))
        shape = c.shape(0, min_rank=1)
        c.axis(attrs.axis)
        return c.tensor(shape)

    return rel


def _per_channel_inputs(op: str, params: tuple[str, ...], args: list[Type], attrs: Attrs,
                        ctx: RelationContext) -> tuple[_Inputs, list[Dim], int]:
    """data of rank >= 1 and parameters each 1-D of size data.shape[axis]: (inputs, shape, axis).

    A parameter whose type is unknown (a model's hidden parameter) is given that type."""
    data_t = tensor_arg(ctx, args[0], f"{op}: data")
    for i in range(1, len(params) + 1):
        if is_unknown(args[i]) and data_t.ndim:
            size = data_t.shape[attr_axis(ctx, op, "axis", attrs.axis, data_t)]
            args[i] = ctx.unify_types(args[i], TensorType((size,), data_t.dtype),
                                      f"{op}: {params[i - 1]}")
    c = _Inputs(ctx, op, args, ("data", *params))
    data = c.shape(0, min_rank=1)
    axis = c.axis(attrs.axis)
    for i in range(1, len(params) + 1):
        c.vector(i, data[axis], f"data.shape[{axis}] = {type_to_str(data[axis])}")
    return c, data, axis


_BATCH_NORM_PARAMS = ("gamma", "beta", "moving_mean", "moving_var")


def _batch_norm_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c, data, axis = _per_channel_inputs("batch_norm", _BATCH_NORM_PARAMS, args, attrs, ctx)
    stats = c.tensor((data[axis],))
    return TupleType((c.tensor(data), stats, stats))


def _layer_norm_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c, data, _ = _per_channel_inputs("layer_norm", ("gamma", "beta"), args, attrs, ctx)
    return c.tensor(data)


def _bias_add_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c, data, _ = _per_channel_inputs("bias_add", ("bias",), args, attrs, ctx)
    return c.tensor(data)


def _dropout_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "dropout", args, ("data",))
    return c.tensor(c.shape(0))


def _pad_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "pad", args, ("data",))
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


def _flatten_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "flatten", args, ("data",))
    first, *rest = c.shape(0, min_rank=1)
    return c.tensor((first, rest[0] if len(rest) == 1 else known_product(rest)))


def _cross_entropy_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = _Inputs(ctx, "softmax_cross_entropy", args, ("logits", "labels"))
    logits, labels = c.shape(0, min_rank=1), c.shape(1)
    if len(labels) != len(logits):
        c.fail(f"{c.arg(1)} must have the shape of {c.arg(0)}")
    for i, (a, b) in enumerate(zip(logits, labels)):
        c.same(a, b, f"{c.arg(1)} must have the shape of {c.arg(0)} (axis {i})")
    return c.tensor(())


# ---- attributes and window geometry -----------------------------------------------------------

def _pair(v: IntOrPair) -> tuple[int, int]:
    """strides, dilation, pool_size: an int means the same along height and width."""
    return (v, v) if isinstance(v, int) else (v[0], v[1])


def _padding(v: IntOrPair) -> tuple[int, int, int, int]:
    """padding as (top, left, bottom, right) from an int, (h, w) or the four values."""
    if isinstance(v, int):
        return (v, v, v, v)
    if len(v) == 2:
        return (v[0], v[1], v[0], v[1])
    return (v[0], v[1], v[2], v[3])


def _check_pair(v: IntOrPair) -> str | None:
    if isinstance(v, tuple) and len(v) != 2:
        return f"expected an int or 2 ints (h, w), got {len(v)} values"
    if min(_pair(v)) < 1:
        return f"values must be positive, got {v}"
    return None


def _check_optional_pair(v: IntOrPair | None) -> str | None:
    return None if v is None else _check_pair(v)


def _ignore_attrs(f: Callable[..., AnyValue]) -> Callable[..., AnyValue]:
    """The reference of an op whose attributes only guide type inference."""
    return lambda *args, **attrs: f(*args)


def _check_padding(v: IntOrPair) -> str | None:
    if isinstance(v, tuple) and len(v) not in (2, 4):
        return f"expected an int, 2 ints (h, w) or 4 ints (top, left, bottom, right), got {v}"
    if min(_padding(v)) < 0:
        return f"values must be non-negative, got {v}"
    return None


def _out_size(size: int, k: int, stride: int, dilation: int, before: int, after: int,
              ceil_mode: bool) -> int:
    """How many windows fit along one axis (below 1: none fits). See the module docstring."""
    span = size + before + after - (dilation * (k - 1) + 1)
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + before:  # the last window would start in the padding
        out -= 1
    return out


@dataclass(frozen=True)
class _Window:
    """A 2-D sliding window over the last two axes: conv2d's kernel or a pool."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    ceil_mode: bool = False

    def out_hw(self, hw: Sequence[int]) -> tuple[int, int]:
        h, w = (_out_size(hw[i], self.kernel[i], self.strides[i], self.dilation[i], self.pads[i],
                          self.pads[i + 2], self.ceil_mode) for i in (0, 1))
        return h, w

    def pad_pairs(self, hw: Sequence[int]) -> list[tuple[int, int]]:
        """(before, after) per axis; `after` grows to cover the windows ceil_mode adds."""
        out = self.out_hw(hw)
        pairs = []
        for i in (0, 1):
            reach = (out[i] - 1) * self.strides[i] + self.dilation[i] * (self.kernel[i] - 1) + 1
            pairs.append((self.pads[i], max(self.pads[i + 2], reach - hw[i] - self.pads[i])))
        return pairs


def _pool_window(pool_size: IntOrPair, strides: IntOrPair, padding: IntOrPair,
                 ceil_mode: bool) -> _Window:
    return _Window(_pair(pool_size), _pair(strides), (1, 1), _padding(padding), ceil_mode)


def _windows_np(x: np.ndarray, win: _Window, pad_value: float) -> np.ndarray:
    """A view (..., OH, OW, kh, kw) of every window of x (padded with pad_value)."""
    hw = x.shape[-2:]
    (oh, ow), (sh, sw), (dh, dw) = win.out_hw(hw), win.strides, win.dilation
    pairs = [(0, 0)] * (x.ndim - 2) + win.pad_pairs(hw)
    padded = np.pad(x, pairs, constant_values=pad_value)
    extent = tuple(d * (k - 1) + 1 for d, k in zip(win.dilation, win.kernel))
    views = sliding_window_view(padded, extent, axis=(-2, -1))
    return views[..., : oh * sh : sh, : ow * sw : sw, ::dh, ::dw]


def _reduce_window_jax(x: jax.Array, win: _Window, init: float,
                       op: Callable[[jax.Array, jax.Array], jax.Array]) -> jax.Array:
    """lax.reduce_window over every window of an NCHW x (padding takes the value init)."""
    hw = x.shape[-2:]
    oh, ow = win.out_hw(hw)
    out = jax.lax.reduce_window(
        x, jnp.asarray(init, x.dtype), op, (1, 1, *win.kernel), (1, 1, *win.strides),
        [(0, 0), (0, 0), *win.pad_pairs(hw)],
    )
    return out[..., :oh, :ow]


def _avg_divisor(win: _Window, hw: Sequence[int], count_include_pad: bool) -> np.ndarray:
    """(OH, OW): how many input (or explicitly padded) elements each window covers, at least 1."""
    counts = []
    for i, out in enumerate(win.out_hw(hw)):
        before, after = win.pads[i], win.pads[i + 2]
        lo, hi = (-before, hw[i] + after) if count_include_pad else (0, hw[i])
        start = np.arange(out) * win.strides[i] - before
        counts.append(np.clip(start + win.kernel[i], lo, hi) - np.clip(start, lo, hi))
    return np.maximum(np.outer(*counts), 1)


# ---- references: products and convolution -----------------------------------------------------

def _dense(data: Array, weight: Array) -> Array:
    return data @ weight.T


def _batch_matmul(x: Array, y: Array, *, transpose_a: bool, transpose_b: bool) -> Array:
    x = x.transpose(0, 2, 1) if transpose_a else x
    y = y.transpose(0, 2, 1) if transpose_b else y
    return x @ y


def _conv_window(weight_shape: Sequence[int], strides: IntOrPair, padding: IntOrPair,
                 dilation: IntOrPair) -> _Window:
    kernel = (weight_shape[2], weight_shape[3])
    return _Window(kernel, _pair(strides), _pair(dilation), _padding(padding))


def _single_example(f: Callable[..., AnyValue]) -> Callable[..., AnyValue]:
    """A window op on NCHW data made to accept one CHW example too."""

    @functools.wraps(f)
    def run(data: Array, *args: AnyValue, **attrs: AnyValue) -> AnyValue:
        if data.ndim == 3:
            return f(data[None], *args, **attrs)[0]
        return f(data, *args, **attrs)

    return run


@_single_example
def _conv2d_np(data: np.ndarray, weight: np.ndarray, *, groups: int, channels: int | None,
               kernel_size: IntOrPair | None, **window: IntOrPair) -> np.ndarray:
    """Each group's windows (n, cin/groups, oh, ow, kh, kw) contracted with its filters."""
    windows = _windows_np(data, _conv_window(weight.shape, **window), 0.0)
    per_group = [
        np.tensordot(w_in, w, axes=([1, 4, 5], [1, 2, 3]))  # (n, oh, ow, cout/groups)
        for w_in, w in zip(np.split(windows, groups, axis=1), np.split(weight, groups, axis=0))
    ]
    return np.ascontiguousarray(np.concatenate(per_group, axis=-1).transpose(0, 3, 1, 2))


@_single_example
def _conv2d_jax(data: jax.Array, weight: jax.Array, *, groups: int, channels: int | None,
                kernel_size: IntOrPair | None, **window: IntOrPair) -> jax.Array:
    win = _conv_window(weight.shape, **window)
    return jax.lax.conv_general_dilated(
        data, weight, win.strides, win.pad_pairs(data.shape[-2:]), rhs_dilation=win.dilation,
        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups,
        precision=jax.lax.Precision.HIGHEST,
    )


# ---- references: pooling ----------------------------------------------------------------------

@_single_example
def _max_pool2d_np(data: np.ndarray, **window: AnyValue) -> np.ndarray:
    return _windows_np(data, _pool_window(**window), -np.inf).max(axis=(-2, -1))


@_single_example
def _max_pool2d_jax(data: jax.Array, **window: AnyValue) -> jax.Array:
    return _reduce_window_jax(data, _pool_window(**window), -jnp.inf, jax.lax.max)


def _max_pool2d_grad_np(out_grad: np.ndarray, data: np.ndarray,
                        **window: AnyValue) -> np.ndarray:
    """Each window's out_grad added at the window's first maximum in row-major order."""
    if data.ndim == 3:
        return _max_pool2d_grad_np(out_grad[None], data[None], **window)[0]
    win = _pool_window(**window)
    windows = _windows_np(data, win, -np.inf)  # (n, c, oh, ow, kh, kw)
    n, c, oh, ow, kh, kw = windows.shape
    first = windows.reshape(n, c, oh, ow, kh * kw).argmax(axis=-1)
    rows = np.arange(oh)[:, None] * win.strides[0] + first // kw  # in the padded input
    cols = np.arange(ow)[None, :] * win.strides[1] + first % kw
    (top, bottom), (left, right) = win.pad_pairs(data.shape[-2:])
    h, w = data.shape[-2:]
    grad = np.zeros((n, c, top + h + bottom, left + w + right), out_grad.dtype)
    np.add.at(grad, (np.arange(n)[:, None, None, None], np.arange(c)[:, None, None], rows, cols),
              out_grad)
    return grad[..., top:top + h, left:left + w]


def _max_pool2d_grad_jax(out_grad: jax.Array, data: jax.Array, **window: AnyValue) -> jax.Array:
    _, pullback = jax.vjp(partial(_max_pool2d_jax, **window), data)
    return pullback(out_grad)[0]


@_single_example
def _avg_pool2d_np(data: np.ndarray, *, count_include_pad: bool,
                   **window: AnyValue) -> np.ndarray:
    win = _pool_window(**window)
    sums = _windows_np(data, win, 0.0).sum(axis=(-2, -1))
    return sums / _avg_divisor(win, data.shape[-2:], count_include_pad).astype(data.dtype)


@_single_example
def _avg_pool2d_jax(data: jax.Array, *, count_include_pad: bool, **window: AnyValue) -> jax.Array:
    win = _pool_window(**window)
    sums = _reduce_window_jax(data, win, 0.0, jax.lax.add)
    return sums / jnp.asarray(_avg_divisor(win, data.shape[-2:], count_include_pad), data.dtype)


def _global_avg_pool2d(data: Array) -> Array:
    return data.mean(axis=(2, 3), keepdims=True)


# ---- references over an array namespace xp (numpy or jax.numpy) ------------------------------

def _softmax(xp: ModuleType, data: Array, *, axis: int) -> Array:
    e = xp.exp(data - xp.max(data, axis=axis, keepdims=True))
    return e / xp.sum(e, axis=axis, keepdims=True)


def _log_softmax(xp: ModuleType, data: Array, *, axis: int) -> Array:
    shifted = data - xp.max(data, axis=axis, keepdims=True)
    return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


def _along(xp: ModuleType, v: Array, axis: int, ndim: int) -> Array:
    """A 1-D v reshaped to broadcast along `axis` of a rank-ndim tensor."""
    return xp.reshape(v, [-1 if i == axis % ndim else 1 for i in range(ndim)])


def _normalize(xp: ModuleType, data: Array, mean: Array, var: Array, gamma: Array, beta: Array,
               axis: int, epsilon: float, center: bool, scale: bool) -> Array:
    """(data - mean) / sqrt(var + epsilon), times gamma if scale, plus beta if center."""
    out = (data - mean) / xp.sqrt(var + epsilon)
    if scale:
        out = out * _along(xp, gamma, axis, data.ndim)
    if center:
        out = out + _along(xp, beta, axis, data.ndim)
    return out


def _batch_norm(xp: ModuleType, data: Array, gamma: Array, beta: Array, moving_mean: Array,
                moving_var: Array, *, axis: int, epsilon: float, center: bool, scale: bool,
                training: bool, momentum: float) -> tuple[Array, Array, Array]:
    if training:
        others = tuple(i for i in range(data.ndim) if i != axis % data.ndim)
        mean, var = xp.mean(data, axis=others), xp.var(data, axis=others)
        moving_mean = (1 - momentum) * moving_mean + momentum * mean
        moving_var = (1 - momentum) * moving_var + momentum * var
    else:
        mean, var = moving_mean, moving_var
    out = _normalize(xp, data, _along(xp, mean, axis, data.ndim), _along(xp, var, axis, data.ndim),
                     gamma, beta, axis, epsilon, center, scale)
    return out, moving_mean, moving_var


def _layer_norm(xp: ModuleType, data: Array, gamma: Array, beta: Array, *, axis: int,
                epsilon: float, center: bool, scale: bool) -> Array:
    mean = xp.mean(data, axis=axis, keepdims=True)
    var = xp.var(data, axis=axis, keepdims=True)
    return _normalize(xp, data, mean, var, gamma, beta, axis, epsilon, center, scale)


def _mix32(x: Array) -> Array:
    """lowbias32 (C. Wellons): a bijective, avalanching hash of uint32 values (wrapping)."""
    x = x ^ (x >> 16)
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def _dropout_keep(xp: ModuleType, shape: Sequence[int], rate: float, seed: int) -> Array:
    """keep[i] = mix32(mix32(i) ^ seed) >= floor(rate * 2**32), i the flat index (mod 2**32)."""
    index = xp.arange(math.prod(shape), dtype=xp.uint32).reshape(shape)
    bits = _mix32(_mix32(index) ^ xp.uint32(seed % 2**32))
    return bits >= xp.uint32(min(int(rate * 2**32), 2**32 - 1))


def _dropout(xp: ModuleType, data: Array, *, rate: float, training: bool, seed: int) -> Array:
    if not training:
        return data
    keep = _dropout_keep(xp, data.shape, rate, seed)
    return xp.where(keep, data * xp.asarray(1 / (1 - rate), data.dtype), xp.zeros((), data.dtype))


def _pad(xp: ModuleType, data: Array, *, pad_width: tuple[int, ...], pad_value: float) -> Array:
    pairs = list(zip(pad_width[0::2], pad_width[1::2]))
    return xp.pad(data, pairs, constant_values=pad_value)


def _flatten(xp: ModuleType, data: Array) -> Array:
    return xp.reshape(data, (data.shape[0], math.prod(data.shape[1:])))


def _bias_add(xp: ModuleType, data: Array, bias: Array, *, axis: int) -> Array:
    return data + _along(xp, bias, axis, data.ndim)


def _softmax_cross_entropy(xp: ModuleType, logits: Array, labels: Array) -> Array:
    per_example = -xp.sum(labels * _log_softmax(xp, logits, axis=-1), axis=-1)
    return xp.asarray(xp.mean(per_example))


# ---- the registry entries ---------------------------------------------------------------------

def _op(name: str, inputs: tuple[str, ...], rel: Relation, pattern: OpPattern,
        numpy_ref: Callable[..., AnyValue], jax_lower: Callable[..., AnyValue], doc: str,
        *attrs: Attr, infers: tuple[int, ...] = ()) -> None:
    register(OpDef(name, inputs, rel, pattern, numpy_ref, jax_lower, attrs=attrs, doc=doc,
                   infers_inputs=infers))


def _xp_op(name: str, inputs: tuple[str, ...], rel: Relation, pattern: OpPattern,
           impl: Callable[..., AnyValue], doc: str, *attrs: Attr,
           infers: tuple[int, ...] = ()) -> None:
    """An op whose reference is written once over xp: numpy (interpreter), jax.numpy (oracle)."""
    _op(name, inputs, rel, pattern, partial(impl, np), partial(impl, jnp), doc, *attrs,
        infers=infers)


def _in_range(lo: float, hi: float, hi_open: bool = False) -> Callable[[float], str | None]:
    def check(v: float) -> str | None:
        if lo <= v and (v < hi if hi_open else v <= hi):
            return None
        return f"must be in [{lo}, {hi}{')' if hi_open else ']'}, got {v}"

    return check


def _positive(v: int) -> str | None:
    return None if v >= 1 else f"must be positive, got {v}"


def _non_negative(v: tuple[int, ...]) -> str | None:
    return None if min(v, default=0) >= 0 else f"values must be non-negative, got {v}"


def _axis(default: int, doc: str) -> Attr:
    return Attr("axis", "int", default, doc=doc)


_STRIDES = Attr("strides", "int_or_ints", (1, 1), _check_pair, "window step (h, w)")
_PADDING = Attr("padding", "int_or_ints", (0, 0), _check_padding,
                "an int, (h, w) or (top, left, bottom, right)")
_EPSILON = Attr("epsilon", "float", 1e-5, _in_range(0.0, math.inf), "added to the variance")
_CENTER = Attr("center", "bool", True, doc="add beta")
_SCALE = Attr("scale", "bool", True, doc="multiply by gamma")
_POOL = (
    Attr("pool_size", "int_or_ints", REQUIRED, _check_pair, "window size (h, w)"),
    _STRIDES, _PADDING,
    Attr("ceil_mode", "bool", False, doc="round the output size up (see the module docstring)"),
)
_FUSABLE, _OPAQUE = OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.OPAQUE

_op("matmul", ("a", "b"), _matmul_rel, _FUSABLE, np.matmul, jnp.matmul,
    "numpy.matmul: (..., m, k) @ (..., k, n), batch dims broadcast, 1-D operands promoted")
_op("dense", ("data", "weight"), _dense_rel, _FUSABLE, _ignore_attrs(_dense), _ignore_attrs(_dense),
    "data (..., k) @ weight (units, k).T -> (..., units)",
    Attr("units", "optional_int", None, doc="rows of weight; lets inference infer the weight"),
    infers=(1,))
_op("batch_matmul", ("x", "y"), _batch_matmul_rel, _FUSABLE, _batch_matmul, _batch_matmul,
    "x (b, m, k) @ y (b, k, n) -> (b, m, n), each optionally transposed; a batch of 1 broadcasts",
    Attr("transpose_a", "bool", False, doc="x is (b, k, m)"),
    Attr("transpose_b", "bool", False, doc="y is (b, n, k)"))
_op("conv2d", ("data", "weight"), _conv2d_rel, _FUSABLE, _conv2d_np, _conv2d_jax,
    "2-D cross-correlation of NCHW (or one CHW) data with OIHW weight; in-channels = I * groups",
    _STRIDES, _PADDING,
    Attr("dilation", "int_or_ints", (1, 1), _check_pair, "kernel dilation (h, w)"),
    Attr("groups", "int", 1, _positive, "channel groups (groups = in-channels: depthwise)"),
    Attr("channels", "optional_int", None, doc="out-channels O; with kernel_size, lets "
         "inference infer the weight"),
    Attr("kernel_size", "optional_ints", None, _check_optional_pair, "kernel (h, w)"),
    infers=(1,))
_op("max_pool2d", ("data",), _pool_rel("max_pool2d"), _FUSABLE, _max_pool2d_np, _max_pool2d_jax,
    "maximum over each pool_size window of NCHW data, padding with -inf", *_POOL)
register(OpDef(
    "max_pool2d_grad", ("out_grad", "data"), _max_pool2d_grad_rel, _OPAQUE,
    _max_pool2d_grad_np, _max_pool2d_grad_jax, attrs=_POOL,
    doc="zeros shaped like data with each window's out_grad added at the window's first "
        "maximum (row-major): the adjoint of max_pool2d",
))
_op("avg_pool2d", ("data",), _pool_rel("avg_pool2d"), _FUSABLE, _avg_pool2d_np, _avg_pool2d_jax,
    "mean over each pool_size window of NCHW data (padding not counted unless asked)",
    *_POOL, Attr("count_include_pad", "bool", False, doc="count explicit padding in the mean"))
_op("global_avg_pool2d", ("data",), _global_pool_rel, _FUSABLE, _global_avg_pool2d,
    _global_avg_pool2d, "mean over H and W of NCHW data -> (N, C, 1, 1)")
_xp_op("softmax", ("data",), _softmax_rel("softmax"), _OPAQUE, _softmax,
       "exp(x - max) / sum(exp(x - max)) along axis", _axis(-1, "the normalised axis"))
_xp_op("log_softmax", ("data",), _softmax_rel("log_softmax"), _OPAQUE, _log_softmax,
       "x - max - log(sum(exp(x - max))) along axis", _axis(-1, "the normalised axis"))
_xp_op("batch_norm", ("data", *_BATCH_NORM_PARAMS), _batch_norm_rel, _OPAQUE,
       _batch_norm, "(out, mean, var): normalise per channel `axis` with the moving (inference) "
       "or batch (training) statistics; training also updates the moving statistics",
       _axis(1, "the channel axis"), _EPSILON, _CENTER, _SCALE,
       Attr("training", "bool", False, doc="use and fold in the batch statistics"),
       Attr("momentum", "float", 0.1, _in_range(0.0, 1.0), "weight of the batch statistics"),
       infers=(1, 2, 3, 4))
_xp_op("layer_norm", ("data", "gamma", "beta"), _layer_norm_rel, _OPAQUE, _layer_norm,
       "(x - mean) / sqrt(var + epsilon) * gamma + beta over `axis`",
       _axis(-1, "the normalised axis"), _EPSILON, _CENTER, _SCALE, infers=(1, 2))
_xp_op("dropout", ("data",), _dropout_rel, _OPAQUE, _dropout,
       "identity; in training zero each element with probability rate (a hash of seed and "
       "index) and scale the rest by 1 / (1 - rate)",
       Attr("rate", "float", 0.5, _in_range(0.0, 1.0, hi_open=True), "drop probability"),
       Attr("training", "bool", False, doc="drop (otherwise the identity)"),
       Attr("seed", "int", 0, doc="selects the mask; the same seed gives the same mask"))
_xp_op("pad", ("data",), _pad_rel, OpPattern.INJECTIVE, _pad,
       "constant padding: pad_width = (before0, after0, before1, after1, ...)",
       Attr("pad_width", "ints", REQUIRED, _non_negative, "2 values per axis"),
       Attr("pad_value", "float", 0.0, doc="the value of the new elements"))
_xp_op("flatten", ("data",), _flatten_rel, OpPattern.INJECTIVE, _flatten,
       "(d0, d1, ..., dn) -> (d0, d1 * ... * dn)")
_xp_op("bias_add", ("data", "bias"), _bias_add_rel, OpPattern.BROADCAST, _bias_add,
       "data + bias, the 1-D bias broadcast along axis", _axis(1, "the axis bias runs along"),
       infers=(1,))
_xp_op("softmax_cross_entropy", ("logits", "labels"), _cross_entropy_rel, _OPAQUE,
       _softmax_cross_entropy,
       "mean over leading dims of -sum(labels * log_softmax(logits), axis=-1); a scalar")
