"""What every op's compute rule builds on: the rule type, broadcast reads, elementwise rules,
and the shape check wrapped around every rule.

A compute rule is ``rule(attrs, inputs, out_type) -> te.Tensor`` (TVM's FTVMCompute): given
the call's attributes (defaults filled in), one te tensor per argument (a tuple-typed
argument, as concatenate's and stack's, contributes its fields, flattened, as in TVM) and
the inferred, static output type, it returns the tensor the op computes. An op whose result
is a tuple (split; batch_norm's ``(out, moving_mean, moving_var)``) gets a ``TupleType`` as
``out_type`` and returns a Python tuple of te tensors, one per field, in order. The op
registry wraps every rule with ``checked``, which fails when a result's shape or dtype
differs from the type's (each field's, for a tuple).

>>> import numpy as np
>>> from relaydsl import te
>>> from relaydsl.ir.attrs import Attrs
>>> from relaydsl.ir.types import TensorType
>>> from relaydsl.te import expr as E
>>> add = elementwise("add", lambda attrs, x, y: E.Add(x, y))
>>> x = te.placeholder((2, 3), "float32", "x")
>>> y = te.placeholder((3,), "float32", "y")
>>> out = add(Attrs(), [x, y], TensorType((2, 3), "float32"))
>>> str(out.body)
'(x[i0, i1] + y[i1])'
>>> te.evaluate(out, {x: np.ones((2, 3), "float32"), y: np.arange(3, dtype="float32")})
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
"""
from __future__ import annotations

from typing import Any as AnyValue, Callable, Sequence

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.te.expr import PrimExpr, const
from relaydsl.te.tensor import Tensor, compute

# (attrs, inputs, out_type) -> the result: one tensor, or a tuple of them for a TupleType.
# out_type is Any: each op's rule declares the one its type relation gives (TensorType, or
# TupleType for split and batch_norm), which a single Callable type cannot say per op.
ComputeRule = Callable[[Attrs, list[Tensor], AnyValue], Tensor | tuple[Tensor, ...]]
# (attrs, one element of each input) -> the output element, one parameter per input.
Scalar = (Callable[[Attrs, PrimExpr], PrimExpr] | Callable[[Attrs, PrimExpr, PrimExpr], PrimExpr]
          | Callable[[Attrs, PrimExpr, PrimExpr, PrimExpr], PrimExpr])


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


def _check_tensor(what: str, out: Tensor, out_type: Type) -> None:
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


__all__ = ["ComputeRule", "Scalar", "broadcast_read", "checked", "elementwise"]
