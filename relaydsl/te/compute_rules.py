"""Compute rules of the elementwise and broadcasting ops (relaydsl/op/tensor.py), in te.

A compute rule is ``rule(attrs, inputs, out_type) -> te.Tensor`` (TVM's
FTVMCompute): given the call's attributes, one te tensor per argument and the
inferred output ``TensorType``, it returns the tensor the op computes.
Importing this module fills ``OpDef.compute`` for the ops below; no stage
imports it yet (the llvm backend will). Broadcasting is the index mapping of
``broadcast_read``: dimensions are aligned from the right and a dimension of
extent 1 is read at index 0.

>>> import numpy as np
>>> from relaydsl import te
>>> from relaydsl.ir.attrs import Attrs
>>> from relaydsl.ir.types import TensorType
>>> from relaydsl.op import lookup
>>> import relaydsl.te.compute_rules
>>> x = te.placeholder((2, 3), "float32", "x")
>>> y = te.placeholder((3,), "float32", "y")
>>> out = lookup("add").compute(Attrs(), [x, y], TensorType((2, 3), "float32"))
>>> str(out.body)
'(x[i0, i1] + y[i1])'
>>> te.evaluate(out, {x: np.ones((2, 3), "float32"), y: np.arange(3, dtype="float32")})
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
"""
from __future__ import annotations

from typing import Callable, Sequence

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType
from relaydsl.op.registry import lookup
from relaydsl.te import expr as E
from relaydsl.te.expr import INT_DTYPES, PrimExpr, const
from relaydsl.te.tensor import Tensor, compute

ComputeRule = Callable[[Attrs, list[Tensor], TensorType], Tensor]
Scalar = Callable[..., PrimExpr]


def broadcast_read(t: Tensor, out_index: Sequence[PrimExpr]) -> PrimExpr:
    """``t`` read at the output index, NumPy-broadcast: right-aligned, extent-1 dims at 0."""
    lead = len(out_index) - t.ndim
    if lead < 0:
        raise IRError(f"{t.name}{list(t.shape)} has more dimensions than the output")
    return t[tuple(const(0) if extent == 1 else out_index[lead + d]
                   for d, extent in enumerate(t.shape))]


def elementwise(op_name: str, scalar: Scalar) -> ComputeRule:
    """The rule of an op whose output element is ``scalar(attrs, *input elements)``."""

    def rule(attrs: Attrs, inputs: list[Tensor], out_type: TensorType) -> Tensor:
        shape = out_type.concrete_shape()
        out = compute(shape, lambda *idx: scalar(attrs, *(broadcast_read(t, idx) for t in inputs)),
                      "T_" + op_name)
        if out.dtype != out_type.dtype:
            raise IRError(f"{op_name}: compute rule gave {out.dtype}, "
                          f"the op's type says {out_type.dtype}")
        return out

    return rule


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


def _install() -> None:
    for name, scalar in SCALAR_RULES.items():
        opdef = lookup(name)
        if opdef.compute is not None:
            raise IRError(f"op {name} already has a compute rule")
        opdef.compute = elementwise(name, scalar)


_install()
