"""upsampling (TVM's ``relay.nn.upsampling``): NCHW images enlarged by scale_h and scale_w.

The output has ``round(H * scale_h)`` rows and ``round(W * scale_w)`` columns. Output row y
reads input row ``y * H / OH`` (``align_corners=False``, TVM's "asymmetric" coordinates) or
``y * (H - 1) / (OH - 1)`` (``align_corners=True``: the corner pixels of input and output
line up), and likewise along W:

* ``nearest_neighbor`` takes the row at that position rounded down (asymmetric), or rounded
  to the nearest, ties to even, as TVM's ``round`` on llvm (align_corners);
* ``bilinear`` interpolates between the rows below and above it (the last row standing in
  for the one past it), then between the columns.

Positions are rationals ``y * num / den`` of static sizes, so every facet computes them
exactly in integers: the index ``y * num // den`` and the fraction ``(y * num % den) / den``.
Along each axis the op is a linear map, an (OH, H) matrix of those weights; the gradient is
its transpose: ``dx = Ryᵀ g Rx``.
"""
from __future__ import annotations

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, const as relay_const
from relaydsl.ir.types import Any, Dim, TensorType, Type
from relaydsl.op import grad_util as gu
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.nn.common import Array, ArrayModule, Inputs
from relaydsl.op.registry import Attr, OpDef, OpPattern, ops, register
from relaydsl.te.expr import PrimExpr, cast, const, equal, minimum, select
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import RelationContext

METHODS = ("nearest_neighbor", "bilinear")


def _scaled(size: Dim, scale: float) -> Dim:
    """round(size * scale), TVM's output size (Python's round: ties to even)."""
    return round(size * scale) if isinstance(size, int) else Any


def _ratio(size: int, out: int, align_corners: bool) -> tuple[int, int]:
    """(num, den): output position i reads input position i * num / den."""
    if align_corners:
        return (size - 1, out - 1) if out > 1 else (0, 1)
    return size, out


def _taps(size: int, out: int, method: str,
          align_corners: bool) -> list[tuple[np.ndarray, np.ndarray]]:
    """Along one axis: (input index, weight) arrays over the output positions, one pair per
    input element an output reads (nearest: one; bilinear: the two it lies between)."""
    num, den = _ratio(size, out, align_corners)
    q, r = np.divmod(np.arange(out) * num, den)
    if method == "nearest_neighbor":
        if align_corners:  # round half to even
            q = q + ((2 * r > den) | ((2 * r == den) & (q % 2 == 1)))
        return [(q, np.ones(out))]
    frac = r / den
    return [(q, 1 - frac), (np.minimum(q + 1, size - 1), frac)]


def _resize(xp: ArrayModule, data: Array, scale_h: float, scale_w: float, method: str,
            align_corners: bool) -> Array:
    """Rows first, then columns: each a weighted sum of gathers (numpy or jax.numpy)."""
    h, w = data.shape[-2:]
    out = data
    for axis, size, scale in ((2, h, scale_h), (3, w, scale_w)):
        taps = _taps(size, _scaled(size, scale), method, align_corners)  # pyright: ignore
        shape = (-1, 1) if axis == 2 else (-1,)
        out = sum(xp.take(out, index, axis=axis) * xp.reshape(weight.astype(data.dtype), shape)
                  for index, weight in taps)
    return out


def _upsampling_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    c = Inputs(ctx, "upsampling", args, ("data",))
    n, ch, h, w = c.shape(0, rank=4)
    oh, ow = _scaled(h, attrs.scale_h), _scaled(w, attrs.scale_w)
    if any(isinstance(o, int) and o < 1 for o in (oh, ow)):
        c.fail(f"scale_h={attrs.scale_h}, scale_w={attrs.scale_w} leave no output of {c.arg(0)}")
    return c.tensor((n, ch, oh, ow))


def _upsampling_np(data: Array, *, scale_h: float, scale_w: float, method: str,
                   align_corners: bool, **_: object) -> Array:
    return _resize(np, data, scale_h, scale_w, method, align_corners)


def _upsampling_jax(data: Array, *, scale_h: float, scale_w: float, method: str,
                    align_corners: bool, **_: object) -> Array:
    return _resize(jnp, data, scale_h, scale_w, method, align_corners)


