"""Gradient rules of the reductions (relaydsl/op/reduce.py)."""
from __future__ import annotations

from relaydsl.ir.expr import Call, Expr, Op
from relaydsl.op.gradients.common import (
    _axes, _broadcast_like, op_call, _count, _div, _mul, _rule, _scalar, _sum, _tensor, _unreduce,
    _where, _zeros,
)

# ---- reductions ---------------------------------------------------------------------------------

@_rule("sum")
def _sum_grad(call: Call, g: Expr) -> list[Expr]:
    """d sum(x, axes) = g broadcast back over the reduced axes."""
    x, a = call.args[0], call.attrs
    return [_broadcast_like(_unreduce(g, x, a.axis, a.keepdims), x)]


@_rule("mean")
def _mean_grad(call: Call, g: Expr) -> list[Expr]:
    """d mean(x, axes) = g / n broadcast back over the reduced axes, n elements per mean."""
    x, a = call.args[0], call.attrs
    n = _count(x, _axes(a.axis, _tensor(x).ndim))
    return [_div(_broadcast_like(_unreduce(g, x, a.axis, a.keepdims), x), n)]


@_rule("max", "min")
def _extreme_grad(call: Call, g: Expr) -> list[Expr]:
    """d max(x, axes) = g * [x == max] / (number of ties), broadcast back (min alike)."""
    x, a = call.args[0], call.attrs
    assert isinstance(call.op, Op)
    extreme = op_call(call.op.name, x, axis=a.axis, keepdims=True)
    hit = op_call("cast_like", op_call("equal", x, extreme), x)
    ties = _sum(hit, a.axis, keepdims=True)
    return [_mul(hit, _div(_unreduce(g, x, a.axis, a.keepdims), ties))]


@_rule("prod")
def _prod_grad(call: Call, g: Expr) -> list[Expr]:
    """d prod(x) = g * prod(x) / x; where a group has one zero, the others' product there."""
    x, a = call.args[0], call.attrs
    zero, one = _scalar(0, x), _scalar(1, x)
    is_zero = op_call("equal", x, zero)
    nonzero = _where(is_zero, one, x)
    rest = op_call("prod", nonzero, axis=a.axis, keepdims=True)  # the product of the non-zeros
    zeros = _sum(op_call("cast_like", is_zero, x), a.axis, keepdims=True)
    lone_zero = op_call("logical_and", is_zero, op_call("equal", zeros, one))
    dx = _where(op_call("equal", zeros, zero), _div(rest, nonzero), _where(lone_zero, rest, zero))
    return [_mul(_unreduce(g, x, a.axis, a.keepdims), dx)]


@_rule("collapse_sum_like")
def _collapse_sum_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d collapse_sum_like(x, t) = (g broadcast to x's shape, 0)."""
    x, like = call.args
    return [_broadcast_like(g, x), _zeros(like)]
