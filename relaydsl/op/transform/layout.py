"""Data layouts and the op moving a tensor between two of them, ``layout_transform``.

A layout names a tensor's axes, TVM's way: an upper-case letter is a *primal* axis (``N``,
``C``, ``H``, ``W``; ``O``, ``I`` for weights), a lower-case letter with a factor is a block
of its primal axis, innermost (``NCHW8c``: the channels split into C/8 blocks of 8, the
block the last axis). Primal axis ``C`` of size 32 in ``NCHW8c`` is the dims ``4`` (at
``C``) and ``8`` (at ``c``), and channel ``i`` is at ``(i // 8, ..., i % 8)``.

``layout_transform(x, src_layout, dst_layout)`` is a pure index mapping between two layouts
with the same primal axes: ``NCHW -> NCHW8c`` blocks the channels (C divisible by 8),
``NCHW8c -> NCHW`` unblocks them, ``NCHW -> NHWC`` is a transpose, ``OIHW -> OIHW8i16o``
blocks both axes of a conv2d weight. AlterOpLayout inserts it around the blocked conv2d.

>>> Layout.parse("NCHW8c").shape({"N": 1, "C": 32, "H": 5, "W": 5})
(1, 4, 5, 5, 8)
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any as AnyValue, Mapping

import numpy as np

from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr
from relaydsl.ir.types import Dim, TensorType, Type, type_to_str
from relaydsl.op.lazy_jax import jnp
from relaydsl.op.registry import Array, Attr, OpDef, OpPattern, register
from relaydsl.te.expr import PrimExpr
from relaydsl.te.tensor import Tensor, compute
from relaydsl.typing.relations import RelationContext, shape_of, tensor_arg

_AXIS = re.compile(r"(\d*)([A-Za-z])")


@dataclass(frozen=True)
class Layout:
    """A parsed layout: per tensor axis, its letter and its block factor (None: primal)."""

    name: str
    axes: tuple[tuple[str, int | None], ...]

    @staticmethod
    @functools.cache
    def parse(name: str) -> Layout:
        """The layout `name` ("NCHW8c"); ValueError saying what is wrong with a malformed one."""
        axes: list[tuple[str, int | None]] = []
        pos = 0
        for m in _AXIS.finditer(name):
            if m.start() != pos:
                break
            pos = m.end()
            digits, letter = m.groups()
            if letter.isupper():
                if digits:
                    raise ValueError(f"primal axis {letter} takes no factor in {name!r}")
                axes.append((letter, None))
            else:
                if not digits or int(digits) < 1:
                    raise ValueError(f"block axis {letter} needs a factor >= 1 in {name!r}")
                axes.append((letter.upper(), int(digits)))
        if pos != len(name) or not name:
            raise ValueError(f"{name!r} is not a layout (letters, a factor before each "
                             "lower-case block axis: 'NCHW8c')")
        primal = [a for a, f in axes if f is None]
        blocks = [a for a, f in axes if f is not None]
        for group in (primal, blocks):
            if len(set(group)) != len(group):
                raise ValueError(f"an axis appears twice in {name!r}")
        if not set(blocks) <= set(primal):
            raise ValueError(f"a block axis of {name!r} has no primal axis")
        return Layout(name, tuple(axes))

    @property
    def primal(self) -> tuple[str, ...]:
        """The primal axes in this layout's order."""
        return tuple(a for a, f in self.axes if f is None)

    def factor(self, axis: str) -> int | None:
        """The block factor of primal `axis`, None if it is not blocked."""
        return next((f for a, f in self.axes if a == axis and f is not None), None)

    def position(self, axis: str, block: bool = False) -> int:
        """The tensor axis of primal `axis` (or of its block)."""
        return next(i for i, (a, f) in enumerate(self.axes) if a == axis and (f is not None)
                    == block)

    def shape(self, primal: Mapping[str, AnyValue]) -> tuple[AnyValue, ...]:
        """The dims of a tensor of this layout from its primal axes' sizes (static where
        blocked: the caller checks divisibility)."""
        return tuple(f if f is not None else
                     primal[a] if (k := self.factor(a)) is None else primal[a] // k
                     for a, f in self.axes)

    def primal_sizes(self, shape: tuple[AnyValue, ...]) -> dict[str, AnyValue]:
        """The primal axes' sizes of a tensor of this layout with dims `shape`."""
        sizes: dict[str, AnyValue] = {}
        for a in self.primal:
            d = shape[self.position(a)]
            k = self.factor(a)
            sizes[a] = d if k is None else d * k
        return sizes


def _layout_check(name: str) -> str | None:
    try:
        Layout.parse(name)
    except ValueError as e:
        return str(e)
    return None


def _layouts(attrs: Mapping[str, AnyValue]) -> tuple[Layout, Layout]:
    return Layout.parse(attrs["src_layout"]), Layout.parse(attrs["dst_layout"])