def _matrix(size: int, out: int, method: str, align_corners: bool) -> np.ndarray:
    """The (out, size) matrix of one axis's interpolation weights."""
    m = np.zeros((out, size))
    for index, weight in _taps(size, out, method, align_corners):
        np.add.at(m, (np.arange(out), index), weight)
    return m


def _upsampling_grad(call: Call, g: Expr) -> list[Expr]:
    """d upsampling(x) = Ryᵀ g Rx, Ry and Rx the rows' and the columns' interpolation matrices."""
    x, a = call.args[0], call.attrs
    (h, w), dtype = gu.image_hw(x, "upsampling"), gu.tensor_type(x).concrete_dtype()
    ry, rx = (_matrix(size, round(size * scale), a.method, a.align_corners)
              for size, scale in ((h, a.scale_h), (w, a.scale_w)))
    # dense(g, m) contracts g's last axis with m's second: g @ mᵀ.
    cols = ops.dense(g, relay_const(rx.T.astype(dtype)))  # (n, c, oh, w)
    rows = ops.dense(ops.transpose(cols, axes=(0, 1, 3, 2)), relay_const(ry.T.astype(dtype)))
    return [ops.transpose(rows, axes=(0, 1, 3, 2))]


def _upsampling_compute(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    (data,) = inputs
    h, w = data.shape[-2:]
    oh, ow = out_type.concrete_shape()[-2:]
    dtype = data.dtype

    def taps(o: PrimExpr, size: int, out: int) -> list[tuple[PrimExpr, PrimExpr | None]]:
        """(input index, weight or None for 1) of output position o, as _taps."""
        num, den = _ratio(size, out, attrs.align_corners)
        pos = o * num
        q, r = pos // den, pos % den
        if attrs.method == "nearest_neighbor":
            if attrs.align_corners:
                up = (r * 2 > den) | (equal(r * 2, den) & equal(q % 2, 1))
                q = q + select(up, 1, 0)
            return [(q, None)]
        frac = cast(dtype, r) / const(float(den), dtype)
        return [(q, const(1.0, dtype) - frac), (minimum(q + 1, size - 1), frac)]

    def f(n: PrimExpr, c: PrimExpr, y: PrimExpr, x: PrimExpr) -> PrimExpr:
        total: PrimExpr | None = None
        for iy, wy in taps(y, h, oh):
            row: PrimExpr | None = None
            for ix, wx in taps(x, w, ow):
                v = data[n, c, iy, ix]
                v = v if wx is None else v * wx
                row = v if row is None else row + v
            assert row is not None
            row = row if wy is None else row * wy
            total = row if total is None else total + row
        assert total is not None
        return total

    return compute((*out_type.concrete_shape()[:2], oh, ow), f, "T_upsampling")


def _method(v: str) -> str | None:
    return None if v in METHODS else f"must be one of {', '.join(METHODS)}, got {v!r}"


upsampling = register(OpDef(
    "upsampling", ("data",), _upsampling_rel, OpPattern.INJECTIVE,
    numpy_ref=_upsampling_np, jax_lower=_upsampling_jax, compute=_upsampling_compute,
    gradient=_upsampling_grad,
    attrs=(
        Attr("scale_h", "float", 1.0, lambda v: None if v > 0 else f"must be positive, got {v}",
             "height factor: round(H * scale_h) rows"),
        Attr("scale_w", "float", 1.0, lambda v: None if v > 0 else f"must be positive, got {v}",
             "width factor: round(W * scale_w) columns"),
        Attr("layout", "str", "NCHW",
             lambda v: None if v == "NCHW" else f"only NCHW is supported, got {v!r}",
             "the data layout (NCHW)"),
        Attr("method", "str", "nearest_neighbor", _method, "nearest_neighbor or bilinear"),
        Attr("align_corners", "bool", False,
             doc="map the corner pixels onto each other (else output i reads input i / scale)"),
    ),
    doc="NCHW data enlarged to round(H * scale_h) x round(W * scale_w), by nearest neighbour "
        "or bilinear interpolation",
))
