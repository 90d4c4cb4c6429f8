"""Tensors of the tensor-expression language: placeholders, computed tensors, reductions.

A ``placeholder`` is an input; ``compute(shape, fcompute)`` defines a tensor
whose element at index ``(i, j, ...)`` is ``fcompute(i, j, ...)``, a scalar
expression (relaydsl.te.expr) that may read other tensors. ``reduce_axis``
makes an index that a reduction (``sum``, ``max``, ``min``, ``prod``) sums,
maximises, ... over. Shapes are static tuples of ints. This is TVM's ``te``
without schedules: backends decide the loop order.

>>> from relaydsl import te
>>> A = te.placeholder((4, 3), "float32", "A")
>>> B = te.placeholder((3, 5), "float32", "B")
>>> k = te.reduce_axis(3, "k")
>>> C = te.compute((4, 5), lambda i, j: te.sum(A[i, k] * B[k, j], axis=[k]), "C")
>>> C.shape, C.dtype, str(C.body)
((4, 5), 'float32', 'sum((A[i, k] * B[k, j]), axis=[k])')
>>> [t.name for t in C.inputs]
['A', 'B']
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Sequence, final

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.node import conforms
from relaydsl.te.expr import (
    FLOAT_DTYPES, INT_DTYPES, ExprLike, IterVar, Max, Min, PrimExpr, Reduce, TensorRead, Var,
    as_expr, const, const_like, post_order,
)


@final
@dataclass(frozen=True, slots=True, eq=False)
class Tensor:
    """A placeholder (``body is None``) or a computed tensor (``axes`` index ``body``)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    axes: tuple[IterVar, ...] = ()
    body: PrimExpr | None = None

    def __post_init__(self) -> None:
        for d in self.shape:
            if isinstance(d, bool) or not conforms(d, int) or d < 0:
                raise IRError(f"tensor {self.name}: shape {self.shape} must be non-negative ints")
        if self.body is not None and len(self.axes) != len(self.shape):
            raise IRError(f"tensor {self.name}: {len(self.axes)} axes for shape {self.shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def is_placeholder(self) -> bool:
        return self.body is None

    @property
    def inputs(self) -> list[Tensor]:
        """The tensors the body reads, each once, in order of first read."""
        if self.body is None:
            return []
        found: dict[Tensor, None] = {}  # ordered, without duplicates
        for node in post_order(self.body):
            if isinstance(node, TensorRead):
                found[node.tensor] = None
        return list(found)

    def __getitem__(self, indices: ExprLike | tuple[ExprLike, ...]) -> PrimExpr:
        idx = indices if isinstance(indices, tuple) else (indices,)
        return TensorRead(self, tuple(as_expr(i) for i in idx))

    def __repr__(self) -> str:
        kind = "placeholder" if self.body is None else "compute"
        return f"Tensor({self.name}: {kind} {self.dtype}{list(self.shape)})"


def placeholder(shape: Sequence[int] | int, dtype: str = "float32", name: str = "data") -> Tensor:
    """An input tensor of the given shape and dtype."""
    return Tensor(name, _shape(shape), dtype)


def compute(shape: Sequence[int] | int, fcompute: Callable[..., ExprLike],
            name: str = "compute") -> Tensor:
    """The tensor whose element ``[i, j, ...]`` is ``fcompute(i, j, ...)``.

    The index variables are named after ``fcompute``'s parameters when it has
    one per dimension (``lambda i, j: ...`` gives axes ``i`` and ``j``).
    """
    dims = _shape(shape)
    names = _axis_names(fcompute, len(dims))
    axes = tuple(IterVar(n, d) for n, d in zip(names, dims))
    body = as_expr(fcompute(*axes))
    for node in post_order(body):
        if isinstance(node, IterVar) and not node.is_reduce and node not in axes:
            raise IRError(f"compute {name}: the body uses axis {node.name} of another compute")
    return Tensor(name, dims, body.dtype, axes, body)


def reduce_axis(extent: int, name: str = "k") -> IterVar:
    """An index over ``0 .. extent-1`` for a reduction to range over."""
    return IterVar(name, extent, is_reduce=True)


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    return (shape,) if isinstance(shape, int) else tuple(shape)


def _axis_names(fcompute: Callable[..., ExprLike], ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if len(params) == ndim and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                   for p in params):
        return [p.name for p in params]
    return [f"i{d}" for d in range(ndim)]


# ---- reductions: a combiner and its identity, as data --------------------------------------


def _lowest(dtype: str) -> PrimExpr:
    if dtype in FLOAT_DTYPES:
        return const(-np.inf, dtype)
    return const(int(np.iinfo(dtype).min), dtype)


def _highest(dtype: str) -> PrimExpr:
    if dtype in FLOAT_DTYPES:
        return const(np.inf, dtype)
    return const(int(np.iinfo(dtype).max), dtype)


@final
@dataclass(frozen=True)
class Reducer:
    """A reduction: ``combine(acc, x)`` and the identity it starts from, for any dtype."""

    name: str
    combine: Callable[[PrimExpr, PrimExpr], PrimExpr]
    identity: Callable[[str], PrimExpr]

    def __call__(self, source: ExprLike, axis: Sequence[IterVar] | IterVar,
                 init: ExprLike | None = None) -> PrimExpr:
        """``init`` (default: the identity) combined with ``source`` at every point of ``axis``."""
        src = as_expr(source)
        if src.dtype not in FLOAT_DTYPES + INT_DTYPES:
            raise IRError(f"{self.name}: cannot reduce a {src.dtype} expression ({src})")
        axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
        lhs, rhs = Var("acc", src.dtype), Var("x", src.dtype)
        start = self.identity(src.dtype) if init is None else const_like(init, src)
        return Reduce(self.name, src, axes, start, lhs, rhs, self.combine(lhs, rhs))


# These names shadow builtins inside this module only: use them as te.sum, te.max, ...
sum = Reducer("sum", lambda a, b: a + b, lambda d: const(0, d))
prod = Reducer("prod", lambda a, b: a * b, lambda d: const(1, d))
max = Reducer("max", Max, _lowest)
min = Reducer("min", Min, _highest)