def _layout_transform_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type:
    t = tensor_arg(ctx, args[0], "layout_transform: the input")
    src, dst = _layouts(attrs)
    what = f"layout_transform from {src.name} to {dst.name}"
    if set(src.primal) != set(dst.primal):
        ctx.fail(f"{what}: the layouts do not have the same primal axes")
    if t.ndim != len(src.axes):
        ctx.fail(f"{what}: the input {type_to_str(t)} does not have rank {len(src.axes)}")
    shape = shape_of(ctx, t)
    for i, (a, f) in enumerate(src.axes):
        if f is not None and shape[i] != f:
            ctx.fail(f"{what}: axis {i} of the input {type_to_str(t)} is the block "
                     f"{f}{a.lower()}, not of size {f}")
    primal: dict[str, Dim] = {}
    for a in src.primal:
        d, k = shape[src.position(a)], src.factor(a)
        if k is not None and not isinstance(d, int):
            ctx.fail(f"{what}: the blocked axis {a} of {type_to_str(t)} must be static")
        primal[a] = d if k is None else d * k  # pyright: ignore[reportOperatorIssue]
    for a in dst.primal:
        k, size = dst.factor(a), primal[a]
        if k is not None and (not isinstance(size, int) or size % k):
            ctx.fail(f"{what}: axis {a} of the input {type_to_str(t)} ({primal[a]}) is not "
                     f"a multiple of the block {k}{a.lower()}")
    return TensorType(dst.shape(primal), t.dtype)


def transform_array(x: AnyValue, src_layout: str, dst_layout: str, xp: AnyValue) -> AnyValue:
    """`x` (a NumPy or JAX array; `xp` its module) moved from `src_layout` to `dst_layout`:
    blocks merged into their primal axes, primal axes permuted, blocks split off again."""
    src, dst = Layout.parse(src_layout), Layout.parse(dst_layout)
    # each primal axis followed by its block, then each pair merged: the primal tensor
    order = [i for a in src.primal
             for i in (src.position(a), *((src.position(a, True),) if src.factor(a) else ()))]
    sizes = src.primal_sizes(x.shape)
    x = xp.reshape(xp.transpose(x, order), [sizes[a] for a in src.primal])
    x = xp.transpose(x, [src.primal.index(a) for a in dst.primal])
    # each primal axis split into (outer, block) where dst blocks it, then dst's order
    split: list[tuple[str, bool]] = []
    dims: list[int] = []
    for a in dst.primal:
        k = dst.factor(a)
        split.append((a, False))
        dims.append(sizes[a] if k is None else sizes[a] // k)
        if k is not None:
            split.append((a, True))
            dims.append(k)
    x = xp.reshape(x, dims)
    return xp.transpose(x, [split.index((a, f is not None)) for a, f in dst.axes])


def _layout_transform_gradient(call: Call, g: Expr) -> list[Expr]:
    """d layout_transform(x, src, dst) = layout_transform(g, dst, src)."""
    a = call.attrs
    return [layout_transform(g, src_layout=a.dst_layout, dst_layout=a.src_layout)]


def _layout_transform_compute(attrs: Attrs, inputs: list[Tensor],
                              out_type: TensorType) -> Tensor:
    """out[o] = x[i]: each primal index from o (outer * block + inner where dst blocks the
    axis), then split by src's block; a block of equal factor in both maps straight across."""
    (x,) = inputs
    src, dst = _layouts(attrs)

    def f(*o: PrimExpr) -> PrimExpr:
        index: list[PrimExpr] = [o[0]] * x.ndim
        for a in src.primal:
            ks, kd = src.factor(a), dst.factor(a)
            outer = o[dst.position(a)]
            if ks is not None and ks == kd:
                index[src.position(a)] = outer
                index[src.position(a, True)] = o[dst.position(a, True)]
                continue
            i = outer if kd is None else outer * kd + o[dst.position(a, True)]
            if ks is None:
                index[src.position(a)] = i
            else:
                index[src.position(a)] = i // ks
                index[src.position(a, True)] = i % ks
        return x[tuple(index)]

    return compute(out_type.concrete_shape(), f, "T_layout_transform")


def _layout_transform_numpy(x: Array, src_layout: str, dst_layout: str) -> Array:
    return np.ascontiguousarray(transform_array(x, src_layout, dst_layout, np))


def _layout_transform_jax(x: Array, src_layout: str, dst_layout: str) -> Array:
    return transform_array(x, src_layout, dst_layout, jnp)


layout_transform = register(OpDef(
    "layout_transform", ("data",), _layout_transform_rel, OpPattern.INJECTIVE,
    numpy_ref=_layout_transform_numpy, jax_lower=_layout_transform_jax,
    compute=_layout_transform_compute, gradient=_layout_transform_gradient,
    attrs=(Attr("src_layout", "str", check=_layout_check, doc="the input's layout, e.g. NCHW"),
           Attr("dst_layout", "str", check=_layout_check,
                doc="the result's layout, e.g. NCHW8c (same primal axes)")),
    doc="x moved from layout src_layout to dst_layout (blocks split or merged, axes permuted)",
))
