"""The 2-D sliding window of conv2d and the pools, written once for every facet.

Images are NCHW (or one CHW example). A window covers ``dilation * (k - 1) + 1`` input
positions along an axis and there are ``floor((size + before + after - extent) / stride) + 1``
of them (``out_size``; the relations, the references, the gradients and the llvm templates all
ask it). With ``ceil_mode`` (the pools) the division rounds up and, as in PyTorch (not TVM), a
last window that would start inside the bottom/right padding is dropped.

The NCW ops (max_pool1d, avg_pool1d, conv1d) are their 2-D counterparts over a height of 1:
``reference_via_2d``, ``compute_via_2d`` and ``gradient_via_2d`` carry each facet over.

The NCDHW pools (max_pool3d, avg_pool3d) are separable: a box's maximum (or mean, whose
divisor is the product of per-axis counts) is the 2-D pool's over (H, W) of each depth slice,
then the 2-D pool's over (D, 1) of the result. ``reference_via_2d_twice``,
``compute_via_2d_twice`` and ``gradient_via_2d_twice`` carry the 2-D op's facets over.

``Window`` holds one op call's geometry from its canonical attributes (``strides`` and
``dilation`` as ``(h, w)``, ``padding`` as ``(top, left, bottom, right)``) and reads the
windows in NumPy (sliding-window views), JAX (``lax.reduce_window``) and te (guarded reads).

>>> win = Window((3, 3), strides=(2, 2), dilation=(1, 1), pads=(1, 1, 1, 1))
>>> win.out_hw((8, 7))
(4, 4)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any as AnyValue, Callable, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, Let, Var
from relaydsl.ir.types import Any, Dim, TensorType, type_to_str
from relaydsl.op.grad_util import tensor_type
from relaydsl.op.lazy_jax import jnp, lax
from relaydsl.op.nn.common import Array, Inputs
from relaydsl.op.registry import GradientRule, OpDef, ops
from relaydsl.te.rules import ComputeRule
from relaydsl.te.expr import PrimExpr, const, select
from relaydsl.te.tensor import Tensor, compute


def out_size(size: int, k: int, stride: int, dilation: int, before: int, after: int,
             ceil_mode: bool) -> int:
    """How many windows fit along one axis (below 1: none fits).

    >>> out_size(7, 2, stride=2, dilation=1, before=0, after=0, ceil_mode=True)
    4
    """
    span = size + before + after - (dilation * (k - 1) + 1)
    if span < 0:
        return 0
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + before:  # the last window would start in the padding
        out -= 1
    return out


def window_dim(c: Inputs, size: Dim, k: Dim, stride: int, dilation: int,
               pads: tuple[int, int], ceil_mode: bool, axis: int) -> Dim:
    """The number of windows along `axis` of the data in a relation (out_size); Any where the
    size or the kernel is symbolic; a failure naming the data where no window fits."""
    if not (isinstance(size, int) and isinstance(k, int)):
        return Any
    n = out_size(size, k, stride, dilation, pads[0], pads[1], ceil_mode)
    if n < 1:
        c.fail(f"the window (size {k}, dilation {dilation}) is larger than the padded input "
               f"({size} + {pads[0]} + {pads[1]}) along axis {axis} of {c.arg(0)}")
    return n


@dataclass(frozen=True)
class Window:
    """A 2-D sliding window over the last two axes: conv2d's kernel or a pool."""

    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    ceil_mode: bool = False

    @classmethod
    def conv(cls, attrs: Mapping[str, AnyValue], kernel: Sequence[int]) -> Window:
        """conv2d's window: `kernel` is the weight's (kh, kw)."""
        return cls((kernel[0], kernel[1]), attrs["strides"], attrs["dilation"], attrs["padding"])

    @classmethod
    def pool(cls, attrs: Mapping[str, AnyValue]) -> Window:
        return cls(attrs["pool_size"], attrs["strides"], (1, 1), attrs["padding"],
                   attrs["ceil_mode"])

    def out_hw(self, hw: Sequence[int]) -> tuple[int, int]:
        h, w = (out_size(hw[i], self.kernel[i], self.strides[i], self.dilation[i], self.pads[i],
                         self.pads[i + 2], self.ceil_mode) for i in (0, 1))
        return h, w

    def pad_pairs(self, hw: Sequence[int]) -> list[tuple[int, int]]:
        """(before, after) per axis; `after` grows to cover the windows ceil_mode adds."""
        out = self.out_hw(hw)
        pairs: list[tuple[int, int]] = []
        for i in (0, 1):
            reach = (out[i] - 1) * self.strides[i] + self.dilation[i] * (self.kernel[i] - 1) + 1
            pairs.append((self.pads[i], max(self.pads[i + 2], reach - hw[i] - self.pads[i])))
        return pairs

    # ---- the relations: sizes that may be symbolic

    def out_dims(self, c: Inputs, hw: Sequence[Dim]) -> list[Dim]:
        """Output height and width in a relation; Any where an input size (or, for a
        conv2d with an unknown weight, the kernel) is symbolic."""
        return [window_dim(c, hw[i], self.kernel[i], self.strides[i], self.dilation[i],
                           (self.pads[i], self.pads[i + 2]), self.ceil_mode, i + 2)
                for i in (0, 1)]

    # ---- the references

    def np_windows(self, x: NDArray[AnyValue], pad_value: float) -> NDArray[AnyValue]:
        """A view (..., OH, OW, kh, kw) of every window of x (padded with pad_value)."""
        hw = x.shape[-2:]
        (oh, ow), (sh, sw), (dh, dw) = self.out_hw(hw), self.strides, self.dilation
        pairs = [(0, 0)] * (x.ndim - 2) + self.pad_pairs(hw)
        padded = np.pad(x, pairs, constant_values=pad_value)
        extent = tuple(d * (k - 1) + 1 for d, k in zip(self.dilation, self.kernel))
        views = sliding_window_view(padded, extent, axis=(-2, -1))
        return views[..., : oh * sh : sh, : ow * sw : sw, ::dh, ::dw]

    def jax_reduce(self, x: Array, init: float, op: Callable[[Array, Array], Array]) -> Array:
        """lax.reduce_window over every window of an NCHW x (padding takes the value init)."""
        hw = x.shape[-2:]
        oh, ow = self.out_hw(hw)
        out = lax.reduce_window(
            x, jnp.asarray(init, x.dtype), op, (1, 1, *self.kernel), (1, 1, *self.strides),
            [(0, 0), (0, 0), *self.pad_pairs(hw)],
        )
        return out[..., :oh, :ow]

    # ---- the compute rules

    def te_position(self, y: PrimExpr, x: PrimExpr, ry: PrimExpr,
                    rx: PrimExpr) -> tuple[PrimExpr, PrimExpr]:
        """The input (row, column) of tap (ry, rx) of window (y, x): ``y*s + ry*d - pad``."""
        (sh, sw), (dh, dw), (top, left) = self.strides, self.dilation, self.pads[:2]
        iy = (y * sh if sh != 1 else y) + (ry * dh if dh != 1 else ry)
        ix = (x * sw if sw != 1 else x) + (rx * dw if dw != 1 else rx)
        return (iy - top if top else iy), (ix - left if left else ix)

    def te_read(self, t: Tensor, lead: tuple[PrimExpr, ...], iy: PrimExpr, ix: PrimExpr,
                fill: float) -> PrimExpr:
        """t at (*lead, iy, ix); `fill` where a window leaves t (padding, ceil_mode)."""
        v = t[(*lead, iy, ix)]
        if not (self.ceil_mode or any(self.pads)):
            return v
        h, w = t.shape[-2:]
        inside = (iy >= 0) & (iy < h) & (ix >= 0) & (ix < w)
        return select(inside, v, const(fill, t.dtype))


