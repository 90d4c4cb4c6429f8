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

# (attrs, inputs, out_type) -> the result: one tensor, or a tuple of them for a TupleType
ComputeRule = Callable[[Attrs, list[Tensor], TensorType | TupleType],
                       Tensor | tuple[Tensor, ...]]
Scalar = Callable[..., PrimExpr]


def broadcast_read(t: Tensor, out_index: Sequence[PrimExpr]) -> PrimExpr:
    """``t`` read at the output index, NumPy-broadcast: right-aligned, extent-1 dims at 0."""
    lead = len(out_index) - t.ndim
    if lead < 0:
        raise IRError(f"{t.name}{list(t.shape)} has more dimensions than the output")
    return t[tuple(const(0) if extent == 1 else out_index[lead + d]
                   for d, extent in enumerate(t.shape))]


def checked(op_name: str, rule: ComputeRule) -> ComputeRule:
    """``rule``, failing when its tensor's shape or dtype differ from ``out_type``'s.

    For a ``TupleType`` result the rule must give a tuple of tensors, one per field,
    each with its field's shape and dtype.
    """

    def run(attrs: Attrs, inputs: list[Tensor],
            out_type: TensorType | TupleType) -> Tensor | tuple[Tensor, ...]:
        out = rule(attrs, list(inputs), out_type)
        if isinstance(out_type, TupleType):
            if not isinstance(out, tuple) or len(out) != len(out_type.fields):
                got = f"{len(out)} tensors" if isinstance(out, tuple) else "one tensor"
                raise IRError(f"{op_name}: compute rule gave {got}, the op's type says a "
                              f"tuple of {len(out_type.fields)}")
            for n, (t, field) in enumerate(zip(out, out_type.fields)):
                _check_tensor(f"{op_name} (result {n})", t, field)
            return out
        if isinstance(out, tuple):
            raise IRError(f"{op_name}: compute rule gave a tuple of {len(out)} tensors, the "
                          f"op's type says one tensor")
        _check_tensor(op_name, out, out_type)
        return out

    run.__name__ = run.__qualname__ = f"{op_name}_compute"
    return run


def _check_tensor(what: str, out: Tensor, out_type: TensorType) -> None:
    if not isinstance(out_type, TensorType):
        raise IRError(f"{what}: the op's type {out_type} is not a tensor type")
    shape = out_type.concrete_shape()
    if out.dtype != out_type.dtype or out.shape != shape:
        raise IRError(f"{what}: compute rule gave {out.dtype}{list(out.shape)}, "
                      f"the op's type says {out_type.dtype}{list(shape)}")


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
