"""What gradient rules share: reading the inputs' types and building Relay for adjoints.

A gradient rule is ``rule(call, g) -> [one expression per input]``: given a call of the op
and an expression ``g`` for the adjoint of the call's output (tuple-typed for ops with a
tuple result), it returns the adjoint of each input, of exactly that input's type. As in
TVM's ``_tensor_grad.py``:

* broadcasting is undone in one place, ``collapse(d, x)`` (``collapse_sum_like``);
* an input that gets no gradient (take's indices, where's condition, the shape source of
  a ``*_like`` op, an integer or bool tensor) gets ``zeros_for(x)``;
* a rule may use ``call`` itself (the op's output, recomputed) and reuse the call's
  arguments: the transform binds them to variables.

Rules read the types of the call's arguments -- ``checked_type``, or a Var's annotation --
to normalise axes and size reshapes, never the type of ``g``. ``input_adjoints`` is how the
AD transforms apply a rule: a call with no floating-point input gets zeros (nothing flows).
"""
from __future__ import annotations

import math
from typing import Any as AnyValue, Sequence

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem, Var, const
from relaydsl.ir.types import DType, TensorType, TupleType, Type, has_float, is_float, type_to_str
from relaydsl.op.registry import ops


def input_adjoints(call: Call, g: Expr) -> list[Expr]:
    """The adjoints of `call`'s inputs given its output's adjoint `g`, by the op's rule."""
    if not any(has_float(arg_type(a)) for a in call.args):
        return [zeros_for(a) for a in call.args]
    assert isinstance(call.op, Op), "input_adjoints takes an operator call"
    rule = call.op.definition.gradient
    if rule is None:  # register() refuses such an op; a test's patched copy may not
        raise IRError(f"the operator {call.op.name} has no gradient rule")
    return rule(call, g)


# ---- building Relay ---------------------------------------------------------------------------

def add(a: Expr, b: Expr) -> Expr:
    return ops.add(a, b)


def sub(a: Expr, b: Expr) -> Expr:
    return ops.subtract(a, b)


def mul(a: Expr, b: Expr) -> Expr:
    return ops.multiply(a, b)


def div(a: Expr, b: Expr) -> Expr:
    return ops.divide(a, b)


def where(c: Expr, a: Expr, b: Expr) -> Expr:
    return ops.where(c, a, b)


END = 2**31 - 1  # a strided_slice end past any axis


def sum_(x: Expr, axis: AnyValue, keepdims: bool = False) -> Expr:
    return ops.sum(x, axis=axis, keepdims=keepdims)


def mean_(x: Expr, axis: AnyValue) -> Expr:
    return ops.mean(x, axis=axis, keepdims=True)


def collapse(d: Expr, x: Expr) -> Expr:
    """d summed down to x's shape: undoes the broadcasting of x into d."""
    return ops.collapse_sum_like(d, x)


def broadcast_like(d: Expr, x: Expr) -> Expr:
    """d broadcast to x's shape (d's dims are 1 or x's), as d + zeros_like(x)."""
    return add(d, ops.zeros_like(x))


# ---- reading the inputs' types ------------------------------------------------------------------


def arg_type(e: Expr) -> Type:
    if e.has_type:
        return e.checked_type
    if isinstance(e, Var) and e.type_annotation is not None:
        return e.type_annotation
    if isinstance(e, Constant):
        return TensorType(e.data.shape, e.data.dtype.name)
    if isinstance(e, Tuple):
        return TupleType(tuple(arg_type(f) for f in e.fields))
    if isinstance(e, TupleGetItem):
        t = arg_type(e.tuple_value)
        if isinstance(t, TupleType):
            return t.fields[e.index]
    raise IRError(f"a gradient rule needs the type of the operator input {e!r:.80}: give the "
                  "call's arguments a checked_type (or Var annotations) before applying it")


def tensor_type(e: Expr) -> TensorType:
    t = arg_type(e)
    if not isinstance(t, TensorType):
        raise IRError(f"a gradient rule expected a tensor input, got {type_to_str(t)}")
    return t


def image_hw(x: Expr, what: str) -> tuple[int, int]:
    """The static (H, W) of NCHW or CHW x; the batch may be symbolic."""
    t = tensor_type(x)
    h, w = t.shape[-2:]
    if not (isinstance(h, int) and isinstance(w, int)):
        raise IRError(f"the gradient of {what} needs static H and W, got {type_to_str(t)}")
    return h, w


def static_dims(e: Expr, what: str) -> tuple[int, ...]:
    """e's static shape; `what` names the rule that needs it."""
    t = tensor_type(e)
    if not t.is_static:
        raise IRError(f"the gradient of {what} needs static dims, got {type_to_str(t)}")
    return t.concrete_shape()


def scalar(value: float, like: Expr) -> Constant:
    return const(value, tensor_type(like).concrete_dtype())


def zeros_for(x: Expr) -> Expr:
    """The zero adjoint of x: zeros_like, field by field for a tuple."""
    t = arg_type(x)
    if isinstance(t, TupleType):
        return Tuple(tuple(zeros_for(TupleGetItem(x, i)) for i in range(len(t.fields))))
    return ops.zeros_like(x)




def norm_axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """An axis attribute normalised to non-negative axes; None is every axis."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in ((axis,) if isinstance(axis, int) else axis))


def other_axes(axis: int, ndim: int) -> tuple[int, ...]:
    return tuple(i for i in range(ndim) if i != axis % ndim)


def count(x: Expr, axes: Sequence[int]) -> Expr:
    """How many elements of x a reduction over `axes` combines, a scalar of x's dtype."""
    dims = [tensor_type(x).shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        return scalar(math.prod(dims), x)  # type: ignore[arg-type]
    sizes = ops.take(ops.shape_of(x), const(np.array(axes, np.int32)), axis=0)
    return ops.cast_like(ops.prod(sizes), x)


def unreduce(g: Expr, x: Expr, axis: int | Sequence[int] | None, keepdims: bool) -> Expr:
    """g, the adjoint of a reduction of x over `axis`, with the reduced axes back as size 1."""
    if keepdims or axis is None:  # without keepdims, a full reduction's g is a scalar
        return g
    for a in sorted(norm_axes(axis, tensor_type(x).ndim)):
        g = ops.expand_dims(g, axis=a)
    return g


def along(v: Expr, axis: int, ndim: int) -> Expr:
    """A 1-D v broadcastable along `axis` of a rank-ndim tensor: (n, 1, ..., 1)."""
    trailing = ndim - 1 - axis % ndim
    return ops.expand_dims(v, axis=1, num_newaxis=trailing) if trailing else v


def through_cast(d: Expr, x: Expr, out_dtype: DType) -> Expr:
    """d carried back through a cast of x to out_dtype: zero unless both dtypes are float."""
    if is_float(out_dtype) and is_float(tensor_type(x).dtype):
        return ops.cast_like(d, x)
    return ops.zeros_like(x)