def image(c: Inputs) -> list[AnyValue]:
    """A relation's data dims as (N, C, H, W); N is None for a single CHW example."""
    data = c.shape(0)
    if len(data) not in (3, 4):
        c.fail(f"{c.arg(0)} must have rank 4 (NCHW) or 3 (one CHW example)")
    return [None, *data] if len(data) == 3 else data


def single_example(f: Callable[..., AnyValue]) -> Callable[..., AnyValue]:
    """A reference on NCHW data made to accept one CHW example too."""

    @functools.wraps(f)
    def run(data: Array, *args: AnyValue, **attrs: AnyValue) -> AnyValue:
        if data.ndim == 3:
            return f(data[None], *args, **attrs)[0]
        return f(data, *args, **attrs)

    return run


def as_batch(x: Expr) -> tuple[Expr, bool]:
    """For a gradient rule: NCHW x as is, or one CHW example as a batch of one; and whether
    it was one example."""
    if tensor_type(x).ndim == 3:
        return ops.expand_dims(x, axis=0), True
    return x, False


def unbatch(dx: Expr, single: bool) -> Expr:
    """The adjoint of as_batch."""
    return ops.squeeze(dx, axis=(0,)) if single else dx


# ---- 1-D windows: the 2-D ones over a height of 1 ----------------------------------------------
# An NCW op (max_pool1d, avg_pool1d, conv1d) is its 2-D counterpart on NC1W data (and OI1W
# weights): every input gains a height-1 axis 2 (``tall``), the attributes gain height 1 and no
# padding along it, and the result loses the axis again. The facets below carry each facet of
# the 2-D op over, so the 1-D ops share its geometry, references, gradients and compute rules.


