"""What the gradient rules share: building Relay, reading the inputs' types, registration.

See the package docstring (relaydsl/op/gradients/__init__.py) for the contract a rule keeps.
"""
from __future__ import annotations

import functools
import math
from typing import Any as AnyValue, Callable, Sequence

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.expr import Call, Constant, Expr, Tuple, TupleGetItem, Var, const, op_call
from relaydsl.ir.types import TensorType, TupleType, Type, has_float, is_float, type_to_str
from relaydsl.op._legacy import attach

Rule = Callable[[Call, Expr], list[Expr]]

# ---- building Relay ---------------------------------------------------------------------------

_add = functools.partial(op_call, "add")
_sub = functools.partial(op_call, "subtract")
_mul = functools.partial(op_call, "multiply")
_div = functools.partial(op_call, "divide")
_where = functools.partial(op_call, "where")
_END = 2**31 - 1  # a strided_slice end past any axis


def _sum(x: Expr, axis: AnyValue, keepdims: bool = False) -> Expr:
    return op_call("sum", x, axis=axis, keepdims=keepdims)


def _mean(x: Expr, axis: AnyValue) -> Expr:
    return op_call("mean", x, axis=axis, keepdims=True)


def _collapse(d: Expr, x: Expr) -> Expr:
    """d summed down to x's shape: undoes the broadcasting of x into d."""
    return op_call("collapse_sum_like", d, x)


def _broadcast_like(d: Expr, x: Expr) -> Expr:
    """d broadcast to x's shape (d's dims are 1 or x's), as d + zeros_like(x)."""
    return _add(d, op_call("zeros_like", x))


# ---- reading the inputs' types ------------------------------------------------------------------


def _type(e: Expr) -> Type:
    if e.has_type:
        return e.checked_type
    if isinstance(e, Var) and e.type_annotation is not None:
        return e.type_annotation
    if isinstance(e, Constant):
        return TensorType(e.data.shape, e.data.dtype.name)
    if isinstance(e, Tuple):
        return TupleType(tuple(_type(f) for f in e.fields))
    if isinstance(e, TupleGetItem):
        t = _type(e.tuple_value)
        if isinstance(t, TupleType):
            return t.fields[e.index]
    raise IRError(f"a gradient rule needs the type of the operator input {e!r:.80}: give the "
                  "call's arguments a checked_type (or Var annotations) before applying it")


def _tensor(e: Expr) -> TensorType:
    t = _type(e)
    if not isinstance(t, TensorType):
        raise IRError(f"a gradient rule expected a tensor input, got {type_to_str(t)}")
    return t


def _image_hw(x: Expr, what: str) -> tuple[int, int]:
    """The static (H, W) of NCHW or CHW x; the batch may be symbolic."""
    t = _tensor(x)
    h, w = t.shape[-2:]
    if not (isinstance(h, int) and isinstance(w, int)):
        raise IRError(f"the gradient of {what} needs static H and W, got {type_to_str(t)}")
    return h, w


def _dims(e: Expr, what: str) -> tuple[int, ...]:
    """e's static shape; `what` names the rule that needs it."""
    t = _tensor(e)
    if not t.is_static:
        raise IRError(f"the gradient of {what} needs static dims, got {type_to_str(t)}")
    return t.concrete_shape()


def _scalar(value: float, like: Expr) -> Constant:
    return const(value, _tensor(like).dtype)


def _zeros(x: Expr) -> Expr:
    """The zero adjoint of x: zeros_like, field by field for a tuple."""
    t = _type(x)
    if isinstance(t, TupleType):
        return Tuple([_zeros(TupleGetItem(x, i)) for i in range(len(t.fields))])
    return op_call("zeros_like", x)




def _axes(axis: int | Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    """An axis attribute normalised to non-negative axes; None is every axis."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(a % ndim for a in ((axis,) if isinstance(axis, int) else axis))


def _others(axis: int, ndim: int) -> tuple[int, ...]:
    return tuple(i for i in range(ndim) if i != axis % ndim)


def _count(x: Expr, axes: Sequence[int]) -> Expr:
    """How many elements of x a reduction over `axes` combines, a scalar of x's dtype."""
    dims = [_tensor(x).shape[a] for a in axes]
    if all(isinstance(d, int) for d in dims):
        return _scalar(math.prod(dims), x)  # type: ignore[arg-type]
    sizes = op_call("take", op_call("shape_of", x), const(np.array(axes, np.int32)), axis=0)
    return op_call("cast_like", op_call("prod", sizes), x)


def _unreduce(g: Expr, x: Expr, axis: int | Sequence[int] | None, keepdims: bool) -> Expr:
    """g, the adjoint of a reduction of x over `axis`, with the reduced axes back as size 1."""
    if keepdims or axis is None:  # without keepdims, a full reduction's g is a scalar
        return g
    for a in sorted(_axes(axis, _tensor(x).ndim)):
        g = op_call("expand_dims", g, axis=a)
    return g


def _along(v: Expr, axis: int, ndim: int) -> Expr:
    """A 1-D v broadcastable along `axis` of a rank-ndim tensor: (n, 1, ..., 1)."""
    trailing = ndim - 1 - axis % ndim
    return op_call("expand_dims", v, axis=1, num_newaxis=trailing) if trailing else v


def _through_cast(d: Expr, x: Expr, out_dtype: str) -> Expr:
    """d carried back through a cast of x to out_dtype: zero unless both dtypes are float."""
    if is_float(out_dtype) and is_float(_tensor(x).dtype):
        return op_call("cast_like", d, x)
    return op_call("zeros_like", x)


# ---- registration -------------------------------------------------------------------------------


def _rule(*names: str) -> Callable[[Rule], Rule]:
    """Registers the decorated rule for the ops `names`.

    A call without a float input gets zeros for every input (nothing flows through it)."""

    def register(rule: Rule) -> Rule:
        @functools.wraps(rule)
        def guarded(call: Call, g: Expr) -> list[Expr]:
            if not any(has_float(_type(a)) for a in call.args):
                return [_zeros(a) for a in call.args]
            return rule(call, g)

        for name in names:
            attach(name, "gradient", guarded)
        return rule

    return register


def _elementwise(name: str, math_: str, adjoint: Callable[[Expr, Expr, Expr], Expr]) -> None:
    """Registers d name(x) = adjoint(g, x, y), y = name(x); `math_` is the rule's docstring."""

    def rule(call: Call, g: Expr) -> list[Expr]:
        return [adjoint(g, call.args[0], call)]

    rule.__doc__ = math_
    rule.__name__ = rule.__qualname__ = f"_{name}_grad"
    _rule(name)(rule)
