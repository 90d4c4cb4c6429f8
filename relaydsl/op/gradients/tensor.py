"""Gradient rules of the elementwise and broadcasting ops (relaydsl/op/tensor.py)."""
from __future__ import annotations

from relaydsl.ir.expr import Call, Expr
from relaydsl.op.gradients.common import (
    op_call, _collapse, _div, _elementwise, _mul, _rule, _scalar, _sub, _tensor, _through_cast,
    _where, _zeros,
)

# ---- elementwise --------------------------------------------------------------------------------

_elementwise("negative", "d(-x) = -g.", lambda g, x, y: op_call("negative", g))
_elementwise("exp", "d exp(x) = g * exp(x).", lambda g, x, y: _mul(g, y))
_elementwise("log", "d log(x) = g / x.", lambda g, x, y: _div(g, x))
_elementwise("sqrt", "d sqrt(x) = g * 0.5 / sqrt(x).",
             lambda g, x, y: _div(_mul(g, _scalar(0.5, x)), y))
_elementwise("rsqrt", "d rsqrt(x) = g * -0.5 * rsqrt(x) / x.",
             lambda g, x, y: _mul(_mul(g, _scalar(-0.5, x)), _div(y, x)))
_elementwise("tanh", "d tanh(x) = g * (1 - tanh(x)**2).",
             lambda g, x, y: _mul(g, _sub(_scalar(1, x), _mul(y, y))))
_elementwise("sigmoid", "d sigmoid(x) = g * s * (1 - s), s = sigmoid(x).",
             lambda g, x, y: _mul(_mul(g, y), _sub(_scalar(1, x), y)))
_elementwise("relu", "d relu(x) = g where x > 0, else 0.",
             lambda g, x, y: _where(op_call("greater", x, _scalar(0, x)), g, _scalar(0, x)))
_elementwise("abs", "d|x| = g where x >= 0, else -g (JAX's choice at 0).",
             lambda g, x, y: _where(op_call("greater_equal", x, _scalar(0, x)), g,
                                    op_call("negative", g)))


@_rule("clip")
def _clip_grad(call: Call, g: Expr) -> list[Expr]:
    """d clip(x, lo, hi) = g where lo <= x <= hi, else 0."""
    x, a = call.args[0], call.attrs
    inside = op_call("logical_and", op_call("greater_equal", x, _scalar(a.a_min, x)),
                   op_call("less_equal", x, _scalar(a.a_max, x)))
    return [_where(inside, g, _scalar(0, x))]


@_rule("cast")
def _cast_grad(call: Call, g: Expr) -> list[Expr]:
    """d cast(x) = cast_like(g, x), or 0 unless x and the result are float."""
    return [_through_cast(g, call.args[0], call.attrs.dtype)]


@_rule("cast_like")
def _cast_like_grad(call: Call, g: Expr) -> list[Expr]:
    """d cast_like(x, t) = (cast_like(g, x), 0), or 0 for x unless x and t are float."""
    x, like = call.args
    return [_through_cast(g, x, _tensor(like).dtype), _zeros(like)]


# ---- broadcasting binary ops --------------------------------------------------------------------

@_rule("add")
def _add_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x + y) = (sum_b(g, x), sum_b(g, y))."""
    x, y = call.args
    return [_collapse(g, x), _collapse(g, y)]


@_rule("subtract")
def _subtract_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x - y) = (sum_b(g, x), sum_b(-g, y))."""
    x, y = call.args
    return [_collapse(g, x), _collapse(op_call("negative", g), y)]


@_rule("multiply")
def _multiply_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x * y) = (sum_b(g * y, x), sum_b(g * x, y))."""
    x, y = call.args
    return [_collapse(_mul(g, y), x), _collapse(_mul(g, x), y)]


@_rule("divide")
def _divide_grad(call: Call, g: Expr) -> list[Expr]:
    """d(x / y) = (sum_b(g / y, x), sum_b(-g * (x / y) / y, y))."""
    x, y = call.args
    return [_collapse(_div(g, y), x),
            _collapse(_div(_mul(op_call("negative", g), call), y), y)]


@_rule("power")
def _power_grad(call: Call, g: Expr) -> list[Expr]:
    """d x**y = (sum_b(g * y * x**(y-1), x), sum_b(g * x**y * log x, y)); 0 at y == 0 / x == 0."""
    x, y = call.args
    zero, one = _scalar(0, x), _scalar(1, x)
    dx = _where(op_call("equal", y, zero), zero,
                _mul(y, op_call("power", x, _sub(y, one))))
    log_x = op_call("log", _where(op_call("equal", x, zero), one, x))
    return [_collapse(_mul(g, dx), x), _collapse(_mul(g, _mul(call, log_x)), y)]


def _chooser_grad(call: Call, g: Expr, wins: str) -> list[Expr]:
    """Each input of maximum/minimum gets g where it wins (`wins` compares), half of g at ties."""
    x, y = call.args
    half = _mul(g, _scalar(0.5, x))
    tie = op_call("equal", x, y)

    def share(a: Expr, b: Expr) -> Expr:
        return _collapse(_where(op_call(wins, a, b), g, _where(tie, half, _scalar(0, x))), a)

    return [share(x, y), share(y, x)]


@_rule("maximum")
def _maximum_grad(call: Call, g: Expr) -> list[Expr]:
    """d max(x, y) = (sum_b(g * [x > y] + g/2 * [x == y], x), likewise for y)."""
    return _chooser_grad(call, g, "greater")


@_rule("minimum")
def _minimum_grad(call: Call, g: Expr) -> list[Expr]:
    """d min(x, y) = (sum_b(g * [x < y] + g/2 * [x == y], x), likewise for y)."""
    return _chooser_grad(call, g, "less")


@_rule("where")
def _where_grad(call: Call, g: Expr) -> list[Expr]:
    """d where(c, x, y) = (0, sum_b(where(c, g, 0), x), sum_b(where(c, 0, g), y))."""
    cond, x, y = call.args
    zero = _scalar(0, x)
    return [_zeros(cond), _collapse(_where(cond, g, zero), x), _collapse(_where(cond, zero, g), y)]