def attrs_2d(attrs: Mapping[str, AnyValue]) -> Attrs:
    """A 1-D op's attributes (windows (w,), padding (left, right)) as its 2-D counterpart's."""
    out = dict(attrs)
    for name in ("pool_size", "strides", "dilation", "kernel_size"):
        if out.get(name) is not None:
            out[name] = (1, *out[name])
    if "padding" in out:
        left, right = out["padding"]
        out["padding"] = (0, left, 0, right)
    return Attrs(out)


def tall_type(t: TensorType) -> TensorType:
    """(n, c, w) as (n, c, 1, w)."""
    return TensorType((*t.shape[:2], 1, *t.shape[2:]), t.dtype)


def reference_via_2d(f: Callable[..., Array]) -> Callable[..., Array]:
    """A 1-D op's NumPy reference or JAX lowering from the 2-D op's `f`."""

    def run(*arrays: Array, **attrs: AnyValue) -> Array:
        return f(*(a[:, :, None] for a in arrays), **attrs_2d(attrs))[:, :, 0]

    return run


def compute_via_2d(rule: ComputeRule) -> ComputeRule:
    """A 1-D op's compute rule from the 2-D op's `rule`: height-1 views in, the height dropped."""

    def tall(t: Tensor) -> Tensor:
        def read(n: PrimExpr, c: PrimExpr, _h: PrimExpr, w: PrimExpr) -> PrimExpr:
            return t[n, c, w]

        return compute(tall_type(TensorType(t.shape, t.dtype)).concrete_shape(), read,
                       t.name + "_tall")

    def run(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        out = rule(attrs_2d(attrs), [tall(t) for t in inputs], tall_type(out_type))
        assert isinstance(out, Tensor)

        def drop_height(n: PrimExpr, c: PrimExpr, w: PrimExpr) -> PrimExpr:
            return out[n, c, 0, w]

        return compute(out_type.concrete_shape(), drop_height, out.name + "_1d")

    return run


def gradient_via_2d(op2d: OpDef, math: str) -> GradientRule:
    """A 1-D op's gradient rule from the 2-D op's: each adjoint is the 2-D rule's on the tall
    inputs (let-bound variables of the tall types, as the 2-D rule reads its inputs' types),
    height dropped. `math` is the rule's one-line docstring."""
    rule2d = op2d.gradient
    assert rule2d is not None

    def rule(call: Call, g: Expr) -> list[Expr]:
        adjoints: list[Expr] = []
        for i in range(len(call.args)):  # fresh variables per adjoint: each binds its own
            tall = [Var(f"{name}_tall", tall_type(tensor_type(a)))
                    for name, a in zip(op2d.inputs, call.args)]
            call2d = op2d(*tall, **attrs_2d(call.attrs))
            adjoint = ops.squeeze(rule2d(call2d, ops.expand_dims(g, axis=2))[i], axis=(2,))
            for v, a in reversed(list(zip(tall, call.args))):
                adjoint = Let(v, ops.expand_dims(a, axis=2), adjoint)
            adjoints.append(adjoint)
        return adjoints

    rule.__doc__ = math
    return rule


# ---- 3-D pools: the 2-D pool over (H, W), then over (D, 1) ---------------------------------------
# NCDHW data is viewed as (N, C*D, H, W) for the first pass and its result (N, C*D, OH, OW) as
# (N, C, D, OH*OW) for the second, whose window is (kd, 1) along (D, OH*OW). Every window
# attribute splits by axis (ceil_mode's extra windows and count_include_pad too), so the two
# passes give the 3-D pool exactly, with its ties broken at the first maximum in (d, h, w) order.


def attrs_hw(attrs: Mapping[str, AnyValue]) -> Attrs:
    """A 3-D pool's attributes for its (H, W) pass."""
    out, p = dict(attrs), attrs["padding"]
    out["pool_size"], out["strides"] = attrs["pool_size"][1:], attrs["strides"][1:]
    out["padding"] = (p[1], p[2], p[4], p[5])
    return Attrs(out)


def attrs_d(attrs: Mapping[str, AnyValue]) -> Attrs:
    """A 3-D pool's attributes for its (D, 1) pass."""
    out, p = dict(attrs), attrs["padding"]
    out["pool_size"], out["strides"] = (attrs["pool_size"][0], 1), (attrs["strides"][0], 1)
    out["padding"] = (p[0], 0, p[3], 0)
    return Attrs(out)


def _pool3d_sizes(attrs: Mapping[str, AnyValue],
                  dhw: Sequence[int]) -> tuple[int, int, int]:
    """The output (OD, OH, OW) of a 3-D pool over static (D, H, W)."""
    oh, ow = Window.pool(attrs_hw(attrs)).out_hw(dhw[1:])
    od, _ = Window.pool(attrs_d(attrs)).out_hw((dhw[0], 1))
    return od, oh, ow


def reference_via_2d_twice(f: Callable[..., Array]) -> Callable[..., Array]:
    """A 3-D pool's NumPy reference or JAX lowering from the 2-D pool's `f`."""

    def run(data: Array, **attrs: AnyValue) -> Array:
        n, c, d, h, w = data.shape
        flat = f(data.reshape(n, c * d, h, w), **attrs_hw(attrs))
        oh, ow = flat.shape[-2:]
        out = f(flat.reshape(n, c, d, oh * ow), **attrs_d(attrs))
        return out.reshape(n, c, out.shape[2], oh, ow)

    return run


def compute_via_2d_twice(rule: ComputeRule) -> ComputeRule:
    """A 3-D pool's compute rule from the 2-D pool's `rule`: two passes over reshaped views."""

    def run(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        (x,) = inputs
        n, c, d, h, w = x.shape
        od, oh, ow = out_type.concrete_shape()[2:]
        def flat_at(i: PrimExpr, cd: PrimExpr, y: PrimExpr, z: PrimExpr) -> PrimExpr:
            return x[i, cd // d, cd % d, y, z]

        flat = compute((n, c * d, h, w), flat_at, x.name + "_flat")
        hw = rule(attrs_hw(attrs), [flat], TensorType((n, c * d, oh, ow), x.dtype))
        assert isinstance(hw, Tensor)
        def row_at(i: PrimExpr, ch: PrimExpr, z: PrimExpr, yx: PrimExpr) -> PrimExpr:
            return hw[i, ch * d + z, yx // ow, yx % ow]

        rows = compute((n, c, d, oh * ow), row_at, hw.name + "_rows")
        out = rule(attrs_d(attrs), [rows], TensorType((n, c, od, oh * ow), x.dtype))
        assert isinstance(out, Tensor)
        def out_at(i: PrimExpr, ch: PrimExpr, z: PrimExpr, y: PrimExpr, xx: PrimExpr
                   ) -> PrimExpr:
            return out[i, ch, z, y * ow + xx]

        return compute(out_type.concrete_shape(), out_at, out.name + "_3d")

    return run


def gradient_via_2d_twice(op2d: OpDef, math: str) -> GradientRule:
    """A 3-D pool's gradient rule from the 2-D pool's: the (D, 1) pass's adjoint, then the
    (H, W) pass's, on let-bound variables of the views' types (the 2-D rule reads them).
    `math` is the rule's one-line docstring."""
    rule2d = op2d.gradient
    assert rule2d is not None

    def rule(call: Call, g: Expr) -> list[Expr]:
        x, a = call.args[0], call.attrs
        t = tensor_type(x)
        n, (c, d, h, w) = t.shape[0], static_spatial(t, op2d.name.replace("2d", "3d"))
        od, oh, ow = _pool3d_sizes(a, (d, h, w))
        flat = Var("flat", TensorType((n, c * d, h, w), t.dtype))
        rows = Var("rows", TensorType((n, c, d, oh * ow), t.dtype))
        g_rows = rule2d(op2d(rows, **attrs_d(a)),
                        ops.reshape(g, newshape=(-1, c, od, oh * ow)))[0]
        g_flat = rule2d(op2d(flat, **attrs_hw(a)),
                        ops.reshape(g_rows, newshape=(-1, c * d, oh, ow)))[0]
        dx = ops.reshape(g_flat, newshape=(-1, c, d, h, w))
        pooled = ops.reshape(op2d(flat, **attrs_hw(a)), newshape=(-1, c, d, oh * ow))
        return [Let(flat, ops.reshape(x, newshape=(-1, c * d, h, w)), Let(rows, pooled, dx))]

    rule.__doc__ = math
    return rule


def static_spatial(t: TensorType, what: str) -> tuple[int, ...]:
    """The static dims after the batch of t; `what` names the gradient that needs them."""
    dims = [d for d in t.shape[1:] if isinstance(d, int)]
    if len(dims) != t.ndim - 1:
        raise IRError(f"the gradient of {what} needs static dims after the batch, "
                      f"got {type_to_str(t)}")
    return tuple(dims)
