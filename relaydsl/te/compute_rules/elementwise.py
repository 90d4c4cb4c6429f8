"""Compute rules of the elementwise and broadcasting ops (relaydsl/op/tensor.py).

Each op's element is ``scalar(attrs, *input elements)``, the inputs read through
``broadcast_read``: dimensions are aligned from the right and a dimension of
extent 1 is read at index 0. ``checked`` wraps any rule with the check that
the tensor it builds (each tensor, for a tuple-typed result) has the shape and
dtype the op's type says.
"""
from __future__ import annotations

from typing import Callable, Sequence

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType, TupleType
from relaydsl.te import expr as E
from relaydsl.te.expr import INT_DTYPES, PrimExpr, const
from relaydsl.te.tensor import Tensor, compute

from relaydsl.te.rules import ComputeRule, Scalar, broadcast_read, checked, elementwise  # noqa: F401


def _relu(attrs: Attrs, x: PrimExpr) -> PrimExpr:
    return E.maximum(x, 0)


def _clip(attrs: Attrs, x: PrimExpr) -> PrimExpr:
    # the bounds become x's dtype as np.asarray(bound, dtype) makes them: ints truncate
    lo, hi = ((int(attrs.a_min), int(attrs.a_max)) if x.dtype in INT_DTYPES
              else (attrs.a_min, attrs.a_max))
    return E.minimum(E.maximum(x, lo), hi)


def _cast(attrs: Attrs, x: PrimExpr) -> PrimExpr:
    return E.cast(attrs.dtype, x)


def _unary(intrinsic: str) -> Scalar:
    def scalar(attrs: Attrs, x: PrimExpr) -> PrimExpr:
        return E.call(intrinsic, x)

    return scalar


def _binary(node: Callable[[PrimExpr, PrimExpr], PrimExpr]) -> Scalar:
    def scalar(attrs: Attrs, x: PrimExpr, y: PrimExpr) -> PrimExpr:
        return node(x, y)

    return scalar


# op name -> scalar body; each rule states its law in the op's own terms
SCALAR_RULES: dict[str, Scalar] = {
    "negative": lambda attrs, x: -x,                          # 0 - x
    "relu": _relu,                                            # max(x, 0)
    "clip": _clip,                                            # min(max(x, a_min), a_max)
    "cast": _cast,                                            # dtype(x)
    "logical_not": lambda attrs, x: ~x,
    "where": lambda attrs, c, x, y: E.select(c, x, y),        # x if c else y
    **{name: _unary(name) for name in (
        "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "abs", "sign", "floor", "ceil",
        "round")},
    **{name: _binary(node) for name, node in (
        ("add", E.Add), ("subtract", E.Sub), ("multiply", E.Mul), ("divide", E.Div),
        ("power", E.power), ("maximum", E.Max), ("minimum", E.Min),
        ("equal", E.EQ), ("not_equal", E.NE), ("less", E.LT), ("less_equal", E.LE),
        ("greater", E.GT), ("greater_equal", E.GE),
        ("logical_and", E.And), ("logical_or", E.Or))},
}


def _cast_like(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
    """x in like's dtype; like (any shape) gives only the dtype, so it is never read."""
    x, like = inputs
    shape = out_type.concrete_shape()
    return compute(shape, lambda *i: E.cast(like.dtype, broadcast_read(x, i)), "T_cast_like")


# op name -> rule, for the ops of relaydsl/op/tensor.py that are not scalar functions
RULES: dict[str, ComputeRule] = {"cast_like": _cast_like}
