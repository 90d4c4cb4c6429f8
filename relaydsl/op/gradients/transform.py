"""Gradient rules of the shape transformations (relaydsl/op/transform.py)."""
from __future__ import annotations

import functools

import numpy as np

from relaydsl.ir.expr import Call, Expr, Tuple, TupleGetItem
from relaydsl.ir.types import TupleType
from relaydsl.op.gradients.common import (
    _END, _add, _axes, op_call, _collapse, _dims, _rule, _sum, _tensor, _through_cast, _type,
    _zeros,
)

# ---- shape transformations ----------------------------------------------------------------------

@_rule("reshape", "squeeze")
def _reshape_grad(call: Call, g: Expr) -> list[Expr]:
    """d reshape(x) = reshape_like(g, x) (squeeze is a reshape too)."""
    return [op_call("reshape_like", g, call.args[0])]


@_rule("reshape_like")
def _reshape_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d reshape_like(x, t) = (reshape_like(g, x), 0)."""
    x, like = call.args
    return [op_call("reshape_like", g, x), _zeros(like)]


@_rule("transpose")
def _transpose_grad(call: Call, g: Expr) -> list[Expr]:
    """d transpose(x, axes) = transpose(g, inverse permutation of axes)."""
    x, axes = call.args[0], call.attrs.axes
    if axes is None:
        return [op_call("transpose", g)]
    ndim = _tensor(x).ndim
    inverse = np.argsort(_axes(axes, ndim))
    return [op_call("transpose", g, axes=tuple(int(i) for i in inverse))]


@_rule("expand_dims")
def _expand_dims_grad(call: Call, g: Expr) -> list[Expr]:
    """d expand_dims(x) = squeeze(g) on the inserted axes."""
    x, a = call.args[0], call.attrs
    if a.num_newaxis == 0:
        return [g]
    at = a.axis % (_tensor(x).ndim + 1)
    return [op_call("squeeze", g, axis=tuple(range(at, at + a.num_newaxis)))]


@_rule("concatenate")
def _concatenate_grad(call: Call, g: Expr) -> list[Expr]:
    """d concatenate(xs) = (the pieces of split(g) where the inputs meet,)."""
    xs, axis = call.args[0], call.attrs.axis
    t = _type(xs)
    assert isinstance(t, TupleType)
    axis %= _tensor(TupleGetItem(xs, 0)).ndim
    sizes = [_dims(TupleGetItem(xs, i), "concatenate")[axis] for i in range(len(t.fields))]
    pieces = op_call("split", g, indices_or_sections=tuple(np.cumsum(sizes[:-1]).tolist()),
                   axis=axis)
    return [Tuple([TupleGetItem(pieces, i) for i in range(len(sizes))])]


@_rule("split")
def _split_grad(call: Call, g: Expr) -> list[Expr]:
    """d split(x) = concatenate(g); if pieces overlap, the sum of each g[i] put in its place."""
    x, how, axis = call.args[0], call.attrs.indices_or_sections, call.attrs.axis
    if isinstance(how, int) or (min(how, default=0) >= 0 and list(how) == sorted(how)):
        return [op_call("concatenate", g, axis=axis)]
    cuts = (0, *how, _END)  # cuts out of order (or from the end): pieces may overlap
    placed = [op_call("strided_slice_grad", TupleGetItem(g, i), x, begin=(lo,), end=(hi,),
                    axes=(axis,)) for i, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:]))]
    return [functools.reduce(_add, placed)]


@_rule("stack")
def _stack_grad(call: Call, g: Expr) -> list[Expr]:
    """d stack(xs) = (the slices of g along the new axis, each squeezed,)."""
    xs, axis = call.args[0], call.attrs.axis
    t = _type(xs)
    assert isinstance(t, TupleType)
    n = len(t.fields)
    pieces = op_call("split", g, indices_or_sections=n, axis=axis)
    return [Tuple([op_call("squeeze", TupleGetItem(pieces, i), axis=(axis,)) for i in range(n)])]


@_rule("take")
def _take_grad(call: Call, g: Expr) -> list[Expr]:
    """d take(x, i) = (take_grad(g, i, x): g added at the positions read, 0)."""
    x, indices = call.args
    return [op_call("take_grad", g, indices, x, **call.attrs), _zeros(indices)]


@_rule("take_grad")
def _take_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d take_grad(d, i, t) = (take(g, i), 0, 0): take_grad is linear in d, the adjoint of take."""
    _, indices, like = call.args
    return [op_call("take", g, indices, **call.attrs), _zeros(indices), _zeros(like)]


@_rule("strided_slice")
def _strided_slice_grad(call: Call, g: Expr) -> list[Expr]:
    """d x[begin:end:strides] = zeros like x holding g at the sliced positions."""
    return [op_call("strided_slice_grad", g, call.args[0], **call.attrs)]


@_rule("strided_slice_grad")
def _strided_slice_grad_grad(call: Call, g: Expr) -> list[Expr]:
    """d strided_slice_grad(d, t) = (g[begin:end:strides], 0)."""
    return [op_call("strided_slice", g, **call.attrs), _zeros(call.args[1])]


@_rule("broadcast_to")
def _broadcast_to_grad(call: Call, g: Expr) -> list[Expr]:
    """d broadcast_to(x) = sum_b(g, x)."""
    return [_collapse(g, call.args[0])]


@_rule("full")
def _full_grad(call: Call, g: Expr) -> list[Expr]:
    """d full(v) = sum(g) cast to v's dtype (0 if the result is not float)."""
    v, dtype = call.args[0], call.attrs.dtype
    return [_through_cast(_sum(g, None), v, dtype or _tensor(v).dtype)]
